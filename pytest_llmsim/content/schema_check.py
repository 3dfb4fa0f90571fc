"""Checking the JSON Schemas a request sends: valid for their draft, and every regex one RE2 can run.

``jsonschema`` (well kept) does the checking; its ``pattern`` and
``patternProperties`` keywords are swapped for RE2 versions
(:func:`linear_time_validator`), so no client regex ever runs under Python's
backtracking ``re``.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterator
from typing import Any

from ..sim import fast_json
from ..sim.patterns import PatternError, compile_pattern

__all__ = ["SchemaError", "check_schema", "linear_time_validator"]


class SchemaError(ValueError):
    """A schema that is malformed or that no instance can satisfy; the message says why."""


def check_schema(schema: Any) -> None:
    """Raise :class:`SchemaError` unless ``schema`` is a valid JSON Schema (its draft's metaschema).

    Verdicts are cached by the schema's JSON text: agents send the same tools
    with every request, and a metaschema check costs about a millisecond.
    """
    if not isinstance(schema, (dict, bool)):
        raise SchemaError(f"a JSON Schema must be an object or a boolean, not {type(schema).__name__}")
    text = fast_json.canonical(schema)  # orjson: 20 tools' keys in 6 µs instead of 80 (json.dumps sorted)
    with _SCHEMA_CHECK:  # a burst of first requests with the same tools checks them once, not each
        problem = _schema_problem(text)
    if problem is not None:
        raise SchemaError(problem)


# lru_cache lets concurrent first calls all compute; one check at a time (they hold the GIL anyway).
_SCHEMA_CHECK = threading.Lock()


@functools.lru_cache(maxsize=512)
def _schema_problem(text: bytes) -> str | None:
    import jsonschema  # deferred: its import costs ~50 ms, only requests with schemas pay it

    schema = json.loads(text)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as error:
        where = "/".join(str(p) for p in error.path)
        return f"invalid JSON Schema{' at ' + where if where else ''}: {error.message}"
    for where, pattern in _patterns(schema, ""):
        try:
            compile_pattern(pattern)
        except PatternError as error:
            return f"invalid JSON Schema at {where or '/'}: {error}"
    return None


_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMAS = ("additionalProperties", "additionalItems", "items", "contains", "not", "if", "then", "else",
               "propertyNames", "unevaluatedItems", "unevaluatedProperties")


def _patterns(schema: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every regex in ``schema`` (``pattern`` values, ``patternProperties`` names), with its schema path."""
    if not isinstance(schema, dict):
        return
    if isinstance(schema.get("pattern"), str):
        yield f"{path}/pattern", schema["pattern"]
    if isinstance(schema.get("patternProperties"), dict):
        for name in schema["patternProperties"]:
            yield f"{path}/patternProperties", name
    for key in _SUBSCHEMA_MAPS:
        if isinstance(schema.get(key), dict):
            for name, sub in schema[key].items():
                yield from _patterns(sub, f"{path}/{key}/{name}")
    for key in _SUBSCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            for index, sub in enumerate(schema[key]):
                yield from _patterns(sub, f"{path}/{key}/{index}")
    for key in _SUBSCHEMAS:
        sub = schema.get(key)
        if isinstance(sub, list):
            for index, item in enumerate(sub):
                yield from _patterns(item, f"{path}/{key}/{index}")
        else:
            yield from _patterns(sub, f"{path}/{key}")


@functools.lru_cache(maxsize=16)
def _linear_time(base: Any) -> Any:
    import jsonschema

    def pattern(validator: Any, regex: str, instance: Any, schema: Any) -> Iterator[Any]:
        if validator.is_type(instance, "string") and compile_pattern(regex).search(instance) is None:
            yield jsonschema.ValidationError(f"{instance!r} does not match {regex!r}")

    def pattern_properties(validator: Any, properties: dict[str, Any], instance: Any, schema: Any) -> Iterator[Any]:
        if not validator.is_type(instance, "object"):
            return
        for regex, subschema in properties.items():
            compiled = compile_pattern(regex)
            for name, value in instance.items():
                if compiled.search(name) is not None:
                    yield from validator.descend(value, subschema, path=name, schema_path=regex)

    return jsonschema.validators.extend(  # type: ignore[no-untyped-call]  # untyped in types-jsonschema
        base, {"pattern": pattern, "patternProperties": pattern_properties})


def linear_time_validator(schema: Any) -> Any:
    """The ``jsonschema`` validator class for ``schema``'s draft, its regexes run by RE2 (never ``re``)."""
    import jsonschema

    return _linear_time(jsonschema.validators.validator_for(schema))
