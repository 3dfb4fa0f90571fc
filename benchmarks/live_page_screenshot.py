"""Redraw docs/images/live-page.png: the live page of `llmsim serve` under a closed-loop load.

`llmsim serve` (ttft 0.05 s, itl 0.01 s, batch 8, speed 1) gets 12 closed-loop clients in another
process (chats, streams, Anthropic Messages, now and then a fault by header) and a rate_limit fault
armed for 10 % of requests; the page, open since the start, is photographed 3 s before the load ends by
Debian's Chromium through Playwright (``--chromium PATH`` or ``LLMSIM_CHROMIUM``; never downloaded).

    python benchmarks/live_page_screenshot.py [--seconds 25] [--out docs/images/live-page.png]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shutil
import threading
import time
import urllib.request

import httpx
from common import HERE, llmsim_argv, server_process, wait_ready

MESSAGES = [{"role": "user", "content": "Tell me about the weather."}]


def client_loop(url: str, seconds: float, seed: int) -> None:
    rng = random.Random(seed)
    deadline = time.monotonic() + seconds
    with httpx.Client(timeout=30) as client:
        while time.monotonic() < deadline:
            body = {"model": rng.choice(["gpt-4o-mini", "llama-3-8b"]), "messages": MESSAGES,
                    "max_tokens": rng.randint(8, 40)}
            choice = rng.random()
            try:
                if choice < 0.4:
                    client.post(url + "/v1/chat/completions", json=body)
                elif choice < 0.75:
                    with client.stream("POST", url + "/v1/chat/completions", json={**body, "stream": True}) as r:
                        for _ in r.iter_bytes():
                            pass
                elif choice < 0.92:
                    client.post(url + "/v1/messages", json={**body, "model": "claude-sonnet-4-5"})
                else:
                    client.post(url + "/v1/chat/completions", json=body,
                                headers={"x-llmsim-fault": rng.choice(["server_error", "overloaded"])})
            except httpx.HTTPError:
                pass


def load(url: str, seconds: float, clients: int) -> None:
    loops = [threading.Thread(target=client_loop, args=(url, seconds, i)) for i in range(clients)]
    for loop in loops:
        loop.start()
    for loop in loops:
        loop.join()


def control(url: str, method: str, path: str, body: object) -> None:
    request = urllib.request.Request(url + "/llmsim/v1/" + path, data=json.dumps(body).encode(), method=method,
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request).read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=25)
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--out", default=os.path.join(HERE, "..", "docs", "images", "live-page.png"))
    parser.add_argument("--chromium", default=os.environ.get("LLMSIM_CHROMIUM") or shutil.which("chromium"))
    args = parser.parse_args()
    if not args.chromium:
        parser.error("no Chromium found: install Debian's chromium or pass --chromium PATH")
    from playwright.sync_api import sync_playwright

    flags = ["--ttft", "0.05", "--itl", "0.01", "--max-batch-size", "8", "--speed", "1"]
    with server_process(llmsim_argv(*flags)) as (_, url), sync_playwright() as playwright:
        wait_ready()
        control(url, "POST", "faults", {"kind": "rate_limit", "rate": 0.1, "retry_after": 0})
        control(url, "POST", "rules", {"name": "weather", "prompt": "weather", "text": "Sunny.", "times": 3})
        browser = playwright.chromium.launch(executable_path=args.chromium)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(url + "/llmsim/ui")
        worker = multiprocessing.Process(target=load, args=(url, args.seconds, args.clients))
        worker.start()
        time.sleep(max(args.seconds - 3, 1))  # photographed under load
        page.screenshot(path=args.out, full_page=True)
        browser.close()
        worker.join()
    print(f"wrote {os.path.normpath(args.out)}")


if __name__ == "__main__":
    main()
