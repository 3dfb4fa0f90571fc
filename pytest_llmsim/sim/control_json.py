"""The control API's wire, shared by both ends: its path prefix and the JSON forms of the backend's values.

The server (``pytest_llmsim.server.control``) writes them and ``RemoteBackend`` reads them back, so
neither side imports the other's code. Infinities travel as ``"inf"``, NaN as null; credentials in
a logged request's headers leave the process fingerprinted (:mod:`pytest_llmsim.sim.secrets`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from werkzeug.datastructures import Headers

from .config import SimConfig
from .faults import Fault
from .metrics import Distribution, MetricsSnapshot
from .percentiles import Percentiles
from .request_log import RequestRecord
from .secrets import redact_headers

__all__ = ["CONTROL_PREFIX", "config_to_json", "fault_from_json", "plain", "record_from_json", "record_to_json",
           "snapshot_from_json", "snapshot_to_json"]

CONTROL_PREFIX = "/llmsim/v1/"


def plain(value: Any) -> Any:
    """JSON-safe: infinities as "inf", NaN as null, tuples as lists, a latency's percentiles as their mapping."""
    if isinstance(value, Percentiles):
        return value.as_mapping()
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    return value


def config_to_json(config: SimConfig) -> dict[str, Any]:
    return {key: plain(value) for key, value in config.as_dict().items()}


def snapshot_to_json(snapshot: MetricsSnapshot) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in dataclasses.fields(snapshot):
        value = getattr(snapshot, field.name)
        out[field.name] = plain(dataclasses.asdict(value) if isinstance(value, Distribution) else value)
    return out


def record_to_json(record: RequestRecord) -> dict[str, Any]:
    """A request log record as JSON, its credentials fingerprinted (see :mod:`pytest_llmsim.sim.secrets`)."""
    out = {field.name: getattr(record, field.name) for field in dataclasses.fields(record)}
    out["headers"] = redact_headers(record.headers.items())
    return plain(out)  # type: ignore[no-any-return]


def fault_from_json(data: dict[str, Any]) -> Fault:
    return Fault(**data)


def snapshot_from_json(data: dict[str, Any]) -> MetricsSnapshot:
    values = dict(data)
    for field in dataclasses.fields(MetricsSnapshot):
        value = values.get(field.name)
        if isinstance(value, dict) and set(value) == {f.name for f in dataclasses.fields(Distribution)}:
            numbers = {k: math.nan if v is None else float(v) for k, v in value.items()}
            values[field.name] = Distribution(int(numbers["count"]), numbers["mean"], numbers["p50"],
                                              numbers["p90"], numbers["p99"], numbers["max"])
    values["requests_by_status"] = {int(k): v for k, v in values["requests_by_status"].items()}
    return MetricsSnapshot(**values)


def record_from_json(data: dict[str, Any]) -> RequestRecord:
    values = dict(data)
    values["headers"] = Headers([tuple(pair) for pair in values["headers"]])
    return RequestRecord(**values)
