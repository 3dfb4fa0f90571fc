"""The ``--io`` modes that need more than the plugin's own install, and what each needs.

``loop`` (and its other name, ``gevent``) runs in a process gevent has patched.
The command line and the plugin's process isolation say the same thing when
it is missing.
"""

from __future__ import annotations

import importlib.util

__all__ = ["IO_REQUIREMENTS", "missing_for_io"]

#: What each cooperative ``--io`` mode needs installed, and the extra that brings it.
IO_REQUIREMENTS = {"gevent": (("gevent",), "gevent"), "loop": (("gevent",), "serve")}


def missing_for_io(io: str) -> str | None:
    """What ``llmsim serve --io io`` lacks, as "needs PACKAGE: pip install ..."; None when nothing is."""
    packages, extra = IO_REQUIREMENTS.get(io, ((), ""))
    for package in packages:
        if importlib.util.find_spec(package) is None:
            return f"needs {package}: pip install 'pytest-llmsim[{extra}]'"
    return None
