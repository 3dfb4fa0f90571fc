"""Compressed answers and request bodies: ``Content-Encoding`` as real providers and gateways use it.

With the ``compression`` setting on (``"gzip"``, or ``"br"`` where the ``brotli``
package is installed), a JSON answer, an error body or a stream (SSE, NDJSON)
is compressed when the request's ``Accept-Encoding`` allows the coding, with
``Content-Encoding`` and ``Vary: Accept-Encoding`` set. A stream is compressed
piece by piece, each flushed, so every event reaches the client when it is
written, as real providers' gzip streams do. Faults keep their meaning before
compression (``drop``'s tokens, ``malformed``'s bytes, ``max_response_bytes``);
the ``bad_encoding`` fault then breaks the coding itself: a body whose
``Content-Encoding`` lies (``mode="lie"``), or a gzip stream cut mid-member
(``mode="truncate"``).

A request body with ``Content-Encoding: gzip``, ``deflate`` or ``br`` is decoded
before it is read, within the same body limit after decoding (a decompression
bomb is a 413 once it passes the limit, not a memory spike); another coding is
a 415.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..sim.fault_effects import ENCODING_CUT, ENCODING_LIE

__all__ = [
    "COMPRESSED_TYPES",
    "ENCODING_FAULT_KEY",
    "STREAMING_KEY",
    "UnsupportedCoding",
    "compressing_app",
    "decode_body",
    "negotiate",
]

try:  # Google's brotli bindings: "br" only where they are installed
    import brotli  # type: ignore[import-untyped]
except ImportError:  # pragma: no cover - depends on the environment
    brotli = None

# What is compressed: JSON answers and errors, SSE and NDJSON streams (not binary event streams: AWS never does).
COMPRESSED_TYPES = ("application/json", "text/event-stream", "application/x-ndjson", "application/problem+json")
# environ keys: the coding an answer is being compressed with (the stream writer's engine-side fast path writes
# uncompressed bytes straight to the socket, so it stands aside), and the bad_encoding fault's mode.
STREAMING_KEY = "llmsim.content_coding"
ENCODING_FAULT_KEY = "llmsim.bad_encoding"
GZIP_WBITS = 16 + zlib.MAX_WBITS  # a gzip member (header and trailer), not a raw or zlib stream


class UnsupportedCoding(ValueError):
    """A request body in a ``Content-Encoding`` this server does not decode (a 415)."""


def negotiate(accept_encoding: str | None, coding: str) -> str | None:
    """The coding to answer with: ``coding`` if ``Accept-Encoding`` allows it (RFC 9110 §12.5.3: listed or
    ``*`` with a q-value above 0), else None (identity)."""
    if not accept_encoding or coding == "off":
        return None
    star: float | None = None
    for item in accept_encoding.split(","):
        name, _, params = item.strip().partition(";")
        quality = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        name = name.strip().lower()
        if name == coding or (coding == "gzip" and name == "x-gzip"):
            return coding if quality > 0 else None
        if name == "*":
            star = quality
    return coding if star is not None and star > 0 else None


class _Encoder:
    """One answer's compressor: ``piece`` for each piece of a stream (flushed), ``finish`` at its end."""

    def __init__(self, coding: str) -> None:
        self._brotli = brotli.Compressor() if coding == "br" else None
        self._zlib = None if coding == "br" else zlib.compressobj(6, zlib.DEFLATED, GZIP_WBITS)

    def whole(self, data: bytes) -> bytes:
        return self.piece(data, flush=False) + self.finish()

    def piece(self, data: bytes, flush: bool = True) -> bytes:
        if self._brotli is not None:
            out: bytes = self._brotli.process(data)
            return out + self._brotli.flush() if flush else out
        assert self._zlib is not None
        out = self._zlib.compress(data)
        return out + self._zlib.flush(zlib.Z_SYNC_FLUSH) if flush else out

    def finish(self) -> bytes:
        if self._brotli is not None:
            return bytes(self._brotli.finish())
        assert self._zlib is not None
        return self._zlib.flush(zlib.Z_FINISH)


def _compressible(status: str, headers: list[tuple[str, str]], environ: dict[str, Any]) -> bool:
    if environ.get("REQUEST_METHOD") == "HEAD" or status[:3] in ("204", "304") or status[0] == "1":
        return False
    content_type = ""
    for name, value in headers:
        lowered = name.lower()
        if lowered == "content-encoding":
            return False
        if lowered == "content-type":
            content_type = value.split(";")[0].strip().lower()
    return content_type in COMPRESSED_TYPES


def compressing_app(app: Callable[..., Iterable[bytes]], setting: Callable[[], str]) -> Callable[..., Iterable[bytes]]:
    """``app`` (WSGI) with its answers compressed as the ``compression`` setting and each request allow."""

    def compressed(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        coding = setting()
        chosen = None if coding == "off" else negotiate(environ.get("HTTP_ACCEPT_ENCODING"), coding)
        if chosen is not None:
            environ[STREAMING_KEY] = chosen
        state: dict[str, Any] = {}

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[..., Any]:
            if coding != "off":
                headers = [*headers, ("Vary", "Accept-Encoding")]
            fault = environ.get(ENCODING_FAULT_KEY)  # set by the route, before it starts its answer
            use = "gzip" if fault is not None and chosen is None else chosen  # a fault breaks a gzip body anyway
            if use is None or not _compressible(status, headers, environ):
                return start_response(status, headers, exc_info)  # type: ignore[no-any-return]
            state["encoder"] = _Encoder(use)
            state["sized"] = any(name.lower() == "content-length" for name, _ in headers)
            state["fault"] = fault
            headers = [(name, value) for name, value in headers if name.lower() != "content-length"]
            headers.append(("Content-Encoding", use))
            if not state["sized"]:
                return start_response(status, headers, exc_info)  # type: ignore[no-any-return]
            state["start"] = lambda length: start_response(status, [*headers, ("Content-Length", str(length))],
                                                           exc_info)
            return _no_write

        body = app(environ, start)
        encoder: _Encoder | None = state.get("encoder")
        if encoder is None:
            return body
        if state["sized"]:  # a whole answer: compressed at once, its length the compressed one
            try:
                data = b"".join(body)
            finally:
                close = getattr(body, "close", None)
                if close is not None:
                    close()
            out = encoder.whole(data)
            if state["fault"] == ENCODING_LIE:
                out = data
            elif state["fault"] == ENCODING_CUT:
                out = out[:max(1, len(out) // 2)]
            state["start"](len(out))
            return [out]
        return _CompressedStream(body, encoder, state["fault"])

    return compressed


def _no_write(data: bytes) -> None:  # pragma: no cover - the routes never call WSGI's write()
    raise RuntimeError("write() is not supported on a compressed answer")


class _CompressedStream:
    """A streamed answer's pieces compressed one by one, each flushed; its ``close`` reaches the stream's."""

    def __init__(self, body: Iterable[bytes], encoder: _Encoder, fault: str | None) -> None:
        self._body = body
        self._encoder = encoder
        self._fault = fault

    def __iter__(self) -> Iterator[bytes]:
        if self._fault == ENCODING_LIE:  # the plain events under a gzip header
            yield from self._body
            return
        sent = False
        for piece in self._body:
            if not piece:
                yield b""  # the head goes out on admission, as without compression
                continue
            out = self._encoder.piece(piece)
            if self._fault == ENCODING_CUT and sent:  # cut mid-member: half of this piece, then nothing more
                yield out[:max(1, len(out) // 2)]
                return
            sent = True
            yield out
        if self._fault != ENCODING_CUT:
            yield self._encoder.finish()

    def close(self) -> None:
        close = getattr(self._body, "close", None)
        if close is not None:
            close()


def decode_body(data: bytes, coding: str | None, limit: int) -> bytes:
    """``data`` decoded from ``Content-Encoding`` ``coding`` (identity: as is), at most ``limit`` bytes of it
    (raises ``OverflowError`` past the limit, ``ValueError`` for a body that does not decode,
    :class:`UnsupportedCoding` for a coding not served here)."""
    codings = [item.strip().lower() for item in (coding or "").split(",") if item.strip()]
    for name in reversed(codings):  # the last applied is listed last (RFC 9110 §8.4)
        if name == "identity":
            continue
        if name in ("gzip", "x-gzip", "deflate"):
            # deflate is zlib-wrapped by the RFC, raw in some clients: zlib's auto-detect (32+) takes gzip
            # and zlib; a raw stream is tried after.
            decoder = zlib.decompressobj(32 + zlib.MAX_WBITS)
            try:
                out = decoder.decompress(data, limit + 1)
            except zlib.error:
                if name != "deflate":
                    raise ValueError(f"the body is not valid {name}") from None
                decoder = zlib.decompressobj(-zlib.MAX_WBITS)
                try:
                    out = decoder.decompress(data, limit + 1)
                except zlib.error:
                    raise ValueError("the body is not valid deflate") from None
            if len(out) > limit:
                raise OverflowError(limit)
            if not decoder.eof:
                raise ValueError(f"the {name} body ends before its end (truncated)")
            data = out
        elif name == "br" and brotli is not None:
            decompressor = brotli.Decompressor()
            try:
                out = decompressor.process(data, output_buffer_limit=limit + 1)
            except (brotli.error, TypeError):
                raise ValueError("the body is not valid br") from None
            if len(out) > limit:
                raise OverflowError(limit)
            if not decompressor.is_finished():
                raise ValueError("the br body ends before its end (truncated)")
            data = out
        else:
            raise UnsupportedCoding(name)
    return data
