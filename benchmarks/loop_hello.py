"""The HTTP layer alone: the connection core (``ConnectionServer``) serving ``hello_wsgi.py``'s canned answer.

What ``llmsim serve`` costs per request besides the simulator: run this, load it with wrk, and read the
process's CPU from /proc (docs/performance.md, "Where a chat request's time goes, phase by phase").
``--io loop`` (the default) runs in a process gevent has patched, a greenlet per connection, as
``llmsim serve --io loop`` does; ``--io threads`` a thread per connection, as the embedded default does.
Serves until SIGTERM or Ctrl-C; prints its URL first.

    python benchmarks/loop_hello.py [--port 0] [--io loop|threads]
    wrk -t2 -c16 -d6s -s benchmarks/post_chat.lua URL/
"""

import sys

if "threads" not in sys.argv:
    from gevent import monkey

    monkey.patch_all()  # before anything imports socket or threading, as llmsim serve --io loop does

import argparse
import signal
from types import FrameType

from hello_wsgi import app

from pytest_llmsim.server.listener import ConnectionServer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--io", choices=("loop", "threads"), default="loop")
    args = parser.parse_args()
    server = ConnectionServer("127.0.0.1", args.port, app)

    def stop(signum: int, frame: FrameType | None) -> None:
        server.server_close()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"http://127.0.0.1:{server.port}/", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
