"""``llmsim serve --replicas N``: the extra replicas, each an ``llmsim serve`` process that dies with its
parent, restarted on its own port when it exits."""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import TextIO

from ..isolation import die_with_parent

__all__ = ["heal", "say", "start_replicas", "stop_replicas"]

Replica = tuple[subprocess.Popen[str], str]  # the process and its URL


def _replica_argv(argv: Sequence[str], port: int) -> list[str]:
    """``llmsim serve`` arguments for one more replica: the same, on ``port``, as a single replica."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--port", "--replicas"):
            skip = True
            continue
        if arg.startswith(("--port=", "--replicas=")):
            continue
        out.append(arg)
    return [*out, "--port", str(port)]


def _start_replica(argv: Sequence[str], number: int, port: int) -> tuple[subprocess.Popen[str], str]:
    """Replica ``number`` as an ``llmsim serve`` process on ``port`` that dies with this one; its URL (or OSError)."""
    process = subprocess.Popen([sys.executable, "-m", "pytest_llmsim.cli", "serve", *_replica_argv(argv, port)],
                               stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"},
                               preexec_fn=die_with_parent if sys.platform.startswith("linux") else None)
    assert process.stdout is not None
    line = process.stdout.readline()
    process.stdout.close()  # the URL is all the parent reads; the replica's later lines go nowhere
    match = re.search(r" at (http://\S+)", line)
    if match is None:
        process.kill()
        process.wait()
        raise OSError(f"replica {number} did not start on port {port}: {line.strip() or 'no output'}")
    return process, match.group(1)


def start_replicas(argv: Sequence[str], args: argparse.Namespace) -> list[tuple[subprocess.Popen[str], str]]:
    """Replicas 2..N (see :func:`_start_replica`); their processes and URLs (or OSError)."""
    started: list[tuple[subprocess.Popen[str], str]] = []
    for index in range(1, args.replicas):
        try:
            started.append(_start_replica(argv, index + 1, args.port + index if args.port else 0))
        except OSError:
            stop_replicas(started)
            raise
    return started


def heal(replicas: list[tuple[subprocess.Popen[str], str]], argv: Sequence[str]) -> None:
    """Restart, on its own port, each replica whose process has exited (killed, out of memory); log it."""
    for index, (process, url) in enumerate(replicas):
        status = process.poll()
        if status is None:
            continue
        number, port = index + 2, int(url.rsplit(":", 1)[1].split("/")[0])
        how = f"killed by {signal.Signals(-status).name}" if status < 0 else f"exited with status {status}"
        try:
            replicas[index] = _start_replica(argv, number, port)
        except OSError as error:
            say(f"llmsim: replica {number} (pid {process.pid}) {how}; restarting it failed, trying again: {error}",
                 sys.stderr)
            continue
        say(f"llmsim: replica {number} (pid {process.pid}) {how}; restarted on port {port} "
             f"(pid {replicas[index][0].pid})", sys.stderr)


def say(text: str, stream: TextIO | None = None) -> None:
    """Print a line; once the reader is gone (a replica whose parent was killed), print nothing more."""
    out = stream or sys.stdout
    try:
        print(text, file=out, flush=True)
    except (BrokenPipeError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, out.fileno())  # so the interpreter's last flush does not raise again at exit
        os.close(devnull)


def stop_replicas(replicas: list[tuple[subprocess.Popen[str], str]]) -> None:
    for process, _ in replicas:
        process.send_signal(signal.SIGINT)
    for process, _ in replicas:
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None and not process.stdout.closed:
            process.stdout.close()
