"""What each API does with every top-level field of a request: honoured, accepted with no effect, or refused.

A field the API defines is honoured (it shapes the answer); or accepted and
documented as having no effect, when ignoring it cannot change what the
client gets back (sampling knobs, ``user``, ``metadata``); or refused with a
400 naming it when ignoring it would (a feature not simulated). A field no
version of the API defines is accepted, as vLLM accepts it, and listed in
the request's ``ignored_fields`` (the record's, and
``llmsim:ignored_fields_total``); ``strict_fields`` refuses it as the
provider does. The reference's field tables and ``tests/test_field_policy.py``
(which walks the official SDKs' request types) hold these tables to the SDKs.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..sim import invalid

__all__ = ["FieldPolicy"]

_UNSET = (None, False)  # a refused field sent as null or false asks for nothing


@dataclass(frozen=True)
class FieldPolicy:
    """One API's fields: ``honoured``, ``no_effect`` (accepted, documented), ``refused`` (field: why)."""

    honoured: frozenset[str]
    no_effect: frozenset[str]
    refused: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, honoured: Iterable[str], no_effect: Iterable[str] = (),
           refused: Mapping[str, str] | None = None) -> FieldPolicy:
        return cls(frozenset(honoured), frozenset(no_effect), dict(refused or {}))

    @functools.cached_property
    def known(self) -> frozenset[str]:
        """Every field the API defines (each has a row in the reference)."""
        return self.honoured | self.no_effect | frozenset(self.refused)

    def check(self, body: dict[str, Any]) -> list[str]:
        """Refuse a refused field that asks for something (400 naming it); the fields no version of the
        API defines, in the body's order."""
        if not self.refused.keys().isdisjoint(body):
            for name, why in self.refused.items():
                if name in body and body[name] not in _UNSET and body[name] != [] and body[name] != {}:
                    raise invalid(f"'{name}' is not supported by pytest-llmsim: {why}.", name,
                                  "unsupported_parameter")
        known = self.known
        return [name for name in body if name not in known]
