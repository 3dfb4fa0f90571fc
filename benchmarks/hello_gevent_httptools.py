"""The floor of a Python HTTP layer: gevent's StreamServer and httptools' parser, answering canned bytes.

No WSGI, no environ, no headers kept: a connection's greenlet feeds what arrives to the parser and sends
``hello_wsgi.py``'s answer for every request it completes. What http_layer.py compares the connection core to.

    python benchmarks/hello_gevent_httptools.py [--port 0]
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import socket  # noqa: E402

import httptools  # noqa: E402
from gevent.server import StreamServer  # noqa: E402
from hello_wsgi import BODY  # noqa: E402

ANSWER = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY)) + BODY


class _Requests:
    """httptools' callbacks: count the requests completed in what was fed."""

    def __init__(self) -> None:
        self.complete = 0

    def on_message_complete(self) -> None:
        self.complete += 1


def serve(sock: socket.socket, address: object) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
    requests = _Requests()
    parser = httptools.HttpRequestParser(requests)
    while data := sock.recv(65536):
        parser.feed_data(data)
        if requests.complete:
            sock.sendall(ANSWER * requests.complete)
            requests.complete = 0
    sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = StreamServer(("127.0.0.1", args.port), serve)
    server.init_socket()
    print(f"http://127.0.0.1:{server.server_port}/", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
