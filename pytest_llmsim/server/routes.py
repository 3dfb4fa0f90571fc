"""The route table: templates with path parameters, matched to a handler and the API that owns them.

A template is a path whose ``{name}`` segments capture a parameter, anywhere
in a segment (``/v1/models/{id}``, ``/v1beta/models/{model}:{action}``). A
parameter matches one or more characters other than ``/``; the last one in a
segment takes what the others leave. Templates without parameters are looked
up by exact path first (the hot path: one dict lookup); the others are tried
in the order added.

Each route names the wire API whose error shape it answers in, and whether it
generates (only generation routes take every fault kind).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from werkzeug.wrappers import Request, Response

from ..api.base import RequestTarget, WireAPI

__all__ = ["Route", "RouteMatch", "RouteTable", "request_target"]

_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
Handler = Callable[[Request, "RouteMatch"], Response]


@dataclass(frozen=True, slots=True)
class Route:
    """One route: its template, the methods it takes, what answers it, and whose error shape it uses."""

    template: str
    methods: tuple[str, ...]
    handler: Handler
    api: WireAPI
    generates: bool = False


@dataclass(frozen=True, slots=True)
class RouteMatch:
    """A route a path matched, with the path parameters it captured."""

    route: Route
    params: Mapping[str, str]


def _compile(template: str) -> re.Pattern[str]:
    """The template as a regular expression, its ``{name}`` parts as named groups."""
    if not template.startswith("/"):
        raise ValueError(f"a route template starts with '/': {template!r}")
    pattern, end = [], 0
    matches = list(_PARAM.finditer(template))
    for index, match in enumerate(matches):
        pattern.append(re.escape(template[end:match.start()]))
        last_in_segment = index == len(matches) - 1 or "/" in template[match.end():matches[index + 1].start()]
        # a parameter with another after it in its segment gives way to it (lazy); the last takes the rest
        pattern.append(f"(?P<{match.group(1)}>[^/]+{'' if last_in_segment else '?'})")
        end = match.end()
    pattern.append(re.escape(template[end:]))
    return re.compile("".join(pattern))


class RouteTable:
    """Routes by template: exact paths in a dict, templates with parameters in order."""

    def __init__(self) -> None:
        self._exact: dict[str, Route] = {}
        self._templated: list[tuple[re.Pattern[str], Route]] = []

    def add(self, route: Route) -> Route:
        """Add ``route``; a template already present is replaced (so a test may re-aim one)."""
        if _PARAM.search(route.template) is None:
            self._exact[route.template] = route
            return route
        pattern = _compile(route.template)
        self._templated = [(p, r) for p, r in self._templated if r.template != route.template]
        self._templated.append((pattern, route))
        return route

    def remove(self, template: str) -> None:
        """Forget the route of ``template`` (no error if there is none)."""
        self._exact.pop(template, None)
        self._templated = [(p, r) for p, r in self._templated if r.template != template]

    def match(self, path: str) -> RouteMatch | None:
        """The route ``path`` matches, with its parameters, or None."""
        route = self._exact.get(path)
        if route is not None:
            return RouteMatch(route, {})
        for pattern, candidate in self._templated:
            found = pattern.fullmatch(path)
            if found is not None:
                return RouteMatch(candidate, found.groupdict())
        return None

    def __iter__(self) -> Iterator[Route]:
        yield from self._exact.values()
        for _, route in self._templated:
            yield route


def request_target(environ: dict[str, Any], params: Mapping[str, str]) -> RequestTarget:
    """What an adapter's ``parse`` reads besides the body: the path parameters and the query."""
    query_string = environ.get("QUERY_STRING")
    query = dict(urllib.parse.parse_qsl(query_string, keep_blank_values=True)) if query_string else {}
    return RequestTarget(params, query)
