"""``llmsim serve --replicas N``: the extra replicas, each an ``llmsim serve`` process that dies with its
parent, restarted on its own port when it exits. With ``--shared-port`` they all listen on the parent's
port too (``SO_REUSEPORT``); a replica's URL here is then its own port's."""

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


def _replica_argv(argv: Sequence[str], port: int, shared: int | None = None, number: int = 1) -> list[str]:
    """``llmsim serve`` arguments for replica ``number``: the same, on ``port``, as a single replica (with a
    ``shared`` port: listening on it too)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--port", "--replicas", "--own-port", "--replica-number"):
            skip = True
            continue
        if arg.startswith(("--port=", "--replicas=", "--own-port=", "--replica-number=")):
            continue
        out.append(arg)
    out += ["--replica-number", str(number)]
    if shared is not None:
        return [*out, "--port", str(shared), "--own-port", str(port)]
    return [*out, "--port", str(port)]


def _start_replica(argv: Sequence[str], number: int, port: int,
                   shared: int | None = None) -> tuple[subprocess.Popen[str], str]:
    """Replica ``number`` as an ``llmsim serve`` process on ``port`` (and the ``shared`` one) that dies with
    this one; its URL on ``port`` (or OSError)."""
    process = subprocess.Popen([sys.executable, "-m", "pytest_llmsim.cli", "serve",
                                *_replica_argv(argv, port, shared, number)],
                               stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"},
                               preexec_fn=die_with_parent if sys.platform.startswith("linux") else None)
    assert process.stdout is not None
    line = process.stdout.readline()
    process.stdout.close()  # the URL is all the parent reads; the replica's later lines go nowhere
    match = re.search(r"its own port (http://[^\s)]+)", line) or re.search(r" at (http://[^\s,)]+)", line)
    if match is None:
        process.kill()
        process.wait()
        raise OSError(f"replica {number} did not start on port {port}: {line.strip() or 'no output'}")
    return process, match.group(1)


def start_replicas(argv: Sequence[str], args: argparse.Namespace,
                   shared: int | None = None) -> list[tuple[subprocess.Popen[str], str]]:
    """Replicas 2..N (see :func:`_start_replica`), on consecutive ports after ``--port`` (after the first
    replica's own port with a ``shared`` one); their processes and URLs (or OSError)."""
    started: list[tuple[subprocess.Popen[str], str]] = []
    offset = 1 if shared is not None else 0  # the first replica's own port is --port + 1
    for index in range(1, args.replicas):
        try:
            port = args.port + index + offset if args.port else 0
            started.append(_start_replica(argv, index + 1, port, shared))
        except OSError:
            stop_replicas(started)
            raise
    return started


def heal(replicas: list[tuple[subprocess.Popen[str], str]], argv: Sequence[str], shared: int | None = None) -> None:
    """Restart, on its own port (and the ``shared`` one), each replica whose process has exited (killed, out of
    memory); log it."""
    for index, (process, url) in enumerate(replicas):
        status = process.poll()
        if status is None:
            continue
        number, port = index + 2, int(url.rsplit(":", 1)[1].split("/")[0])
        how = f"killed by {signal.Signals(-status).name}" if status < 0 else f"exited with status {status}"
        try:
            replicas[index] = _start_replica(argv, number, port, shared)
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
