"""Draw the docs' example timeline (docs/images/timeline-example.svg): a burst of ten requests on a backend
with four batch slots, a 429 and a 500 among them, and a client that hangs up mid-stream.

    python benchmarks/timeline_example.py [--out docs/images/timeline-example.svg]
"""

from __future__ import annotations

import argparse
import threading

import httpx

from pytest_llmsim import LLMBackend


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/images/timeline-example.svg")
    args = parser.parse_args()
    chat = {"model": "llmsim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 12}
    with LLMBackend(ttft=0.2, itl=0.05, max_batch_size=4, speed=10, seed=3) as backend:
        backend.add_fault("rate_limit", times=1)
        url = backend.url_for("/v1/chat/completions")
        threads = [threading.Thread(target=httpx.post, args=(url,), kwargs={"json": chat, "timeout": 30})
                   for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        backend.add_fault("server_error", times=1)
        httpx.post(url, json=chat, timeout=30)
        with httpx.stream("POST", url, json={**chat, "max_tokens": 400, "stream": True}, timeout=30) as stream:
            for number, _ in enumerate(stream.iter_lines()):
                if number > 20:
                    break  # hang up mid-stream
        backend.wait_idle(timeout=10)
        svg = backend.trace_svg(title="tests/test_gateway.py::test_burst_of_ten")
    with open(args.out, "w") as handle:
        handle.write(svg + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
