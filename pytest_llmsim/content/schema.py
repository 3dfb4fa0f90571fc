"""Instances of a JSON Schema: tool-call arguments and structured output.

A seeded generator, written here because no maintained library fits: we
evaluated ``hypothesis-jsonschema`` (last release 2024-02; Hypothesis
strategies are built for shrinking inside tests, drawing from them at
runtime is slow and discouraged) and ``jsf`` (last release 2024-03; pulls in
Faker and draws from the global ``random``, so it is not seedable per
request). ``jsonschema`` (well kept) checks the schemas a request sends and,
for ``oneOf``, that an instance matches exactly one branch.

What is honoured, always valid: ``type`` (one or a list), ``enum``,
``const``, objects (``properties``, ``required``, optional properties,
``additionalProperties``, ``minProperties``/``maxProperties``), arrays
(``items``, ``prefixItems``, tuple ``items``, ``minItems``/``maxItems``,
``uniqueItems``), strings (``minLength``/``maxLength``, ``format``
``date-time``, ``date``, ``time``, ``email``, ``uri``, ``uuid``, ``ipv4``,
``ipv6``, ``hostname``), numbers and integers (``minimum``/``maximum``,
exclusive bounds in both draft styles, ``multipleOf``), ``anyOf``,
``oneOf``, ``allOf`` (merged), local ``$ref`` into ``$defs``/``definitions``.
``pattern`` is tried, not guaranteed (a string matching an arbitrary regex
cannot be generated in general). Instances are small: strings of one to three
words, arrays of one or two items (more only when ``minItems`` says so),
optional properties included half the time near the top and never below
depth 3.
"""

from __future__ import annotations

import functools
import json
import math
import random
import re
import threading
import uuid
from typing import Any

__all__ = ["SchemaError", "check_schema", "generate_instance"]

MAX_DEPTH = 32  # a recursive schema whose required fields never end is refused past this
OPTIONAL_DEPTH = 3  # optional properties only above this depth: instances stay small
ONE_OF_TRIES = 8
_WORDS = ("alpha", "bravo", "delta", "echo", "river", "stone", "cloud", "maple", "orbit", "pixel",
          "quartz", "signal", "tango", "vector", "willow", "amber", "cedar", "harbor", "lumen", "nova")


class SchemaError(ValueError):
    """A schema that is malformed or that no instance can satisfy; the message says why."""


def check_schema(schema: Any) -> None:
    """Raise :class:`SchemaError` unless ``schema`` is a valid JSON Schema (its draft's metaschema).

    Verdicts are cached by the schema's JSON text: agents send the same tools
    with every request, and a metaschema check costs about a millisecond.
    """
    if not isinstance(schema, (dict, bool)):
        raise SchemaError(f"a JSON Schema must be an object or a boolean, not {type(schema).__name__}")
    text = json.dumps(schema, sort_keys=True)
    with _SCHEMA_CHECK:  # a burst of first requests with the same tools checks them once, not each
        problem = _schema_problem(text)
    if problem is not None:
        raise SchemaError(problem)


# lru_cache lets concurrent first calls all compute; one check at a time (they hold the GIL anyway).
_SCHEMA_CHECK = threading.Lock()


@functools.lru_cache(maxsize=512)
def _schema_problem(text: str) -> str | None:
    import jsonschema  # deferred: its import costs ~50 ms, only requests with schemas pay it

    schema = json.loads(text)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as error:
        where = "/".join(str(p) for p in error.path)
        return f"invalid JSON Schema{' at ' + where if where else ''}: {error.message}"
    return None


def generate_instance(schema: Any, rng: random.Random) -> Any:
    """A small instance of ``schema``, drawn from ``rng`` (same seed, same instance)."""
    return _Generator(schema, rng).value(schema, 0)


class _Generator:
    def __init__(self, root: Any, rng: random.Random) -> None:
        self.root = root
        self.rng = rng

    # --- dispatch ---

    def value(self, schema: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise SchemaError(f"the schema nests deeper than {MAX_DEPTH} levels (a recursive $ref that never ends?)")
        if schema is True or schema == {}:
            return self.words()
        if schema is False:
            raise SchemaError("the schema 'false' has no instance")
        if not isinstance(schema, dict):
            raise SchemaError(f"expected a schema object, got {type(schema).__name__}")
        schema = self.expand(schema, depth)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            if not isinstance(schema["enum"], list) or not schema["enum"]:
                raise SchemaError("'enum' must be a non-empty array")
            return self.rng.choice(schema["enum"])
        if "anyOf" in schema:
            return self.value(_merge(_without(schema, "anyOf"), self.rng.choice(schema["anyOf"])), depth + 1)
        if "oneOf" in schema:
            return self.one_of(schema, depth)
        kind = self.type_of(schema)
        return getattr(self, "_" + kind)(schema, depth)

    def expand(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        """Resolve ``$ref`` and merge ``allOf`` into one schema."""
        hops = 0
        while "$ref" in schema:
            target = self.resolve(schema["$ref"])
            schema = _merge(target if isinstance(target, dict) else {}, _without(schema, "$ref"))
            hops += 1
            if hops > MAX_DEPTH:
                raise SchemaError("the schema's $refs refer to each other in a loop")
        if "allOf" in schema:
            merged = _without(schema, "allOf")
            for part in schema["allOf"]:
                merged = _merge(merged, self.expand(part, depth + 1) if isinstance(part, dict) else {})
            schema = merged
        return schema

    def resolve(self, ref: Any) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise SchemaError(f"only local $refs ('#/$defs/...') are supported, not {ref!r}")
        node = self.root
        for token in ref[1:].split("/")[1:] if ref != "#" else []:
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                raise SchemaError(f"$ref {ref!r} does not resolve")
        return node

    def one_of(self, schema: dict[str, Any], depth: int) -> Any:
        """A branch's instance that matches exactly one branch (checked with ``jsonschema``)."""
        import jsonschema

        base = _without(schema, "oneOf")
        branches = schema["oneOf"]
        definitions = {k: self.root[k] for k in ("$defs", "definitions")
                       if isinstance(self.root, dict) and k in self.root}
        validator_class = jsonschema.validators.validator_for(self.root if isinstance(self.root, dict) else {})
        checkers = [validator_class({**definitions, **branch} if isinstance(branch, dict) else branch)
                    for branch in branches]
        for _ in range(ONE_OF_TRIES):
            candidate = self.value(_merge(base, self.rng.choice(branches)), depth + 1)
            matches = sum(1 for checker in checkers if checker.is_valid(candidate))
            if matches == 1:
                return candidate
        raise SchemaError("could not generate an instance matching exactly one 'oneOf' branch")

    def type_of(self, schema: dict[str, Any]) -> str:
        kind = schema.get("type")
        if isinstance(kind, list):
            options = [k for k in kind if k != "null"] or kind
            if not options:
                raise SchemaError("'type' must not be an empty array")
            kind = self.rng.choice(options)
        if kind is None:
            if any(k in schema for k in ("properties", "required", "additionalProperties", "minProperties")):
                return "object"
            if any(k in schema for k in ("items", "prefixItems", "minItems", "maxItems")):
                return "array"
            if any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")):
                return "number"
            return "string"
        if kind not in ("object", "array", "string", "integer", "number", "boolean", "null"):
            raise SchemaError(f"unknown type {kind!r}")
        return str(kind)

    # --- one per type ---

    def _object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        properties = schema.get("properties") or {}
        required = list(schema.get("required") or [])
        extra = schema.get("additionalProperties", True)
        result: dict[str, Any] = {}
        optional = [name for name in properties if name not in required]
        for name in required:
            result[name] = self.value(properties.get(name, extra if isinstance(extra, dict) else {}), depth + 1)
        maximum = schema.get("maxProperties", math.inf)
        minimum = schema.get("minProperties", 0)
        for name in optional:
            if len(result) >= maximum:
                break
            if len(result) < minimum or (depth < OPTIONAL_DEPTH and self.rng.random() < 0.5):
                result[name] = self.value(properties[name], depth + 1)
        number = 1
        while len(result) < minimum:
            if extra is False:
                raise SchemaError("'minProperties' cannot be met without additional properties")
            key = f"key{number}"
            number += 1
            if key not in result:
                result[key] = self.value(extra if isinstance(extra, dict) else {}, depth + 1)
        if len(result) > maximum:
            raise SchemaError("'required' lists more properties than 'maxProperties' allows")
        return result

    def _array(self, schema: dict[str, Any], depth: int) -> list[Any]:
        prefix = schema.get("prefixItems")
        items = schema.get("items", {})
        if isinstance(items, list):  # draft 4-7 tuple form
            prefix, items = items, schema.get("additionalItems", {})
        prefix = prefix or []
        low = max(int(schema.get("minItems", 0)), 0)
        high = int(schema.get("maxItems", max(low, len(prefix), 2)))
        if low > high:
            raise SchemaError("'minItems' is greater than 'maxItems'")
        wanted = low if depth >= OPTIONAL_DEPTH else self.rng.randint(min(max(low, 1), high), max(min(high, 2), low))
        result: list[Any] = [self.value(s, depth + 1) for s in prefix[:max(wanted, min(len(prefix), high))]]
        unique = bool(schema.get("uniqueItems"))
        seen = {json.dumps(v, sort_keys=True) for v in result}
        tries = 0
        while len(result) < wanted:
            if items is False:
                raise SchemaError("'minItems' cannot be met: no items are allowed beyond 'prefixItems'")
            candidate = self.value(items, depth + 1)
            key = json.dumps(candidate, sort_keys=True)
            tries += 1
            if unique and key in seen:
                if tries > 50:
                    raise SchemaError("could not generate enough distinct items for 'uniqueItems'")
                continue
            seen.add(key)
            result.append(candidate)
        return result

    def _string(self, schema: dict[str, Any], depth: int) -> str:
        low = int(schema.get("minLength", 0))
        high = schema.get("maxLength")
        pattern = schema.get("pattern")
        for _ in range(20 if pattern else 1):
            text = self.formatted(schema.get("format")) or self.words()
            if len(text) < low:
                text += "x" * (low - len(text))
            if high is not None and len(text) > high:
                text = text[:int(high)]
            if not pattern or _matches(pattern, text):
                return text
        return text

    def formatted(self, fmt: Any) -> str | None:
        rng = self.rng
        if fmt == "date-time":
            return f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:" \
                   f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z"
        if fmt == "date":
            return f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        if fmt == "time":
            return f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z"
        if fmt in ("email", "idn-email"):
            return f"{rng.choice(_WORDS)}@example.com"
        if fmt in ("uri", "url", "iri", "uri-reference", "iri-reference"):
            return f"https://example.com/{rng.choice(_WORDS)}"
        if fmt == "uuid":
            return str(uuid.UUID(int=rng.getrandbits(128), version=4))
        if fmt == "ipv4":
            return ".".join(str(rng.randint(1, 254)) for _ in range(4))
        if fmt == "ipv6":
            return ":".join(f"{rng.randint(0, 0xFFFF):x}" for _ in range(8))
        if fmt in ("hostname", "idn-hostname"):
            return f"{rng.choice(_WORDS)}.example.com"
        return None

    def words(self) -> str:
        return " ".join(self.rng.choice(_WORDS) for _ in range(self.rng.randint(1, 3)))

    def _integer(self, schema: dict[str, Any], depth: int) -> int:
        low, high = _bounds(schema, integer=True)
        step = schema.get("multipleOf")
        if isinstance(step, (int, float)) and step > 0:
            if float(step).is_integer():
                first, last = math.ceil(low / step), math.floor(high / step)
                if first > last:
                    raise SchemaError("no integer multiple of 'multipleOf' lies within the bounds")
                return int(self.rng.randint(first, last) * step)
            raise SchemaError("a fractional 'multipleOf' on an integer is not supported")
        if low > high:
            raise SchemaError("the integer bounds leave no value")
        return self.rng.randint(int(low), int(high))

    def _number(self, schema: dict[str, Any], depth: int) -> float | int:
        step = schema.get("multipleOf")
        low, high = _bounds(schema, integer=False)
        if isinstance(step, (int, float)) and step > 0:
            first, last = math.ceil(low / step), math.floor(high / step)
            for _ in range(20):
                if first > last:
                    break
                value = self.rng.randint(first, last) * step
                value = int(value) if float(value).is_integer() else round(value, 12)
                quotient = value / step
                if low <= value <= high and int(quotient) == quotient:
                    return value
            raise SchemaError("no multiple of 'multipleOf' lies within the bounds")
        if low > high:
            raise SchemaError("the number bounds leave no value")
        value = round(self.rng.uniform(low, high), 2)
        return min(max(value, low), high)

    def _boolean(self, schema: dict[str, Any], depth: int) -> bool:
        return self.rng.random() < 0.5

    def _null(self, schema: dict[str, Any], depth: int) -> None:
        return None


def _bounds(schema: dict[str, Any], integer: bool) -> tuple[float, float]:
    """The closed interval a number must lie in (exclusive bounds nudged inward)."""
    nudge = 1 if integer else 0.01
    low = schema.get("minimum")
    high = schema.get("maximum")
    exclusive_low, exclusive_high = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if exclusive_low is True and low is not None:  # draft 4: a boolean beside minimum
        low = low + nudge if integer and float(low).is_integer() else _above(low, nudge)
    elif isinstance(exclusive_low, (int, float)) and not isinstance(exclusive_low, bool):
        bound = math.floor(exclusive_low) + 1 if integer else _above(exclusive_low, nudge)
        low = bound if low is None else max(low, bound)
    if exclusive_high is True and high is not None:
        high = high - nudge if integer and float(high).is_integer() else _below(high, nudge)
    elif isinstance(exclusive_high, (int, float)) and not isinstance(exclusive_high, bool):
        bound = math.ceil(exclusive_high) - 1 if integer else _below(exclusive_high, nudge)
        high = bound if high is None else min(high, bound)
    if integer:
        low = None if low is None else math.ceil(low)
        high = None if high is None else math.floor(high)
    if high is not None and low is None:
        return float(high) - 100, float(high)
    if low is None:
        return 0.0, 100.0
    if high is None:
        return float(low), float(low) + 100
    return float(low), float(high)


def _above(value: float, nudge: float) -> float:
    return value + nudge if value + nudge > value else math.nextafter(value, math.inf)


def _below(value: float, nudge: float) -> float:
    return value - nudge if value - nudge < value else math.nextafter(value, -math.inf)


def _without(schema: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k != key}


def _merge(base: dict[str, Any], extra: Any) -> dict[str, Any]:
    """``extra``'s keywords over ``base``'s; properties merged, required lists joined."""
    if not isinstance(extra, dict):
        return dict(base)
    merged = {**base, **extra}
    if "properties" in base and "properties" in extra:
        merged["properties"] = {**base["properties"], **extra["properties"]}
    if "required" in base and "required" in extra:
        merged["required"] = list(dict.fromkeys([*base["required"], *extra["required"]]))
    return merged


def _matches(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return True  # an invalid pattern cannot be honoured; check_schema does not catch every one

