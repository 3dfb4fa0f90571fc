"""A fleet's metrics in one answer (``GET /llmsim/v1/fleet`` on the first replica of ``llmsim serve --replicas``).

The first replica (the parent process) knows every other replica's own address; it asks each for its
``/llmsim/v1/metrics`` and adds them up with its own. Counts add; ``max_running`` is the largest; of each
latency distribution the count adds and the mean is weighted by it. Percentiles do not add (they would
need the samples), nor does ``cache_hit_rate``: the total leaves them out, each replica's own figures
have them.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from .loopback import DIRECT

__all__ = ["fleet_metrics", "sum_metrics"]

#: Seconds to wait for one replica's answer (a replica being restarted answers nothing).
REPLICA_TIMEOUT = 2.0


def _fetch(url: str, token: str | None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url.rstrip("/") + "/llmsim/v1/metrics", headers=headers)
    with DIRECT.open(request, timeout=REPLICA_TIMEOUT) as answer:  # the replicas are on this machine
        body: dict[str, Any] = json.loads(answer.read())
        return body


def fleet_metrics(own: dict[str, Any], own_url: str, others: Sequence[str], token: str | None) -> dict[str, Any]:
    """This replica's metrics (``own``, at ``own_url``) and each of ``others``' (fetched), and their sum."""
    replicas: list[dict[str, Any]] = [{"url": own_url, "metrics": own}]
    for url in others:
        try:
            replicas.append({"url": url, "metrics": _fetch(url, token)})
        except (OSError, ValueError) as error:  # down (restarting), or not answering JSON
            replicas.append({"url": url, "error": str(getattr(error, "reason", error))})
    answered = [replica["metrics"] for replica in replicas if "metrics" in replica]
    return {"replicas": replicas, "answered": len(answered), "total": sum_metrics(answered)}


def sum_metrics(snapshots: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The fleet's figures from each replica's ``/llmsim/v1/metrics`` (see the module's docstring)."""
    total: dict[str, Any] = {}
    for snapshot in snapshots:
        for name, value in snapshot.items():
            if name == "cache_hit_rate":
                continue
            if name == "max_running":
                total[name] = max(total.get(name, 0), value)
            elif isinstance(value, bool):
                continue
            elif isinstance(value, int | float):
                total[name] = total.get(name, 0) + value
            elif isinstance(value, dict) and "count" in value:  # a latency distribution
                into = total.setdefault(name, {"count": 0, "mean": None})
                count = value.get("count") or 0
                if count and value.get("mean") is not None:
                    weighted = (into["mean"] or 0.0) * into["count"] + value["mean"] * count
                    into["mean"] = weighted / (into["count"] + count)
                into["count"] += count
            elif isinstance(value, dict):  # counts by status, by fault kind
                into = total.setdefault(name, {})
                for key, count in value.items():
                    into[key] = into.get(key, 0) + count
    return total
