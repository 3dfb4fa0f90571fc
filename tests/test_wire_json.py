"""JSON on the wire: orjson's bytes, the standard library's where orjson cannot, the same JSON either way."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from pytest_llmsim import LLMBackend
from pytest_llmsim.sim import wire_json

BODY: dict[str, Any] = {"id": "chatcmpl-1", "created": 1796080493, "choices": [{"index": 0, "message": {
    "role": "assistant", "content": "héllo ✓ \"quoted\"\n\x00", "refusal": None}, "logprobs": [-0.25, 1e-05]}],
    "usage": {"prompt_tokens": 24, "ok": True}}


def test_compact_utf8_json_that_parses_back_to_the_value() -> None:
    data = wire_json.dumps(BODY)
    assert json.loads(data) == BODY
    assert b": " not in data and b", " not in data.replace(b'", "', b"")  # compact
    assert "héllo ✓".encode() in data  # UTF-8, no \\u escapes for text


def test_what_orjson_does_not_take_is_written_by_the_standard_library(monkeypatch: pytest.MonkeyPatch) -> None:
    echoed = {"seed": 2 ** 70, 7: "int key"}  # a 65-bit integer a client sent; a non-string key
    assert json.loads(wire_json.dumps(echoed)) == {"seed": 2 ** 70, "7": "int key"}
    monkeypatch.setattr(wire_json, "orjson", None)  # an interpreter without orjson's wheels
    assert json.loads(wire_json.dumps(BODY)) == BODY
    assert wire_json.dumps({"a": [1, "é"]}) == b'{"a":[1,"\xc3\xa9"]}'


@pytest.mark.parametrize("stream", [False, True])
def test_a_non_ascii_answer_reaches_the_sdk_whole(llm_backend: LLMBackend, stream: bool) -> None:
    llm_backend.reply_with("Grüße, 世界 ✓")
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="sk-test", max_retries=0)
    ask = [{"role": "user", "content": "hi"}]
    if stream:
        text = "".join(chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(
            model="llmsim", messages=ask, stream=True) if chunk.choices)
    else:
        text = client.chat.completions.create(model="llmsim", messages=ask).choices[0].message.content or ""
    assert text == "Grüße, 世界 ✓"


# What orjson reads differently from the standard library, or refuses: each must read as json.loads reads it.
ODD_BODIES = [
    b'{"seed": 123456789012345678901234567890}',  # past 64 bits: orjson would make it a float
    b'{"seed": -9223372036854775809}', b'[18446744073709551616]',
    b'{"n": 1234567890123456789}', b'{"digits": "12345678901234567890"}',  # 19 digits: the standard library
    b'{"t": NaN, "u": Infinity, "v": -Infinity}', b'[1e400]',  # not RFC 8259: only the standard library takes them
    b'\xef\xbb\xbf{"bom": 1}', '{"utf16": "é"}'.encode("utf-16"),
    b'{"lone": "\\ud800"}', b'{"pair": "\\ud83d\\ude00"}', b'{"a": 1, "a": 2}', b'{"zero": "\\u0000", "neg": -0.0}',
    b'  {"spaced" :\t[1 , 2.5e-3 ]}\n',
]
BAD_BODIES = [b'{"a": 1,}', b"{'a': 1}", b'{"a": "\xff"}', b"", b"[" * 1100 + b"]" * 1100, b'{"a": "\x01"}']


@pytest.mark.parametrize("data", ODD_BODIES)
def test_a_body_reads_as_the_standard_library_reads_it(data: bytes) -> None:
    got, want = wire_json.loads(data), json.loads(data)
    assert repr(got) == repr(want)  # repr: NaN compares unequal to itself, and 1 == 1.0 would hide a float


@pytest.mark.parametrize("data", BAD_BODIES)
def test_a_body_the_standard_library_refuses_is_refused_with_its_error(data: bytes) -> None:
    with pytest.raises((ValueError, RecursionError)) as ours:
        wire_json.loads(data)
    with pytest.raises((ValueError, RecursionError)) as theirs:
        json.loads(data)
    assert type(ours.value) is type(theirs.value)


def test_a_body_reads_the_same_without_orjson(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire_json, "orjson", None)
    assert wire_json.loads(b'{"seed": 123456789012345678901234567890, "x": [1.5]}') == {
        "seed": 123456789012345678901234567890, "x": [1.5]}


def test_a_huge_integer_in_a_request_is_refused_as_an_integer_not_read_as_a_float(llm_backend: LLMBackend) -> None:
    """orjson reads 2**70 as a float: the answer must be the one the integer gets (the standard library's)."""
    import httpx
    url = llm_backend.url_for("/v1/chat/completions")
    ask = {"model": "llmsim", "messages": [{"role": "user", "content": "hi"}]}
    big = httpx.post(url, content=json.dumps({**ask, "max_tokens": 2 ** 70}), timeout=10)
    as_float = httpx.post(url, content=json.dumps({**ask, "max_tokens": float(2 ** 70)}), timeout=10)
    assert big.status_code == 400 and as_float.status_code == 400
    assert big.json()["error"]["message"] != as_float.json()["error"]["message"]
    assert llm_backend.requests[0].body["max_tokens"] == 2 ** 70
