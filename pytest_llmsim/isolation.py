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
from typing import IO, Any

from .remote import RemoteBackend
from .sim.config import SimConfig

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
    """A :class:`RemoteBackend` whose ``llmsim serve`` process this handle owns.

    If the process dies (killed, out of memory), :meth:`death` says how, with its last log lines,
    and :meth:`respawn` starts a new one in its place (on the same port when it is free).
    """

    def __init__(self, url: str, token: str, process: subprocess.Popen[str], log: IO[str] | None = None,
                 argv: list[str] | None = None) -> None:
        super().__init__(url, token=token)
        self.process = process
        self._log = log  # the process's stderr (a temporary file), for the lines before a death
        self._argv = argv or []

    def death(self) -> str | None:
        """How the process died (its exit status and last log lines), or None while it runs."""
        status = self.process.poll()
        if status is None:
            return None
        how = f"killed by {signal.Signals(-status).name}" if status < 0 else f"exited with status {status}"
        lines = self._log_tail()
        tail = "".join(f"\n    {line}" for line in lines) if lines else " (it logged nothing)"
        return f"the backend process (llmsim serve, pid {self.process.pid}, {self.base_url}) {how}; its last log " \
               f"lines:{tail}"

    def _log_tail(self, count: int = 20) -> list[str]:
        if self._log is None:
            return []
        try:
            self._log.seek(0)
            return [line.rstrip("\n") for line in self._log.readlines()[-count:]]
        except (OSError, ValueError):
            return []

    def respawn(self, config: SimConfig) -> None:
        """Start a new ``llmsim serve`` in place of the dead one, set to ``config``."""
        self.stop()
        argv = list(self._argv)
        port_at = argv.index("--port") + 1
        for port in (str(self._port), "0"):  # the same URL if the port is free again
            argv[port_at] = port
            try:
                fresh = _spawn(argv, self._token or "")
                break
            except RuntimeError:
                if port == "0":
                    raise
        self.__dict__.update(fresh.__dict__)
        self.reset(config)

    def stop(self) -> None:
        """Stop the subprocess (Ctrl-C, then a kill if it does not exit within 5 s)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdout, self.process.stderr, self._log):
            if stream is not None:
                stream.close()

    def __repr__(self) -> str:
        return f"<ProcessBackend {self.base_url} pid={self.process.pid}>"


def spawn_backend(config: SimConfig, host: str = "127.0.0.1", io: str = "threads", port: int = 0) -> ProcessBackend:
    """Start ``llmsim serve`` on ``port`` of ``host`` (0: a free one) and return its handle, set to ``config``.

    ``io="gevent"`` serves it with ``llmsim serve --io gevent`` (one thread, a greenlet per connection).
    """
    token = secrets.token_hex(16)
    argv = [sys.executable, "-m", "pytest_llmsim.cli", "serve", "--host", host, "--port", str(port),
            "--control-token", token, "--model", config.model, "--io", io]
    backend = _spawn(argv, token)
    backend.reset(config)
    return backend


def _spawn(argv: list[str], token: str) -> ProcessBackend:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - the handle owns it (closed by stop)
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True,
                               env=env, preexec_fn=die_with_parent if sys.platform.startswith("linux") else None)
    line = _first_line(process)
    match = re.search(r"(http://[^\s]+?)/v1", line)
    if match is None:
        process.kill()
        process.communicate()
        log.seek(0)
        said = log.read()[-2000:]
        log.close()
        raise RuntimeError(f"llmsim serve did not start: {line!r} {said}")
    return ProcessBackend(match.group(1), token, process, log, argv)


def _first_line(process: subprocess.Popen[str]) -> str:
    """The server's first line (its URL), or "" if it says nothing within the startup timeout."""
    assert process.stdout is not None
    out: list[Any] = []
    reader = threading.Thread(target=lambda: out.append(process.stdout.readline()  # type: ignore[union-attr]
                                                        ), daemon=True)
    reader.start()
    reader.join(STARTUP_TIMEOUT)
    return str(out[0]) if out else ""
