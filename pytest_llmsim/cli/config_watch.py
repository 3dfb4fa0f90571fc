"""``llmsim serve --config FILE --watch``: the file read again whenever it changes, while the backend serves.

A reload applies the file's settings (under the ``LLMSIM_*`` variables and the command line's flags, which
still win; a setting taken out of the file goes back to its default) with ``configure``, keeping the backend's
state (its queue, cache, metrics and log), and puts the
file's faults, rules and scenario in place of the ones before: the file's, the command line's (``--fault``,
``--replay``) and any armed over the control API since. A file that does not read, or whose settings do
not validate, changes nothing and is reported on standard error; the backend serves on as it was.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from ..backend import LLMBackend
from ..content.replies import Rule
from ..sim.config import ConfigError, SimConfig
from .config_file import load_config

__all__ = ["ConfigWatcher"]


class ConfigWatcher:
    """Reloads ``path`` into ``backend`` when its modification time or size changes (``poll``, called by the
    serving loop every half second). ``pinned`` settings (the environment's and the flags') win over the file;
    ``extra_faults`` and ``extra_rules`` (the command line's) are armed again after the file's."""

    def __init__(self, path: str, backend: LLMBackend, pinned: Mapping[str, Any],
                 extra_faults: list[tuple[str, dict[str, Any]]], extra_rules: list[Rule],
                 say: Callable[[str, TextIO | None], None]) -> None:
        self.path = path
        self.backend = backend
        self.pinned = dict(pinned)
        self.extra_faults = extra_faults
        self.extra_rules = extra_rules
        self.say = say
        self.reloads = 0
        self._seen = self._stamp()

    def _stamp(self) -> tuple[int, int] | None:
        try:
            status = os.stat(self.path)
        except OSError:
            return None
        return status.st_mtime_ns, status.st_size

    def poll(self) -> bool:
        """Reload if the file changed since it was last read; whether it was reloaded."""
        stamp = self._stamp()
        if stamp is None or stamp == self._seen:
            return False
        self._seen = stamp
        try:
            settings, faults, rules, phases = load_config(self.path)
            # the settings as a start with this file would give them: one taken out goes back to its default
            wanted, current = SimConfig().replace(**{**settings, **self.pinned}), self.backend.config
            changed = {field.name: getattr(wanted, field.name) for field in dataclasses.fields(wanted)
                       if field.name != "profile" and getattr(wanted, field.name) != getattr(current, field.name)}
            if changed:
                self.backend.configure(**changed)
        except (OSError, ValueError, ConfigError) as error:
            self.say(f"llmsim: --config {self.path} changed but was not applied: {error}", sys.stderr)
            return False
        self.backend.clear_faults()
        self.backend.clear_rules()
        for kind, params in [*faults, *self.extra_faults]:
            self.backend.add_fault(kind, **params)
        for rule in [*rules, *self.extra_rules]:
            self.backend.add_rule(rule)
        current = self.backend.scenario_state().get("phases", [])
        if [phase.as_mapping() for phase in phases] != [{k: v for k, v in phase.items() if k != "active"}
                                                        for phase in current]:
            try:  # a changed scenario starts again from now; an unchanged one runs on
                self.backend.scenario(*phases)
            except ValueError as error:
                self.say(f"llmsim: --config {self.path}: its scenario was not applied: {error}", sys.stderr)
        self.reloads += 1
        self.say(f"llmsim: --config {self.path} reloaded ({len(settings)} settings, {len(faults)} faults, "
                 f"{len(rules)} rules)", None)
        return True
