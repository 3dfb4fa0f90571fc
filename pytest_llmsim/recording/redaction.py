"""Credentials out of a cassette: every place an API takes a key, replaced by its fingerprint.

Headers (``Authorization``, ``x-api-key``, ``api-key``, ``x-goog-api-key``, cookies, ``X-Amz-Security-Token``,
``Proxy-Authorization``), the API keys an OpenAI Realtime client puts in ``Sec-WebSocket-Protocol``
(``openai-insecure-api-key.KEY``), query parameters (``key``, ``api_key``, ``api-key``, ``access_token``,
``token`` and AWS's presigned ``X-Amz-Credential``, ``X-Amz-Signature``, ``X-Amz-Security-Token``), and keys in
JSON bodies (any member named like one, at any depth). A fingerprint (``…1234 (sha256:0a1b2c3d)``) tells two
keys apart without holding either.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable
from typing import Any

from ..sim.secrets import SECRET_HEADERS, key_fingerprint

__all__ = ["BODY_KEYS", "QUERY_KEYS", "redact_body", "redact_headers", "redact_query"]

#: Response headers that set credentials (never kept either).
_SECRET_RESPONSE_HEADERS = frozenset({"set-cookie"})
#: Query parameters that carry a credential (lower-case).
QUERY_KEYS = frozenset({"key", "api_key", "api-key", "apikey", "access_token", "token", "x-amz-credential",
                        "x-amz-signature", "x-amz-security-token", "sig", "signature"})
#: JSON members that carry a credential wherever they are in a body (lower-case, ``-`` and ``_`` alike).
BODY_KEYS = frozenset({"api_key", "apikey", "key", "access_token", "secret", "client_secret", "password",
                       "authorization", "x_api_key", "aws_secret_access_key", "aws_session_token"})
_PROTOCOL_KEY = re.compile(r"^(openai-insecure-api-key\.|openai-organization\.|openai-project\.)(.+)$")


def _fingerprint(value: str) -> str:
    return "redacted:" + key_fingerprint(value)


def redact_headers(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """``(name, value)`` pairs with every credential replaced by its fingerprint."""
    out = []
    for name, value in pairs:
        lowered = name.lower()
        if lowered in SECRET_HEADERS or lowered in _SECRET_RESPONSE_HEADERS:
            value = _fingerprint(value)
        elif lowered == "sec-websocket-protocol":
            value = ", ".join(_protocol(part.strip()) for part in value.split(","))
        out.append((name, value))
    return out


def _protocol(part: str) -> str:
    found = _PROTOCOL_KEY.match(part)
    return found.group(1) + _fingerprint(found.group(2)) if found else part


def redact_query(query: str) -> str:
    """A query string with each credential parameter's value replaced by its fingerprint."""
    if not query:
        return query
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    return urllib.parse.urlencode([(name, _fingerprint(value) if name.lower() in QUERY_KEYS else value)
                                   for name, value in pairs])


def redact_body(body: Any) -> Any:
    """A parsed JSON body with every member named like a credential replaced by its fingerprint (at any depth)."""
    if isinstance(body, dict):
        return {name: (_fingerprint(value) if isinstance(value, str) and name.lower().replace("-", "_") in BODY_KEYS
                       else redact_body(value)) for name, value in body.items()}
    if isinstance(body, list):
        return [redact_body(item) for item in body]
    return body
