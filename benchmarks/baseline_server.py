"""A bare werkzeug threaded server answering every request with a canned completion.

The throughput baseline: same HTTP stack as pytest-llmsim, none of the simulation.
With ``--keepalive`` its handler speaks HTTP/1.1, which werkzeug's handler
keeps open when the answer has a length (its default, HTTP/1.0, closes every
connection), so a comparison of kept-alive runs stays fair.

    python benchmarks/baseline_server.py [--keepalive]
"""

from __future__ import annotations

import json
import signal
import socket
import sys
import threading

from werkzeug.serving import WSGIRequestHandler, make_server
from werkzeug.wrappers import Request, Response

CANNED = json.dumps({
    "id": "chatcmpl-0123456789abcdef01234567", "object": "chat.completion", "created": 1700000000,
    "model": "llmsim", "system_fingerprint": "fp_llmsim",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "The model answer token batch "
                 "cache prefix request server latency stream queue time first second simulated",
                 "refusal": None, "annotations": []}, "logprobs": None, "finish_reason": "length"}],
    "usage": {"prompt_tokens": 25, "completion_tokens": 16, "total_tokens": 41,
              "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
              "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                            "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
    "service_tier": "default",
})


class QuietHandler(WSGIRequestHandler):
    """No access log, as pytest-llmsim writes none: the comparison is the HTTP work."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass


class KeptAliveHandler(QuietHandler):
    """werkzeug's handler on HTTP/1.1 (kept alive), and no access log."""

    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # Nagle off, as in pytest-llmsim: on a kept-alive connection a response's
        # second small write would otherwise wait for the client's delayed ACK (40 ms).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)


@Request.application  # type: ignore[arg-type]
def app(request: Request) -> Response:
    request.get_data()
    return Response(CANNED, content_type="application/json")


def main() -> None:
    handler = KeptAliveHandler if "--keepalive" in sys.argv else QuietHandler
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=handler)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    print(f"baseline at http://127.0.0.1:{server.port}", flush=True)
    stop.wait()
    server.shutdown()
    server.server_close()
    sys.exit(0)


if __name__ == "__main__":
    main()
