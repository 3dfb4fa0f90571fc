"""``llmsim serve`` in its own process, for tests of what a hostile or broken client does to a server.

A crash then fails the test (the process is gone) instead of killing pytest.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from typing import Any

import httpx

CHAT = "/v1/chat/completions"


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, **extra}


class Served:
    """A ``llmsim serve`` process (or ``command``, a server that prints its URL first, the same way) and its URL."""

    def __init__(self, io: str, *flags: str, command: list[str] | None = None) -> None:
        self.io = io
        self.process = subprocess.Popen(
            command or [sys.executable, "-m", "pytest_llmsim.cli", "serve", "--port", "0", "--speed", "inf",
                        "--io", io, *flags],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        match = re.search(r"(https?)(://127\.0\.0\.1:(\d+))", self.process.stdout.readline())
        assert match, self.process.stderr.read() if self.process.stderr else ""
        self.port = int(match.group(3))
        self.url = "http" + match.group(2)  # the port answers plain HTTP too (with tls on: the control API)
        self.secure_url = "https" + match.group(2)

    def post(self, path: str, body: Any, timeout: float = 20) -> httpx.Response:
        return httpx.post(self.url + path, json=body, timeout=timeout)

    def assert_alive(self) -> None:
        """The process runs and answers an innocent request at once."""
        assert self.process.poll() is None, f"the server died: exit {self.process.returncode}"
        started = time.monotonic()
        response = self.post(CHAT, chat(), timeout=10)
        assert response.status_code == 200 and time.monotonic() - started < 5  # ms when alive; 5 s: a loaded machine

    def stop(self) -> str:
        """Stop the server; what it wrote on stderr."""
        self.process.send_signal(signal.SIGINT)
        try:
            return self.process.communicate(timeout=10)[1]
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.communicate()[1]

    def rss_kib(self) -> int:
        """The process's resident memory now (from /proc)."""
        with open(f"/proc/{self.process.pid}/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))

    def threads(self) -> int:
        """The process's threads now (from /proc)."""
        with open(f"/proc/{self.process.pid}/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))
