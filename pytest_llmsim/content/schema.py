"""Instances of a JSON Schema: tool-call arguments and structured output.

A seeded generator, written here because no maintained library fits: we
evaluated ``hypothesis-jsonschema`` (last release 2024-02; Hypothesis
strategies are built for shrinking inside tests, drawing from them at
runtime is slow and discouraged) and ``jsf`` (last release 2024-03; pulls in
Faker and draws from the global ``random``, so it is not seedable per
request). ``jsonschema`` checks, for ``oneOf``, that an instance matches
exactly one branch (the schemas a request sends are checked in ``schema_check``).

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
cannot be generated in general); patterns run under RE2. Instances are small:
strings of one to three words (or, where the schema says little, a value
that reads as its property's name: a ``city`` is a city, a ``name`` a name, a
``description`` a sentence), arrays of one to three items (more only when
``minItems`` says so), each optional property included at a seeded rate
(``optional_property_rate``, default 0.9, as a model fills in what it can)
near the top and never below depth 3; there, an object whose properties are
all optional gets at least one unless the rate is 0 (a model does not answer ``{}``).
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

from ..sim.patterns import PatternError, compile_pattern
from .schema_check import SchemaError, check_schema, linear_time_validator
from .vocabulary import WORDS as _WORDS
from .vocabulary import formatted_value, named_value

__all__ = ["SchemaError", "SchemaTooLarge", "check_schema", "generate_instance", "linear_time_validator"]

MAX_DEPTH = 32  # a recursive schema whose required fields never end is refused past this
OPTIONAL_DEPTH = 3  # optional properties only above this depth: instances stay small
ONE_OF_TRIES = 8


#: Schema nodes (values, ``$ref`` hops, ``allOf`` parts) one instance may take to build: a 3 KB
#: ``$ref`` tree of 2^22 leaves or nested ``allOf`` of 2^28 stops here, in well under a second.
MAX_STEPS = 100_000
#: Instance size (characters of compact JSON) when the caller sets none.
DEFAULT_MAX_CHARS = 1 << 20


class SchemaTooLarge(SchemaError):
    """The schema's instance would not fit the output budget, or takes too much work to build."""


def generate_instance(schema: Any, rng: random.Random, max_chars: int = DEFAULT_MAX_CHARS,
                      optional_rate: float = 0.9) -> Any:
    """A small instance of ``schema``, drawn from ``rng`` (same seed, same instance).

    Bounded before anything big is built: an instance whose compact JSON
    would pass ``max_chars`` characters, or that takes more than
    :data:`MAX_STEPS` schema nodes to build, raises :class:`SchemaTooLarge`
    naming the schema path (``minLength: 1000000000`` costs nothing).
    """
    try:
        return _Generator(schema, rng, max_chars, optional_rate).value(schema, 0, "")
    except RecursionError:
        raise SchemaError("the schema refers to itself without end (allOf or $ref)") from None
    except (OverflowError, ArithmeticError) as error:
        raise SchemaError(f"the schema's numbers are out of range: {error}") from None


class _Generator:
    def __init__(self, root: Any, rng: random.Random, max_chars: int, optional_rate: float = 0.9) -> None:
        self.root = root
        self.optional_rate = optional_rate
        self.rng = rng
        self.max_chars = max_chars
        self.size = 0  # characters of compact JSON built so far
        self.steps = 0

    # --- budget ---

    def step(self, path: str) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise SchemaTooLarge(f"building an instance takes more than {MAX_STEPS:,} steps (at schema path "
                                 f"{path or '/'}); the schema is too large to generate from")

    def charge(self, chars: int, path: str, why: str = "") -> None:
        """Count ``chars`` more characters of output; past the budget, refuse naming ``path`` (and ``why``)."""
        self.size += chars
        if self.size > self.max_chars:
            raise SchemaTooLarge(f"an instance does not fit the output budget of {self.max_chars:,} characters "
                                 f"(at schema path {path or '/'}{': ' + why if why else ''}); raise max_tokens "
                                 f"or make the schema's minimums smaller")

    def room(self) -> int:
        return self.max_chars - self.size

    # --- dispatch ---

    def value(self, schema: Any, depth: int, path: str) -> Any:
        self.step(path)
        if depth > MAX_DEPTH:
            raise SchemaError(f"the schema nests deeper than {MAX_DEPTH} levels (a recursive $ref that never ends?)")
        if schema is True or schema == {}:
            return self.words(path)
        if schema is False:
            raise SchemaError("the schema 'false' has no instance")
        if not isinstance(schema, dict):
            raise SchemaError(f"expected a schema object, got {type(schema).__name__}")
        schema = self.expand(schema, depth, path)
        if "const" in schema:
            self.charge(len(json.dumps(schema["const"])), path, "const")
            return schema["const"]
        if "enum" in schema:
            if not isinstance(schema["enum"], list) or not schema["enum"]:
                raise SchemaError("'enum' must be a non-empty array")
            choice = self.rng.choice(schema["enum"])
            self.charge(len(json.dumps(choice)), path, "enum")
            return choice
        if "anyOf" in schema:
            if not isinstance(schema["anyOf"], list) or not schema["anyOf"]:
                raise SchemaError("'anyOf' must be a non-empty array")
            index = self.rng.randrange(len(schema["anyOf"]))
            return self.value(_merge(_without(schema, "anyOf"), schema["anyOf"][index]), depth + 1,
                              f"{path}/anyOf/{index}")
        if "oneOf" in schema:
            return self.one_of(schema, depth, path)
        kind = self.type_of(schema)
        return getattr(self, "_" + kind)(schema, depth, path)

    def expand(self, schema: dict[str, Any], depth: int, path: str) -> dict[str, Any]:
        """Resolve ``$ref`` and merge ``allOf`` into one schema."""
        if depth > MAX_DEPTH:
            raise SchemaError(f"the schema nests deeper than {MAX_DEPTH} levels (an allOf that refers to itself?)")
        hops = 0
        while "$ref" in schema:
            self.step(path)
            target = self.resolve(schema["$ref"])
            schema = _merge(target if isinstance(target, dict) else {}, _without(schema, "$ref"))
            hops += 1
            if hops > MAX_DEPTH:
                raise SchemaError("the schema's $refs refer to each other in a loop")
        if "allOf" in schema:
            parts = schema["allOf"]
            if not isinstance(parts, list):
                raise SchemaError("'allOf' must be an array")
            merged = _without(schema, "allOf")
            for index, part in enumerate(parts):
                self.step(f"{path}/allOf/{index}")
                merged = _merge(merged, self.expand(part, depth + 1, f"{path}/allOf/{index}")
                                if isinstance(part, dict) else {})
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

    def one_of(self, schema: dict[str, Any], depth: int, path: str) -> Any:
        """A branch's instance that matches exactly one branch (checked with ``jsonschema``)."""
        base = _without(schema, "oneOf")
        branches = schema["oneOf"]
        if not isinstance(branches, list) or not branches:
            raise SchemaError("'oneOf' must be a non-empty array")
        definitions = {k: self.root[k] for k in ("$defs", "definitions")
                       if isinstance(self.root, dict) and k in self.root}
        validator_class = linear_time_validator(self.root if isinstance(self.root, dict) else {})
        checkers = [validator_class({**definitions, **branch} if isinstance(branch, dict) else branch)
                    for branch in branches]
        start_size = self.size
        for _ in range(ONE_OF_TRIES):
            self.size = start_size  # a candidate that is thrown away costs no output
            index = self.rng.randrange(len(branches))
            candidate = self.value(_merge(base, branches[index]), depth + 1, f"{path}/oneOf/{index}")
            try:
                matches = sum(1 for checker in checkers if checker.is_valid(candidate))
            except Exception as error:  # a $ref the branch cannot resolve on its own, a bad pattern, ...
                raise SchemaError(f"the 'oneOf' at schema path {path or '/'} cannot be checked: {error}") from None
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

    def _object(self, schema: dict[str, Any], depth: int, path: str) -> dict[str, Any]:
        properties = schema.get("properties") or {}
        required = list(schema.get("required") or [])
        extra = schema.get("additionalProperties", True)
        result: dict[str, Any] = {}
        optional = [name for name in properties if name not in required]
        maximum = schema.get("maxProperties", math.inf)
        minimum = _count(schema, "minProperties")
        # every property takes at least '"k":0,' (6 characters): refuse an impossible minimum before building
        self.charge(2, path)
        if 6 * (minimum - len(required)) > self.room():
            self.charge(6 * (minimum - len(required)), path, f"minProperties {minimum:,}")
        for name in required:
            self.charge(len(json.dumps(name)) + 2, path)
            result[name] = self.value(properties.get(name, extra if isinstance(extra, dict) else {}), depth + 1,
                                      f"{path}/properties/{name}")
        chosen = [name for name in optional
                  if depth < OPTIONAL_DEPTH and self.rng.random() < self.optional_rate]
        if optional and not required and not chosen and depth < OPTIONAL_DEPTH and self.optional_rate > 0:
            chosen = [optional[0]]  # a model answering a schema writes something, not {} (instructor's iterables)
        for name in optional:
            if len(result) >= maximum:
                break
            if len(result) < minimum or name in chosen:
                self.charge(len(json.dumps(name)) + 2, path)
                result[name] = self.value(properties[name], depth + 1, f"{path}/properties/{name}")
        number = 1
        while len(result) < minimum:
            if extra is False:
                raise SchemaError("'minProperties' cannot be met without additional properties")
            key = f"key{number}"
            number += 1
            if key not in result:
                self.charge(len(key) + 4, path, f"minProperties {minimum:,}")
                result[key] = self.value(extra if isinstance(extra, dict) else {}, depth + 1,
                                         f"{path}/additionalProperties")
        if len(result) > maximum:
            raise SchemaError("'required' lists more properties than 'maxProperties' allows")
        return result

    def _array(self, schema: dict[str, Any], depth: int, path: str) -> list[Any]:
        prefix = schema.get("prefixItems")
        items = schema.get("items", {})
        if isinstance(items, list):  # draft 4-7 tuple form
            prefix, items = items, schema.get("additionalItems", {})
        prefix = prefix or []
        low = _count(schema, "minItems")
        high = _count(schema, "maxItems", max(low, len(prefix), 3))
        if low > high:
            raise SchemaError("'minItems' is greater than 'maxItems'")
        # every item takes at least two characters ('0,'): refuse an impossible minimum before building
        self.charge(2, path)
        if 2 * low > self.room():
            self.charge(2 * low, path, f"minItems {low:,}")
        wanted = low if depth >= OPTIONAL_DEPTH else self.rng.randint(min(max(low, 1), high), max(min(high, 3), low))
        result: list[Any] = [self.value(s, depth + 1, f"{path}/prefixItems/{i}")
                             for i, s in enumerate(prefix[:max(wanted, min(len(prefix), high))])]
        unique = bool(schema.get("uniqueItems"))
        seen = {json.dumps(v, sort_keys=True) for v in result}
        tries = 0
        while len(result) < wanted:
            if items is False:
                raise SchemaError("'minItems' cannot be met: no items are allowed beyond 'prefixItems'")
            self.charge(1, path, f"minItems {low:,}")
            candidate = self.value(items, depth + 1, f"{path}/items")
            tries += 1
            if unique:
                key = json.dumps(candidate, sort_keys=True)
                if key in seen:
                    if tries > 50:
                        raise SchemaError("could not generate enough distinct items for 'uniqueItems'")
                    continue
                seen.add(key)
            result.append(candidate)
        return result

    def _string(self, schema: dict[str, Any], depth: int, path: str) -> str:
        low = _count(schema, "minLength")
        high = schema.get("maxLength")
        if low + 2 > self.room():  # before "x" * low is built
            self.charge(low + 2, path, f"minLength {low:,}")
        pattern = schema.get("pattern")
        start_size = self.size
        for _ in range(20 if pattern else 1):
            self.size = start_size
            text = formatted_value(schema.get("format"), self.rng) or self.words(path)
            if len(text) < low:
                text += "x" * (low - len(text))
            if high is not None and len(text) > high:
                text = text[:int(high)]
            self.size = start_size
            self.charge(len(text) + 2, path)
            if not pattern or _matches(pattern, text):
                return text
        return text

    def words(self, path: str) -> str:
        """A short string; one that reads as a value of its property's name when the name says what it is."""
        name = path.rsplit("/properties/", 1)[-1] if "/properties/" in path else ""
        text = named_value(name, self.rng) or " ".join(self.rng.choice(_WORDS) for _ in range(self.rng.randint(1, 3)))
        self.charge(len(text) + 2, path)
        return text

    def _integer(self, schema: dict[str, Any], depth: int, path: str) -> int:
        low, high = _bounds(schema, integer=True)
        step = schema.get("multipleOf")
        if isinstance(step, (int, float)) and step > 0:
            if float(step).is_integer():
                first, last = math.ceil(low / step), math.floor(high / step)
                if first > last:
                    raise SchemaError("no integer multiple of 'multipleOf' lies within the bounds")
                value = int(self.rng.randint(first, last) * step)
                self.charge(len(str(value)), path)
                return value
            raise SchemaError("a fractional 'multipleOf' on an integer is not supported")
        if low > high:
            raise SchemaError("the integer bounds leave no value")
        value = self.rng.randint(int(low), int(high))
        self.charge(len(str(value)), path)
        return value

    def _number(self, schema: dict[str, Any], depth: int, path: str) -> float | int:
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
                    self.charge(len(repr(value)), path)
                    return value
            raise SchemaError("no multiple of 'multipleOf' lies within the bounds")
        if low > high:
            raise SchemaError("the number bounds leave no value")
        value = min(max(round(self.rng.uniform(low, high), 2), low), high)
        if math.isinf(value) or math.isnan(value):
            raise SchemaError(f"the number bounds at schema path {path or '/'} leave no finite value")
        self.charge(len(repr(value)), path)
        return value

    def _boolean(self, schema: dict[str, Any], depth: int, path: str) -> bool:
        self.charge(5, path)
        return self.rng.random() < 0.5

    def _null(self, schema: dict[str, Any], depth: int, path: str) -> None:
        self.charge(4, path)
        return None


def _count(schema: dict[str, Any], key: str, default: int = 0) -> int:
    """A non-negative integer keyword (minItems, minLength, ...); bad values are check_schema's to refuse."""
    value = schema.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SchemaError(f"'{key}' must be a non-negative integer")
    return max(int(value), 0)


def _bounds(schema: dict[str, Any], integer: bool) -> tuple[float, float]:
    """The closed interval a number must lie in (exclusive bounds nudged inward)."""
    nudge = 1 if integer else 0.01
    low = schema.get("minimum")
    high = schema.get("maximum")
    exclusive_low, exclusive_high = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if exclusive_low is True and low is not None:  # draft 4: a boolean beside minimum
        low = low + nudge if integer and float(low).is_integer() else _step(low, nudge)
    elif isinstance(exclusive_low, (int, float)) and not isinstance(exclusive_low, bool):
        bound = math.floor(exclusive_low) + 1 if integer else _step(exclusive_low, nudge)
        low = bound if low is None else max(low, bound)
    if exclusive_high is True and high is not None:
        high = high - nudge if integer and float(high).is_integer() else _step(high, -nudge)
    elif isinstance(exclusive_high, (int, float)) and not isinstance(exclusive_high, bool):
        bound = math.ceil(exclusive_high) - 1 if integer else _step(exclusive_high, -nudge)
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


def _step(value: float, nudge: float) -> float:
    """``value`` moved by ``nudge`` (either sign), or to the next float when ``nudge`` is too small to move it."""
    return value + nudge if value + nudge != value else math.nextafter(value, math.copysign(math.inf, nudge))


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
        return compile_pattern(pattern).search(text) is not None
    except PatternError:
        return True  # a pattern RE2 cannot run is refused by check_schema; here it cannot be honoured

