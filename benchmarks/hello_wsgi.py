"""A WSGI hello-world answering with a canned chat completion: the reference server for serving_modes.py.

    granian --interface wsgi --workers 1 --port PORT hello_wsgi:app
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

BODY = (b'{"id": "chatcmpl-0", "object": "chat.completion", "created": 0, "model": "llmsim", "choices": '
        b'[{"index": 0, "message": {"role": "assistant", "content": "The quick brown fox jumps over the lazy '
        b'dog again."}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 23, "completion_tokens": 16, '
        b'"total_tokens": 39}}')
HEADERS = [("Content-Type", "application/json"), ("Content-Length", str(len(BODY)))]


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    stream = environ["wsgi.input"]
    while stream.read(65536):  # consume the posted body, as a real server does
        pass
    start_response("200 OK", HEADERS)
    return [BODY]
