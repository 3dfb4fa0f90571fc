"""The event-loop core's HTTP layer alone: ``LoopServer`` serving ``hello_wsgi.py``'s canned answer.

What ``llmsim serve --io loop`` costs per request besides the simulator: run this, load it with wrk, and read
the process's CPU from /proc (docs/performance.md, "Where a chat request's time goes, phase by phase").
Serves until SIGTERM or Ctrl-C; prints its URL first.

    python benchmarks/loop_hello.py [--port 0]
    wrk -t2 -c16 -d6s -s benchmarks/post_chat.lua URL/
"""

from gevent import monkey

monkey.patch_all()  # before anything imports socket or threading, as llmsim serve --io loop does

import argparse  # noqa: E402 - after the patch
import signal  # noqa: E402
import sys  # noqa: E402
from types import FrameType  # noqa: E402

from hello_wsgi import app  # noqa: E402

from pytest_llmsim.server.loop_server import LoopServer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = LoopServer("127.0.0.1", args.port, app)

    def stop(signum: int, frame: FrameType | None) -> None:
        server.server_close()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"http://127.0.0.1:{server.port}/", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
