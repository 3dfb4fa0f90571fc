"""Process isolation: a backend run as an ``llmsim serve`` subprocess, driven as a RemoteBackend.

The simulator then shares no GIL with the code under test, which matters when
the gateway is an in-process ASGI app or the test itself keeps a core busy.
The subprocess listens on a free loopback port with a random control token,
dies with its parent (``PR_SET_PDEATHSIG`` on Linux, so also when pytest is
killed) and is stopped with the fixture that started it.
"""

from __future__ import annotations

import ctypes
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
from typing import Any

from .config import SimConfig
from .remote import RemoteBackend

__all__ = ["ProcessBackend", "spawn_backend"]

STARTUP_TIMEOUT = 30.0
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        except OSError:
            pass


class ProcessBackend(RemoteBackend):
    """A :class:`RemoteBackend` whose ``llmsim serve`` process this handle owns."""

    def __init__(self, url: str, token: str, process: subprocess.Popen[str]) -> None:
        super().__init__(url, token=token)
        self.process = process

    def stop(self) -> None:
        """Stop the subprocess (Ctrl-C, then a kill if it does not exit within 5 s)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()

    def __repr__(self) -> str:
        return f"<ProcessBackend {self.base_url} pid={self.process.pid}>"


def spawn_backend(config: SimConfig, host: str = "127.0.0.1", io: str = "threads") -> ProcessBackend:
    """Start ``llmsim serve`` on a free port of ``host`` and return its handle, set to ``config``.

    ``io="gevent"`` serves it with ``llmsim serve --io gevent`` (one thread, a greenlet per connection).
    """
    token = secrets.token_hex(16)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    errors = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - the process owns it; closed on failure
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest_llmsim.cli", "serve", "--host", host, "--port", "0",
         "--control-token", token, "--model", config.model, "--io", io],
        stdout=subprocess.PIPE, stderr=errors, stdin=subprocess.DEVNULL, text=True, env=env,
        preexec_fn=die_with_parent if sys.platform.startswith("linux") else None)
    errors.close()  # the child has its own copy of the descriptor
    line = _first_line(process)
    match = re.search(r"(http://[^\s]+?)/v1", line)
    if match is None:
        process.kill()
        process.communicate()
        raise RuntimeError(f"llmsim serve did not start on {host}: {line!r}")
    backend = ProcessBackend(match.group(1), token, process)
    backend.reset(config)
    return backend


def _first_line(process: subprocess.Popen[str]) -> str:
    """The server's first line (its URL), or "" if it says nothing within the startup timeout."""
    assert process.stdout is not None
    out: list[Any] = []
    reader = threading.Thread(target=lambda: out.append(process.stdout.readline()  # type: ignore[union-attr]
                                                        ), daemon=True)
    reader.start()
    reader.join(STARTUP_TIMEOUT)
    return str(out[0]) if out else ""
