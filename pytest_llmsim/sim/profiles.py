"""Profiles: presets of settings shipped in ``pytest_llmsim/profiles/`` and TOML files of them.

A profile is a table of settings (``llmsim calibrate`` writes one); :class:`~.config.SimConfig` applies
its settings first and the call's own on top.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from .setting_checks import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["PROFILES_DIR", "check_profile", "is_profile_path", "load_profile", "profile_names"]

PROFILES_DIR = Path(__file__).parent.parent / "profiles"  # pytest_llmsim/profiles


def profile_names() -> list[str]:
    """The presets shipped with pytest-llmsim (``profile="NAME"``)."""
    return sorted(path.stem for path in PROFILES_DIR.glob("*.toml"))


def is_profile_path(name: str) -> bool:
    """Whether a ``profile`` value names a file (``.toml``) rather than a shipped preset."""
    return name.endswith(".toml")


def load_profile(name: Any) -> dict[str, Any]:
    """A preset's settings (``pytest_llmsim/profiles/NAME.toml``), or a TOML file's when ``name`` is a path."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"invalid value for 'profile': {name!r} (expected a preset name or a .toml path)")
    if is_profile_path(name):
        path = Path(name)
        try:
            found = path.is_file()
        except OSError:  # a name too long for the file system, ...
            found = False
    else:  # a preset: only the shipped names, never a path made of one ("../x")
        path = PROFILES_DIR / f"{name}.toml"
        found = name in profile_names()
    if not found:
        raise ConfigError(f"unknown profile {name[:100]!r}; presets: {', '.join(profile_names())} (or a .toml path)")
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"profile {name!r} cannot be read: {error}") from None
    data.pop("profile", None)
    data.pop("calibration", None)  # llmsim calibrate's record of what the fit saw: for llmsim predict, not a setting
    return data


def check_profile(name: str, value: Any) -> str | None:
    """The ``profile`` setting's check: a preset's name or a readable ``.toml`` path (or None)."""
    if value is not None:
        load_profile(value)  # raises ConfigError naming the presets
    return None if value is None else str(value)
