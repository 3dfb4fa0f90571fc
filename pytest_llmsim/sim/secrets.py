"""Credentials that leave the process are fingerprinted, never sent as they came.

The request log keeps the headers a client sent (a test asserts which key a
gateway forwarded), but what leaves the process (the control API's
``/llmsim/v1/requests``, and so :class:`~pytest_llmsim.RemoteBackend`)
shows each credential as ``scheme …last4 (sha256:8 hex digits)``: enough to
tell keys apart and to check one with :func:`key_fingerprint`, not enough to
use one.
"""

from __future__ import annotations

import hashlib
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

from .request import SimError

__all__ = ["SECRET_HEADERS", "accepted_key", "key_fingerprint", "presented_credentials", "redact_headers"]

#: Request headers whose values are credentials (lower-case names).
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie",
                            "x-goog-api-key", "x-amz-security-token"})
# A credential shorter than this shows no characters at all (four of eight would be half of it).
_SHOWN_FROM = 12


def key_fingerprint(value: str) -> str:
    """The redacted form of a credential: ``"Bearer sk-…"`` -> ``"Bearer …1234 (sha256:0a1b2c3d)"``.

    A header value with an auth scheme keeps the scheme; the hash and the
    last four characters are of the credential after it, so the fingerprint
    of a bare key (``key_fingerprint("sk-...")``) is the end of its header's.
    """
    scheme, space, credential = value.partition(" ")
    if not space or not scheme.isalpha() or not credential.strip():
        scheme, credential = "", value
    credential = credential.strip()
    digest = hashlib.sha256(credential.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    tail = credential[-4:] if len(credential) >= _SHOWN_FROM else ""
    return f"{scheme + ' ' if scheme else ''}…{tail} (sha256:{digest})"


def redact_headers(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """``(name, value)`` pairs with every credential's value replaced by its fingerprint."""
    return [(name, key_fingerprint(value) if name.lower() in SECRET_HEADERS else value) for name, value in pairs]


_SIGV4_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")
#: Headers that carry an API key as it is (OpenAI's Azure, Anthropic, Google).
KEY_HEADERS = ("x-api-key", "api-key", "x-goog-api-key")


def presented_credentials(headers: Mapping[str, str] | Any, query_string: str = "") -> tuple[list[str], bool]:
    """The credentials a request presents (``headers``: case-insensitive, werkzeug's ``Headers``), and
    whether it is SigV4-signed: a bearer token, an API key header, a ``?key=``, or a signature's access
    key id (``Credential=AKID/...``)."""
    found: list[str] = []
    signed = False
    authorization = headers.get("Authorization") or ""
    scheme, _, rest = authorization.strip().partition(" ")
    if scheme.lower() == "bearer" and rest.strip():
        found.append(rest.strip())
    elif scheme.upper().startswith("AWS4-HMAC-SHA256"):
        signed = True
        match = _SIGV4_CREDENTIAL.search(rest)
        if match is not None:
            found.append(match.group(1))
    for name in KEY_HEADERS:
        value = headers.get(name)
        if value:
            found.append(value.strip())
    if query_string:
        found.extend(value for key, value in urllib.parse.parse_qsl(query_string) if key == "key")
    return found, signed


def accepted_key(accepted: list[str], headers: Mapping[str, str] | Any, query_string: str = "") -> str | None:
    """The first of the ``accepted`` keys the request presents (None when ``accepted`` is empty: any will
    do), else a 401 (403 for a SigV4-signed request, as AWS answers a key it does not know)."""
    if not accepted:
        return None
    presented, signed = presented_credentials(headers, query_string)
    match = next((key for key in presented if key in accepted), None)
    if match is not None:
        return match
    if signed:
        raise SimError(403, "The security token included in the request is invalid (the access key id is not "
                            "one of the backend's keys).", code="invalid_api_key")
    shown = f"{presented[0][:3]}...{presented[0][-4:]}" if presented else "none"
    raise SimError(401, f"Incorrect API key provided: {shown}. The backend accepts the keys set as api_keys or "
                        "required_api_key.", code="invalid_api_key")
