"""Strings that read as values: of a JSON Schema ``format``, or of their property's name where the schema says little.

A model asked for ``{"city": {"type": "string"}}`` writes a city, not filler;
tests that read generated arguments (a router keyed on ``city``, a
``description`` shown to a user) get values of the right kind.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

__all__ = ["WORDS", "formatted_value", "named_value"]

# Property names that say what their string is (substring, lower case), and the values that read as one.
_NAMED_VALUES = (("city", ("city", "town")), ("country", ("country", "nation")),
                 ("person", ("author", "first_name", "last_name", "full_name", "username", "person", "owner")),
                 ("id", ("_id", "uuid")), ("sentence", ("description", "summary", "text", "content", "message",
                                                        "reason", "explanation", "answer", "comment", "note")),
                 ("title", ("name", "title", "label", "topic", "subject")))
_CITIES = ("Paris", "Tokyo", "Lagos", "Lima", "Oslo", "Toronto", "Mumbai", "Sydney", "Nairobi", "Madrid")
_COUNTRIES = ("France", "Japan", "Nigeria", "Peru", "Norway", "Canada", "India", "Australia", "Kenya", "Spain")
_FIRST_NAMES = ("Ada", "Grace", "Alan", "Linus", "Mae", "Omar", "Priya", "Chen", "Lena", "Kofi")
_LAST_NAMES = ("Lovelace", "Hopper", "Turing", "Okafor", "Silva", "Nakamura", "Patel", "Novak", "Moreau", "Diaz")

WORDS = ("alpha", "bravo", "delta", "echo", "river", "stone", "cloud", "maple", "orbit", "pixel",
         "quartz", "signal", "tango", "vector", "willow", "amber", "cedar", "harbor", "lumen", "nova")


def named_value(name: str, rng: random.Random) -> str | None:
    """A value that reads as one of ``name`` (a property name), or None when the name says nothing."""
    lowered = name.lower()
    kind = next((kind for kind, names in _NAMED_VALUES if any(n in lowered for n in names)), None)
    if kind == "city":
        return rng.choice(_CITIES)
    if kind == "country":
        return rng.choice(_COUNTRIES)
    if kind == "person":
        return f"{rng.choice(_FIRST_NAMES)} {rng.choice(_LAST_NAMES)}"
    if kind == "title":
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 3))).title()
    if kind == "sentence":
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 8))).capitalize() + "."
    if kind == "id":
        return f"{lowered.removesuffix('_id') or 'id'}_{rng.getrandbits(32):08x}"
    return None


def formatted_value(fmt: Any, rng: random.Random) -> str | None:
    """A string of a JSON Schema ``format`` (``date-time``, ``email``, ``uuid``...), or None for another."""
    if fmt == "date-time":
        return f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:" \
               f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z"
    if fmt == "date":
        return f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if fmt == "time":
        return f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z"
    if fmt in ("email", "idn-email"):
        return f"{rng.choice(WORDS)}@example.com"
    if fmt in ("uri", "url", "iri", "uri-reference", "iri-reference"):
        return f"https://example.com/{rng.choice(WORDS)}"
    if fmt == "uuid":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    if fmt == "ipv4":
        return ".".join(str(rng.randint(1, 254)) for _ in range(4))
    if fmt == "ipv6":
        return ":".join(f"{rng.randint(0, 0xFFFF):x}" for _ in range(8))
    if fmt in ("hostname", "idn-hostname"):
        return f"{rng.choice(WORDS)}.example.com"
    return None
