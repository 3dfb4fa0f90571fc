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
