"""Helpers shared by the benchmarks: start servers in their own processes."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))

CHAT_BODY = ('{"model": "llmsim", "messages": [{"role": "system", "content": "You are a helpful '
             'assistant."}, {"role": "user", "content": "Say something short."}], "max_tokens": 16}')


@contextmanager
def server_process(argv: Sequence[str], url_pattern: str = r"(http://127\.0\.0\.1:\d+)",
                   cwd: str | None = None) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Run a server that prints its URL on its first line; yield (process, root URL)."""
    # stderr to a file: an undrained pipe would stall a chatty server
    errors = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in the finally below
    process = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=errors, text=True, cwd=cwd)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = re.search(url_pattern, line)
        if not match:
            errors.seek(0)
            raise RuntimeError(f"server did not start: {line!r} {errors.read()}")
        yield process, match.group(1)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        errors.close()


@contextmanager
def worktree(revision: str) -> Iterator[str]:
    """``revision`` checked out in a temporary git worktree (removed afterwards)."""
    root = os.path.dirname(HERE)
    with tempfile.TemporaryDirectory(prefix="llmsim-base-") as parent:
        path = os.path.join(parent, "tree")
        subprocess.run(["git", "-C", root, "worktree", "add", "--detach", "-q", path, revision], check=True)
        try:
            yield path
        finally:
            subprocess.run(["git", "-C", root, "worktree", "remove", "--force", path], check=False)


@contextmanager
def llmsim_from(tree: str | None, *flags: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``llmsim serve FLAGS`` running the code of ``tree`` (None: this checkout, as installed).

    Started in ``tree``: ``python -m`` puts the working directory first on
    ``sys.path``, ahead of ``PYTHONPATH`` and of an editable install.
    """
    if tree is not None:
        imported = subprocess.run([sys.executable, "-c", "import pytest_llmsim; print(pytest_llmsim.__file__)"],
                                  cwd=tree, capture_output=True, text=True, check=True).stdout.strip()
        if not imported.startswith(os.path.realpath(tree)):
            raise RuntimeError(f"the server would run {imported}, not the code in {tree}")
    with server_process(llmsim_argv(*flags), cwd=tree) as served:
        yield served


def llmsim_argv(*flags: str) -> list[str]:
    return [sys.executable, "-m", "pytest_llmsim.cli", "serve", "--port", "0", *flags]


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    """A process's resident memory in KiB (``VmHWM`` for its peak), from /proc."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field}")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used so far, from /proc (Linux)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_listening(process: subprocess.Popen[Any], port: int, seconds: float = 30) -> None:
    """Wait until something listens on loopback ``port`` (a server that prints nothing useful first);
    RuntimeError if ``process`` exits or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"{process.args!r} did not start listening on {port}") from None
            time.sleep(0.1)


def wait_ready(seconds: float = 0.3) -> None:
    time.sleep(seconds)


def chunks_per_second(url: str, seconds: float) -> tuple[float, int]:
    """Content events/s the Node client receives over 16 closed-loop streams of 100 tokens; requests done."""
    out = subprocess.run(["node", os.path.join(HERE, "closed_loop_client.mjs"), url, "16", str(seconds), "16",
                          "100"], capture_output=True, text=True, check=True).stdout
    result = json.loads(out)
    events = len(result["ttfts"]) + len(result["gaps"])
    return events / result["window"], result["completed"]
