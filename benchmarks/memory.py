"""RSS of `llmsim serve` while it serves 100,000 requests: it should stay flat.

wrk drives the server in rounds; after each round the script reads the
server's request count from /metrics and its RSS from /proc. The request log
keeps the last `max_log_entries` (default 10,000) and each latency
distribution the last 50,000 samples, so memory stops growing once those
fill; counters and histograms are fixed-size.

    python benchmarks/memory.py [--requests 100000]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import urllib.request

from common import HERE, llmsim_argv, rss_kib, server_process, wait_ready


def served(url: str) -> int:
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    return int(sum(float(v) for v in re.findall(r'^llmsim:requests_total\{.*\} ([\d.e+]+)$', text, re.M)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--round-seconds", type=int, default=5)
    args = parser.parse_args()
    with server_process(llmsim_argv("--speed", "inf")) as (process, url):
        wait_ready()
        start = rss_kib(process.pid)
        print(f"{0:>8} requests  RSS {start / 1024:7.1f} MiB", flush=True)
        samples = []
        while served(url) < args.requests:
            subprocess.run(["wrk", "-t2", "-c16", f"-d{args.round_seconds}s", "-s",
                            os.path.join(HERE, "post_chat.lua"), url + "/v1/chat/completions"],
                           capture_output=True, check=True)
            rss = rss_kib(process.pid)
            samples.append((served(url), rss))
            print(f"{samples[-1][0]:>8} requests  RSS {rss / 1024:7.1f} MiB", flush=True)
    half = [rss for n, rss in samples if n >= args.requests // 2]
    print(f"start {start / 1024:.1f} MiB; after {samples[-1][0]} requests {samples[-1][1] / 1024:.1f} MiB; "
          f"growth over the second half {(max(half) - min(half)) / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
