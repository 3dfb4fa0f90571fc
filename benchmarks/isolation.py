"""Thread mode vs process mode when the test process is busy.

A backend in the test's own process shares its GIL: when the test (or an
in-process gateway) keeps a core busy in Python, tokens go out late. A
backend in its own process (``--llmsim-isolation=process``) does not care.
This runs both, each while a thread of this process burns CPU in pure
Python, and measures streams with the Node client (its own process), as
benchmarks/timing_fidelity.py does.

    python benchmarks/isolation.py [--streams 32] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import threading

from timing_fidelity import ITL, TTFT, measure

from pytest_llmsim import LLMBackend, SimConfig
from pytest_llmsim.isolation import spawn_backend


def burn(stop: threading.Event) -> None:
    """Pure-Python work that holds the GIL, as a busy test or an in-process gateway does."""
    total = 0
    while not stop.is_set():
        for i in range(10_000):
            total += i * i


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    config = SimConfig(ttft=TTFT, itl=ITL, max_batch_size=256, speed=1.0)
    for mode in ("thread", "process"):
        backend = spawn_backend(config) if mode == "process" else LLMBackend(config).start()
        try:
            for busy in (False, True):
                stop = threading.Event()
                burner = threading.Thread(target=burn, args=(stop,), daemon=True)
                if busy:
                    burner.start()
                try:
                    runs = [measure(backend.root_url, args.streams) for _ in range(args.repeats)]
                finally:
                    stop.set()
                    if busy:
                        burner.join()
                med = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
                print(f"{mode:7} mode, test process {'busy' if busy else 'idle'}: "
                      f"TTFT p50 {med['ttft_p50'] * 1000:.1f} ms ({med['ttft_p50'] / TTFT - 1:+.1%}), "
                      f"gap p50 {med['gap_p50'] * 1000:.2f} ms, gap p99 {med['gap_p99'] / ITL:.2f}x itl, "
                      f"TTFT p99 {med['ttft_p99'] * 1000:.1f} ms", flush=True)
        finally:
            backend.stop()


if __name__ == "__main__":
    main()
