"""Instances generated from JSON Schemas are valid against them (checked with ``jsonschema``)."""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_llmsim.content import tools as tools_module
from pytest_llmsim.content.schema import SchemaError, check_schema, generate_instance
from pytest_llmsim.content.schema_check import _schema_problem
from pytest_llmsim.content.tools import _VERDICTS, MAX_KEPT_VERDICTS, OutputFormat, ToolSpec, ToolUse, check_schemas
from pytest_llmsim.sim import fast_json

FORMATS = ["date-time", "date", "time", "email", "uri", "uuid", "ipv4", "ipv6", "hostname"]
CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER


def _strings() -> st.SearchStrategy[dict[str, Any]]:
    def build(low: int, extra: int | None, fmt: str | None) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "string"}
        if fmt is not None:
            schema["format"] = fmt
            return schema
        schema["minLength"] = low
        if extra is not None:
            schema["maxLength"] = low + extra
        return schema

    return st.builds(build, st.integers(0, 12), st.none() | st.integers(0, 20), st.none() | st.sampled_from(FORMATS))


def _numbers() -> st.SearchStrategy[dict[str, Any]]:
    def build(kind: str, low: int | None, span: int, exclusive: bool, step: int | None) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": kind}
        if low is not None:
            schema["exclusiveMinimum" if exclusive else "minimum"] = low
            schema["maximum"] = low + span + 2
        if step is not None:
            schema["multipleOf"] = step
            schema.pop("exclusiveMinimum", None)
            schema["minimum"] = low if low is not None else 0
            schema["maximum"] = schema["minimum"] + step * (span + 1)
        return schema

    return st.builds(build, st.sampled_from(["integer", "number"]), st.none() | st.integers(-1000, 1000),
                     st.integers(0, 50), st.booleans(), st.none() | st.integers(1, 7))


LEAVES = st.one_of(
    _strings(), _numbers(),
    st.just({"type": "boolean"}), st.just({"type": "null"}),
    st.lists(st.text(min_size=1, max_size=5) | st.integers(), min_size=1, max_size=4, unique=True).map(
        lambda values: {"enum": values}),
    st.just({"$ref": "#/$defs/point"}),
    st.just({"anyOf": [{"type": "string", "maxLength": 3}, {"type": "integer"}]}),
    st.just({"oneOf": [{"type": "string"}, {"type": "integer", "minimum": 0}]}),
)


def _extend(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    def obj(props: dict[str, dict[str, Any]], required_mask: list[bool], extra: bool) -> dict[str, Any]:
        names = list(props)
        required = [n for n, keep in zip(names, required_mask) if keep]
        schema: dict[str, Any] = {"type": "object", "properties": props, "required": required}
        if not extra:
            schema["additionalProperties"] = False
        return schema

    def arr(items: dict[str, Any], low: int, extra: int) -> dict[str, Any]:
        return {"type": "array", "items": items, "minItems": low, "maxItems": low + extra}

    return st.one_of(
        st.builds(obj, st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), children, max_size=5),
                  st.lists(st.booleans(), min_size=5, max_size=5), st.booleans()),
        st.builds(arr, children, st.integers(0, 3), st.integers(0, 3)),
    )


SCHEMAS = st.recursive(LEAVES, _extend, max_leaves=12).map(lambda schema: {
    **schema, "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                                  "required": ["x", "y"], "additionalProperties": False}}})


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(SCHEMAS, st.integers(0, 2**32))
def test_generated_instances_are_valid(schema: dict[str, Any], seed: int) -> None:
    check_schema(schema)
    instance = generate_instance(schema, random.Random(seed))
    jsonschema.validate(instance, schema, cls=jsonschema.Draft202012Validator, format_checker=CHECKER)


def test_same_seed_same_instance() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}, "required": ["a"]}
    assert generate_instance(schema, random.Random(7)) == generate_instance(schema, random.Random(7))
    seen = {str(generate_instance(schema, random.Random(seed))) for seed in range(20)}
    assert len(seen) > 5


def test_recursive_schema_with_optional_children_ends() -> None:
    tree = {"$defs": {"node": {"type": "object", "properties": {"name": {"type": "string"},
                                                                "children": {"type": "array",
                                                                             "items": {"$ref": "#/$defs/node"}}},
                               "required": ["name"]}}, "$ref": "#/$defs/node"}
    for seed in range(50):
        jsonschema.validate(generate_instance(tree, random.Random(seed)), tree)


@pytest.mark.parametrize("schema, fragment", [
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}, "required": ["a"]}, "does not resolve"),
    ({"$defs": {"loop": {"type": "object", "properties": {"next": {"$ref": "#/$defs/loop"}}, "required": ["next"]}},
      "$ref": "#/$defs/loop"}, "nests deeper"),
    ({"type": "integer", "minimum": 5, "maximum": 3}, "no value"),
    ({"type": "array", "minItems": 4, "maxItems": 2}, "minItems"),
    ({"$ref": "https://example.com/schema.json"}, "local $refs"),
])
def test_unsatisfiable_or_unsupported_schemas_say_why(schema: dict[str, Any], fragment: str) -> None:
    with pytest.raises(SchemaError, match=fragment.replace("$", r"\$")):
        generate_instance(schema, random.Random(0))


def test_malformed_schema_is_refused() -> None:
    with pytest.raises(SchemaError, match="invalid JSON Schema"):
        check_schema({"type": "objekt"})
    with pytest.raises(SchemaError, match="must be an object"):
        check_schema("string")


@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(SCHEMAS.filter(lambda s: s.get("type") == "object"))
def test_structured_output_over_http_is_an_instance(llm_backend: Any, schema: dict[str, Any]) -> None:
    """Through the server: ``response_format`` json_schema and a tool's arguments both validate."""
    import httpx

    body = {"model": "m", "messages": [{"role": "user", "content": "go"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "out", "schema": schema}}}
    answer = httpx.post(llm_backend.url_for("/v1/chat/completions"), json=body).json()
    jsonschema.validate(json.loads(answer["choices"][0]["message"]["content"]), schema, format_checker=CHECKER)
    tools = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    called = httpx.post(llm_backend.url_for("/v1/chat/completions"), json={
        "model": "m", "messages": [{"role": "user", "content": "go"}], "tools": tools,
        "tool_choice": "required"}).json()
    arguments = called["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    jsonschema.validate(json.loads(arguments), schema, format_checker=CHECKER)


def test_a_schema_is_checked_once_however_many_requests_bring_it_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """A burst of first requests with the same tools (an agent's) checks their schema against its
    metaschema once (~1 ms each under the GIL), not once per request."""
    _schema_problem.cache_clear()
    checked = 0
    validator_for = jsonschema.validators.validator_for

    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}

    def counting_validator_for(candidate: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal checked
        if candidate == schema:  # the check of our schema (jsonschema also calls it for its own)
            checked += 1
            time.sleep(0.01)  # a slow check: every thread arrives while the first is at it
        return validator_for(candidate, *args, **kwargs)

    monkeypatch.setattr(jsonschema.validators, "validator_for", counting_validator_for)
    start = threading.Barrier(6)

    def first_request() -> None:
        start.wait()
        check_schema(schema)

    threads = [threading.Thread(target=first_request) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert checked == 1


def _tools(*schemas: Any) -> ToolUse:
    return ToolUse(tuple(ToolSpec(f"tool_{i}", schema, f"tools[{i}].function.parameters")
                         for i, schema in enumerate(schemas)))


GOOD = {"type": "object", "properties": {"city": {"type": ["string", "null"], "default": None}}}
BAD = {"type": "object", "properties": {"city": {"type": "no-such-type"}}}


def test_a_set_of_schemas_gets_the_same_verdict_the_second_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent's tools come with every request: the set's verdict is kept, and is what checking each
    schema gives (the first bad one, named by its field), whether the set holds a null or not."""
    _VERDICTS.clear()
    checked: list[Any] = []
    for use in (_tools(GOOD, BAD, BAD), _tools({"type": "object"}, BAD), _tools(GOOD, GOOD)):
        first = check_schemas(use, None)
        monkeypatch.setattr(tools_module, "schema_or_error", lambda schema, param: checked.append(schema))
        assert check_schemas(use, None) == first
        assert checked == []  # kept: not checked again
        monkeypatch.undo()
    problem = check_schemas(_tools(GOOD, BAD, BAD), None)
    assert problem is not None and problem[1] == "tools[1].function.parameters"
    assert check_schemas(_tools(GOOD, GOOD), None) is None
    # the same schemas under other fields, or a NaN where the kept set had a null: other sets
    other = check_schemas(_tools(GOOD, GOOD, BAD), None)
    assert other is not None and other[1] == "tools[2].function.parameters" and "tools[2]" in other[0]
    as_format = check_schemas(None, OutputFormat("json_schema", BAD, "out", "response_format.json_schema.schema"))
    assert as_format is not None and as_format[1] == "response_format.json_schema.schema"
    nan = {"type": "object", "properties": {"n": {"type": "number", "maximum": float("nan")}}}
    null = {"type": "object", "properties": {"n": {"type": "number", "maximum": None}}}
    assert check_schemas(_tools(null), None) is not None  # a maximum must be a number
    assert check_schemas(_tools(nan), None) != check_schemas(_tools(null), None)


def test_the_kept_verdicts_are_bounded() -> None:
    _VERDICTS.clear()
    for i in range(MAX_KEPT_VERDICTS + 10):
        assert check_schemas(_tools({"type": "object", "description": f"tool {i}"}), None) is None
    assert len(_VERDICTS) == MAX_KEPT_VERDICTS


def test_a_kept_tools_tuple_is_found_without_writing_its_schemas(monkeypatch: pytest.MonkeyPatch) -> None:
    """A parser that keeps its tools' objects per list hands the same tuple again: its verdict is found by
    the tuple (held, so no other tuple at its address matches), its schemas not written again; with a
    response format beside the tools the set is found by its text."""
    use = _tools(GOOD, BAD)
    first = check_schemas(use, None)
    written: list[Any] = []
    canonical = fast_json.canonical
    monkeypatch.setattr(fast_json, "canonical", lambda value: written.append(value) or canonical(value))
    assert check_schemas(ToolUse(use.tools, "required"), None) == first  # another ToolUse, the same tuple
    assert written == []
    check_schemas(use, OutputFormat("json_schema", GOOD, "out", "response_format.json_schema.schema"))
    assert len(written) >= 1 and written[0][-1] == [GOOD, "response_format.json_schema.schema"]
