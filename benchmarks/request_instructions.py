"""CPU instructions per request, counted by valgrind: a cost figure the machine's load does not move.

``request_cost.py``'s microseconds move by 25 % from one minute to the next on a shared machine, so a
change worth 5 % cannot be seen in a few runs. This runs ``request_cost.py`` under ``valgrind
--tool=callgrind`` (which counts the instructions the process executes, whatever else the machine does)
twice per kind and revision, with ``--requests`` N and 3N, and reports the difference divided by the
difference in requests: the instructions of one request, start-up and warm-up taken out. The hash seed
is fixed so dict layouts match from run to run (repeat runs agree within about 0.1 %).

    python benchmarks/request_instructions.py [--kinds chat,responses] [--requests 200] [REVISION ...]

Each REVISION is a directory holding a checkout of the package (``git worktree add /tmp/base HEAD``);
without one, the checkout this file is in. Needs valgrind (Debian's ``valgrind`` package). About 30 s per
kind and revision.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

from common import HERE
from request_cost import _kinds


def instructions(revision: str, kind: str, requests: int) -> int:
    """Instructions callgrind counted for ``request_cost.py --kinds KIND --requests N --rounds 1`` (which
    runs 2N requests: N to warm up, N timed) in ``revision``."""
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "callgrind.out")
        env = {**os.environ, "PYTHONPATH": revision, "PYTHONHASHSEED": "0"}
        result = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
             os.path.join(HERE, "request_cost.py"), "--kinds", kind, "--rounds", "1", "--requests", str(requests)],
            capture_output=True, text=True, env=env, check=True)
        collected = re.search(r"Collected : (\d+)", result.stderr)
        if collected is None:
            raise RuntimeError(f"callgrind printed no total:\n{result.stderr[-2000:]}")
        return int(collected.group(1))


def per_request(revision: str, kind: str, requests: int) -> float:
    """Instructions of one request of ``kind``: (count at 3N - count at N) / (4N requests)."""
    low = instructions(revision, kind, requests)
    high = instructions(revision, kind, 3 * requests)
    return (high - low) / (4 * requests)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revisions", nargs="*", default=[os.path.dirname(HERE)],
                        help="checkouts to measure (default: this one)")
    parser.add_argument("--kinds", type=_kinds, default=["chat"], help="comma-separated kinds of request_cost.py")
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    print("| request | " + " | ".join(args.revisions) + " | ratio to the first |")
    print("|---|" + "---|" * len(args.revisions) + "---|")
    for kind in args.kinds:
        counts = [per_request(revision, kind, args.requests) for revision in args.revisions]
        ratios = ", ".join(f"{count / counts[0]:.3f}" for count in counts[1:]) or "-"
        print(f"| {kind} | " + " | ".join(f"{count / 1000:,.1f} k" for count in counts) + f" | {ratios} |",
              flush=True)


if __name__ == "__main__":
    main()
