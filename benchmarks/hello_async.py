"""``hello_wsgi.py``'s canned answer as an ASGI app (uvicorn) and an RSGI app (granian): yardsticks for http_layer.py.

    uvicorn --http httptools --loop uvloop --workers 1 --port PORT hello_async:asgi
    granian --interface rsgi --workers 1 --port PORT hello_async:rsgi
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from hello_wsgi import BODY

_ASGI_HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]
_RSGI_HEADERS = [("content-type", "application/json")]


async def asgi(scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]],
               send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
    if scope["type"] != "http":  # lifespan: nothing to set up
        return
    while (await receive()).get("more_body"):  # consume the posted body, as a real server does
        pass
    await send({"type": "http.response.start", "status": 200, "headers": _ASGI_HEADERS})
    await send({"type": "http.response.body", "body": BODY})


async def rsgi(scope: Any, protocol: Any) -> None:
    await protocol()  # the posted body
    protocol.response_bytes(200, _RSGI_HEADERS, BODY)
