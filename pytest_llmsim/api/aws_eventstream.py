"""AWS's binary event-stream framing (``application/vnd.amazon.eventstream``), written once.

A message is a prelude (total length, headers length, both big-endian
32-bit, then the CRC32 of those 8 bytes), the headers (each a 1-byte name
length, the name, a type byte — 7, a string — a 2-byte value length and the
value), the payload, and the CRC32 of everything before it. Bedrock streams
events (``:message-type: event``, ``:event-type``) and ends a stream that
fails with an exception (``:message-type: exception``, ``:exception-type``).
``tests/test_http_bedrock.py`` reads these bytes with botocore's own parser.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

from ..sim import fast_json

__all__ = ["CONTENT_TYPE", "event", "exception", "message"]

CONTENT_TYPE = "application/vnd.amazon.eventstream"
_STRING = 7
_PRELUDE = struct.Struct(">II")
_CRC = struct.Struct(">I")


def _headers(headers: tuple[tuple[str, str], ...]) -> bytes:
    out = []
    for name, value in headers:
        raw_name, raw_value = name.encode(), value.encode()
        out.append(b"%c%s%c%s%s" % (len(raw_name), raw_name, _STRING, struct.pack(">H", len(raw_value)), raw_value))
    return b"".join(out)


def message(headers: tuple[tuple[str, str], ...], payload: bytes) -> bytes:
    """One event-stream message: prelude, its CRC, headers, payload, the message's CRC."""
    encoded = _headers(headers)
    prelude = _PRELUDE.pack(12 + len(encoded) + len(payload) + 4, len(encoded))
    head = prelude + _CRC.pack(zlib.crc32(prelude)) + encoded + payload
    return head + _CRC.pack(zlib.crc32(head))


def event(event_type: str, body: dict[str, Any]) -> bytes:
    """An event whose payload is ``body`` as JSON."""
    return message(((":event-type", event_type), (":content-type", "application/json"),
                    (":message-type", "event")), fast_json.dumps(body))


def exception(exception_type: str, text: str) -> bytes:
    """An exception message (``throttlingException``, ``modelStreamErrorException``, ...)."""
    return message(((":exception-type", exception_type), (":content-type", "application/json"),
                    (":message-type", "exception")), fast_json.dumps({"message": text}))
