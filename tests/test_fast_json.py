"""JSON on the wire: orjson's bytes, the standard library's where orjson cannot, the same JSON either way."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pytest_llmsim import LLMBackend
from pytest_llmsim.sim import fast_json

BODY: dict[str, Any] = {"id": "chatcmpl-1", "created": 1796080493, "choices": [{"index": 0, "message": {
    "role": "assistant", "content": "héllo ✓ \"quoted\"\n\x00", "refusal": None}, "logprobs": [-0.25, 1e-05]}],
    "usage": {"prompt_tokens": 24, "ok": True}}


def test_compact_utf8_json_that_parses_back_to_the_value() -> None:
    data = fast_json.dumps(BODY)
    assert json.loads(data) == BODY
    assert b": " not in data and b", " not in data.replace(b'", "', b"")  # compact
    assert "héllo ✓".encode() in data  # UTF-8, no \\u escapes for text


def test_what_orjson_does_not_take_is_written_by_the_standard_library(monkeypatch: pytest.MonkeyPatch) -> None:
    echoed = {"seed": 2 ** 70, 7: "int key"}  # a 65-bit integer a client sent; a non-string key
    assert json.loads(fast_json.dumps(echoed)) == {"seed": 2 ** 70, "7": "int key"}
    monkeypatch.setattr(fast_json, "orjson", None)  # an interpreter without orjson's wheels
    assert json.loads(fast_json.dumps(BODY)) == BODY
    assert fast_json.dumps({"a": [1, "é"]}) == b'{"a":[1,"\xc3\xa9"]}'


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
    got, want = fast_json.loads(data), json.loads(data)
    assert repr(got) == repr(want)  # repr: NaN compares unequal to itself, and 1 == 1.0 would hide a float


@pytest.mark.parametrize("data", BAD_BODIES)
def test_a_body_the_standard_library_refuses_is_refused_with_its_error(data: bytes) -> None:
    with pytest.raises((ValueError, RecursionError)) as ours:
        fast_json.loads(data)
    with pytest.raises((ValueError, RecursionError)) as theirs:
        json.loads(data)
    assert type(ours.value) is type(theirs.value)


def test_a_body_reads_the_same_without_orjson(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast_json, "orjson", None)
    assert fast_json.loads(b'{"seed": 123456789012345678901234567890, "x": [1.5]}') == {
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


# Strings full of what could fool a scan for the structure: quotes, backslashes, brackets, escapes.
_TRICKY_TEXT = st.text(alphabet='ab"\\[]{}/\n\t\u00e9\u2022', max_size=12)
_JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | _TRICKY_TEXT,
                            lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TRICKY_TEXT, inner,
                                                                                          max_size=4),
                            max_leaves=30)


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(_JSON_VALUES, st.booleans())
def test_the_strings_cut_out_of_json_text_by_replaces_and_a_split_are_those_the_regex_cuts(
        value: Any, ascii_only: bool) -> None:
    """The depth check's fast cut of a JSON text's strings gives exactly what the string regex gives."""
    from pytest_llmsim.api import validation

    data = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert validation.outside_strings(data) == validation._JSON_STRING.sub(b"", data)


def test_the_depth_check_reads_nesting_past_escaped_quotes_and_backslashes() -> None:
    from pytest_llmsim.api.validation import MAX_JSON_DEPTH, json_depth_exceeds, outside_strings

    deep = json.dumps({"s": '\\" [[[ {{ "', "n": [[[]]] * 50}).encode()  # many brackets, some inside a string
    assert outside_strings(b'{"a": "x\\\\", "b": "\\"[", "c": ["\\\\\\""]}') == b'{: , : , : []}'
    assert not json_depth_exceeds(deep)
    nested = b"[" * (MAX_JSON_DEPTH + 1) + b'"]\\\\\\"' + b'"' + b"]" * (MAX_JSON_DEPTH + 1)
    assert json.loads(nested) and json_depth_exceeds(nested)  # too deep, a string of brackets in the middle
    utf16 = json.dumps([[["x"]] * 60]).encode("utf-16")  # NUL bytes: the regex, as before
    assert b"x" not in outside_strings(utf16).replace(b"\x00", b"") and not json_depth_exceeds(utf16)


def test_a_canonical_text_parses_back_to_its_value_whatever_orjson_cannot_write() -> None:
    """The schema checks' cache key: keys sorted, and exact (orjson writes NaN as null: those go to json)."""
    import math

    values = [{"b": 1, "a": [1.5, "é", True]}, {"minimum": math.inf}, {"minimum": None}, {"big": 2 ** 70},
              {"x": -0.0, "y": 1e-300}]
    keys = [fast_json.canonical(value) for value in values]
    assert keys[0] == b'{"a":[1.5,"\xc3\xa9",true],"b":1}'  # orjson's own text, sorted
    assert len(set(keys)) == len(keys)  # an infinity and a null never share a key
    for value, key in zip(values, keys):
        assert json.loads(key) == value and fast_json.canonical(json.loads(key)) == key
    assert math.isnan(json.loads(fast_json.canonical({"m": math.nan}))["m"])
    assert fast_json.canonical({"b": 1, "a": 2}) == fast_json.canonical({"a": 2, "b": 1})


def test_an_exact_text_holds_a_null_only_where_the_value_does() -> None:
    """A null in orjson's text is a None of the value (an agent's optional arguments), never a NaN or an
    infinity it wrote as null: those have no exact text, and neither has a 65-bit integer."""
    import math

    optional = {"type": "object", "properties": {"q": {"anyOf": [{"type": "string"}, {"type": "null"}],
                                                       "default": None}}}
    assert fast_json.exact(optional) == b'{"type":"object","properties":{"q":{"anyOf":[{"type":"string"},' \
                                        b'{"type":"null"}],"default":null}}}'
    assert fast_json.exact([optional, None]) is not None
    for inexact in ({"m": math.nan}, {"m": math.inf, "n": None}, [-math.inf], {"big": 2 ** 70}, {1: "x"}):
        assert fast_json.exact(inexact) is None
    assert fast_json.exact({"s": "null"}) == b'{"s":"null"}'  # a string that says null is no null


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


@example("[", 0)  # a bracket only inside a string, at limit 0: was judged too deep (found by hypothesis)
@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(_JSON_VALUES, st.integers(0, 6))
def test_the_nesting_check_agrees_with_the_depth_of_the_parsed_value(value: Any, limit: int) -> None:
    """``json_depth_exceeds`` (brackets outside strings, innermost pairs removed a level per pass) says what a
    recursive walk of the parsed value says, at every limit."""
    from pytest_llmsim.api.validation import json_depth_exceeds

    data = json.dumps(value).encode()
    assert json_depth_exceeds(data, limit) == (_depth(value) > limit)
