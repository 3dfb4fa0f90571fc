"""Who a replica is, on every answer, for the routers and endpoint pickers that read it there.

``x-inference-pod`` and ``x-inference-namespace``, from the ``POD_NAME`` and ``POD_NAMESPACE``
environment variables (Kubernetes' downward API sets them in a pod), as llm-d-inference-sim sends them.
Read once, when a server starts; a process without them sends neither header.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["POD_HEADERS", "identity_headers"]

# environment variable -> the response header that carries it
POD_HEADERS = {"POD_NAME": "x-inference-pod", "POD_NAMESPACE": "x-inference-namespace"}


def identity_headers(environ: Mapping[str, str] = os.environ) -> tuple[tuple[str, str], ...]:
    """The identity headers this process's answers carry (none when the variables are unset or empty)."""
    return tuple((header, environ[name]) for name, header in POD_HEADERS.items() if environ.get(name))
