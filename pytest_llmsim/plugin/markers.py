"""The plugin's markers: what each means, and the settings, faults and replies a test's markers give."""

from __future__ import annotations

import re
from typing import Any, Protocol

import pytest

from ..content.replies import MATCHERS, Reply, Rule, normalize_reply
from ..sim.config import SETTING_NAMES, ConfigError, SimConfig
from ..sim.faults import Fault, FaultError

__all__ = ["MARKERS", "arm", "faults_from_markers", "replies_from_markers", "settings_from_markers"]


class Armable(Protocol):
    """What markers arm: any backend handle (in-process, in another process, remote)."""

    def add_fault(self, kind: str, **params: Any) -> Fault: ...
    def add_rule(self, rule: Rule) -> Rule: ...
    def reply_with(self, *replies: Reply) -> None: ...


_MARKER_KEYS: dict[str, dict[str, str]] = {
    "llm_latency": {k: k for k in ("ttft", "itl", "prefill_per_token", "jitter", "load_factor")},
    "llm_cache": {"hit_rate": "cache_hit_rate", "block_size": "block_size",
                  "capacity_blocks": "cache_capacity_blocks"},
    "llm_batch": {"size": "max_batch_size", "max_waiting": "max_waiting"},
    "llm_config": {k: k for k in SETTING_NAMES},
}
MARKERS = {
    "llm_latency": "llm_latency(ttft=, itl=, prefill_per_token=, jitter=, load_factor=): simulated "
                   "latency of the llm_backend, in simulated seconds",
    "llm_cache": "llm_cache(hit_rate=, block_size=, capacity_blocks=): prefix-cache behaviour of the "
                 "llm_backend",
    "llm_batch": "llm_batch(size=, max_waiting=): continuous-batching limits of the llm_backend",
    "llm_config": "llm_config(**settings): any setting LLMBackend.configure() accepts",
    "llm_fault": "llm_fault(kind, **params): arm a fault on the llm_backend (repeatable; closest first), "
                 "e.g. llm_fault('rate_limit', times=2, retry_after=0.1)",
    "llm_realtime": "llm_realtime: run this test's llm_backend at speed 1 whatever --llmsim-speed says",
    "llm_reply": "llm_reply(*replies, prompt=, model=, tool=, api=, turn=, tool_result=, previous=, header=, "
                 "times=): scripted replies (text, dict, "
                 "ToolCall, ErrorReply); with a matcher or times, a rule, else queued in order (repeatable)",
    "llm_upstream": "llm_upstream(url): the provider llm_cassette records from in a recording mode "
                    "(--llmsim-record), over --llmsim-upstream",
}



def settings_from_markers(item: pytest.Item) -> dict[str, Any]:
    """Backend settings from the item's markers; the closest marker wins key by key."""
    settings: dict[str, Any] = {}
    markers = [m for m in item.iter_markers() if m.name in _MARKER_KEYS or m.name == "llm_realtime"]
    for marker in reversed(markers):  # farthest first, so closer ones override
        if marker.name == "llm_realtime":
            continue
        keys = _MARKER_KEYS[marker.name]
        if marker.args:
            raise pytest.UsageError(f"@pytest.mark.{marker.name} takes keyword arguments only "
                                    f"({', '.join(keys)}), got {marker.args!r}")
        for key, value in marker.kwargs.items():
            if key not in keys:
                raise pytest.UsageError(
                    f"@pytest.mark.{marker.name}: unknown argument {key!r}; accepted: {', '.join(keys)}")
            settings[keys[key]] = value
    if any(m.name == "llm_realtime" for m in markers):
        settings["speed"] = 1.0
    try:
        SimConfig().replace(**settings)
    except ConfigError as error:
        names = ", ".join(sorted({m.name for m in markers}))
        raise pytest.UsageError(f"bad llmsim marker value ({names}): {error}") from None
    return settings


def faults_from_markers(item: pytest.Item) -> list[tuple[str, dict[str, Any]]]:
    """``(kind, params)`` of every ``llm_fault`` marker, closest first, each validated."""
    faults = []
    for marker in item.iter_markers("llm_fault"):
        if len(marker.args) != 1 or not isinstance(marker.args[0], str):
            raise pytest.UsageError("@pytest.mark.llm_fault takes the fault kind as its one positional "
                                    f"argument, e.g. llm_fault('rate_limit', times=2); got {marker.args!r}")
        try:
            Fault.build(marker.args[0], **marker.kwargs)
        except FaultError as error:
            raise pytest.UsageError(f"@pytest.mark.llm_fault: {error}") from None
        faults.append((marker.args[0], dict(marker.kwargs)))
    return faults


_RULE_KEYS = (*MATCHERS, "times")


def replies_from_markers(item: pytest.Item) -> list[Rule | tuple[Any, ...]]:
    """Every ``llm_reply`` marker, farthest first: a :class:`Rule` when it has a matcher or ``times``,
    else the replies to queue."""
    scripted: list[Rule | tuple[Any, ...]] = []
    for marker in reversed(list(item.iter_markers("llm_reply"))):
        unknown = sorted(set(marker.kwargs) - set(_RULE_KEYS))
        if unknown or not marker.args:
            raise pytest.UsageError(f"@pytest.mark.llm_reply takes replies as positional arguments and "
                                    f"{', '.join(_RULE_KEYS)} as keywords; got {marker.args!r}, {marker.kwargs!r}")
        try:
            if marker.kwargs:
                scripted.append(Rule(tuple(marker.args), **marker.kwargs))
            else:
                scripted.append(tuple(normalize_reply(reply) for reply in marker.args))
        except (TypeError, re.error) as error:
            raise pytest.UsageError(f"@pytest.mark.llm_reply: {error}") from None
    return scripted


def arm(backend: Armable, faults: list[tuple[str, dict[str, Any]]],
         scripted: list[Rule | tuple[Any, ...]]) -> None:
    """Arm a backend with the faults and scripted replies of a test's markers."""
    for kind, params in faults:
        backend.add_fault(kind, **params)
    for item in scripted:
        if isinstance(item, Rule):
            backend.add_rule(Rule(item.replies, **{key: getattr(item, key) for key in MATCHERS}, times=item.times))
        else:
            backend.reply_with(*item)

