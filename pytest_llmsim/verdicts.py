"""Verdicts on the client: how the code under test behaved toward the backend, read from the request log.

A gateway's retries and its handling of cut answers are what break in production; the backend saw every
attempt, so it can say what the client did wrong:

- ``ignored_retry_after``: a request sent by the same client (the same API key, or none) before the
  ``Retry-After`` of an error it was told had elapsed (a 429's, a 503's);
- ``retried_without_backoff``: a retry of a failed call sent less than ``backoff_floor`` wall seconds after the
  failure was answered (openai-python and anthropic-sdk-python wait at least 0.375 s; the default floor is 0.1 s);
- ``retried_non_retryable``: a call retried after an answer that retrying cannot change (400, 401, 403, 404,
  413, 422);
- ``accepted_truncated_stream``: a conversation continued from a stream that ended short (cut by a fault, with
  text sent): a later request's conversation is the cut one's followed by an assistant turn whose text is what the
  cut stream had sent, as if the answer had been whole;
- ``exceeded_told_rate_limit``: a request sent by the same client before the limit reset that a successful
  answer's rate-limit headers said was used up (``x-ratelimit-remaining-requests: 0`` or no tokens left).

Over several backends (a primary and its fallbacks, :func:`judge_failover`):

- ``failed_over_too_early``: a call that moved to another backend after fewer failed attempts on the one it
  started on than the gateway's policy retries first (``retries``, the gateway's own setting: 0 never judges);
- ``never_failed_over``: a call whose every attempt went to one backend and failed (a retryable failure) while
  another backend was there to take it.

A connection the client kept using after the backend closed it cannot be judged here: the server never reads
from a closed connection, so the attempt never reaches a log (the client sees a connection error).

Attempts of one call are requests to the same route with the same body; where the client numbers its retries
(``x-stainless-retry-count``, sent by the OpenAI and Anthropic SDKs) a request numbered 0 is a new call, not a
retry. Times are the server's wall clock: a request's arrival (the kernel's receive time) and the end of its
answer, so a client that waited is never judged too fast (what it measured started later still).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .sim.request_log import RequestRecord
from .sim.secrets import presented_credentials

__all__ = ["FAILOVER_KINDS", "NON_RETRYABLE_STATUSES", "VERDICT_KINDS", "Verdict", "assert_behaved",
           "assert_failed_over", "judge", "judge_failover"]

#: Every verdict, in the order they are given.
VERDICT_KINDS = ("ignored_retry_after", "retried_without_backoff", "retried_non_retryable",
                 "accepted_truncated_stream", "exceeded_told_rate_limit")
#: The verdicts over several backends (:func:`judge_failover`).
FAILOVER_KINDS = ("failed_over_too_early", "never_failed_over")
#: Answers a retry cannot change: the request itself is wrong.
NON_RETRYABLE_STATUSES = frozenset({400, 401, 403, 404, 413, 422})
RETRY_HEADER = "x-stainless-retry-count"
_ASSISTANT_ROLES = ("assistant", "model", "chatbot")


@dataclass(frozen=True)
class Verdict:
    """One kind of misbehaviour, judged over the request log: ``ok`` when the client never showed it, else the
    requests involved (each offence's earlier request, then the one that offended) and a line per offence."""

    kind: str
    ok: bool
    requests: list[RequestRecord] = field(default_factory=list)
    offences: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        if self.ok:
            return f"{self.kind}: ok"
        return f"{self.kind}: {len(self.offences)} time(s)\n" + "\n".join(f"  - {line}" for line in self.offences)


def judge(records: Sequence[RequestRecord], backoff_floor: float = 0.1) -> list[Verdict]:
    """A :class:`Verdict` per kind (``VERDICT_KINDS``) over ``records`` (a backend's log, oldest first)."""
    timed = sorted((r for r in records if r.arrived is not None), key=lambda r: r.arrived)  # type: ignore
    out = []
    for kind, finder in (("ignored_retry_after", _ignored_retry_after),
                         ("retried_without_backoff", lambda rs: _fast_retries(rs, backoff_floor)),
                         ("retried_non_retryable", _non_retryable_retries),
                         ("accepted_truncated_stream", _accepted_truncations),
                         ("exceeded_told_rate_limit", _exceeded_told_limits)):
        found = list(finder(timed))
        involved = [record for pair, _ in found for record in pair]
        out.append(Verdict(kind, not found, involved, [line for _, line in found]))
    return out


def assert_behaved(records: Sequence[RequestRecord], kinds: Iterable[str] = VERDICT_KINDS,
                   backoff_floor: float = 0.1) -> None:
    """Raise AssertionError listing each offence of ``kinds`` (all by default) with the requests involved."""
    _raise_offences(tuple(kinds), VERDICT_KINDS, lambda: judge(records, backoff_floor))


def _raise_offences(kinds: tuple[str, ...], known: tuple[str, ...], verdicts: Callable[[], list[Verdict]]) -> None:
    """ValueError for a kind not in ``known``; AssertionError listing each offence of ``kinds`` in ``verdicts()``."""
    unknown = sorted(set(kinds) - set(known))
    if unknown:
        raise ValueError(f"unknown verdict {unknown[0]!r}; known: {', '.join(known)}")
    failed = [verdict for verdict in verdicts() if verdict.kind in kinds and not verdict.ok]
    if failed:
        raise AssertionError("the client misbehaved:\n" + "\n".join(str(verdict) for verdict in failed))


def judge_failover(logs: Mapping[str, Any], retries: int = 0) -> list[Verdict]:
    """A :class:`~pytest_llmsim.verdicts.Verdict` per kind of ``FAILOVER_KINDS`` over several backends: name ->
    the backend (an ``LLMBackend`` or ``RemoteBackend``) or its request log.

    Attempts of one call are requests whose conversation ends in the same turn (the question a gateway forwards,
    whichever API it speaks to each backend), in arrival order; a call ends at its first success. ``retries``:
    how many times the gateway is set to retry a backend before it fails over (0: ``failed_over_too_early`` is
    never judged)."""
    logs = {name: getattr(log, "requests", log) for name, log in logs.items()}  # a backend, or its log
    attempts = sorted(((name, record) for name, log in logs.items() for record in log if record.arrived is not None),
                      key=lambda pair: pair[1].arrived or 0.0)
    calls: dict[str, list[tuple[str, RequestRecord]]] = {}
    early: list[tuple[tuple[RequestRecord, RequestRecord], str]] = []
    never: list[tuple[tuple[RequestRecord, RequestRecord], str]] = []

    def close(call: list[tuple[str, RequestRecord]]) -> None:
        first_backend = call[0][0]
        moved = next((i for i, (name, _) in enumerate(call) if name != first_backend), None)
        if moved is not None and retries and moved < retries + 1:
            earlier, later = call[moved - 1][1], call[moved][1]
            early.append(((earlier, later), f"{later.summary()} on {call[moved][0]} after {moved} failed attempt(s) "
                                            f"on {first_backend} (the policy retries {retries} time(s) first)"))
        last = call[-1][1]
        if moved is None and len(logs) > 1 and not last.ok and last.status not in NON_RETRYABLE_STATUSES:
            others = ", ".join(name for name in logs if name != first_backend)
            never.append(((call[0][1], last), f"{len(call)} attempt(s), all on {first_backend}, the last "
                                              f"{last.summary()}: never tried {others}"))

    for name, record in attempts:
        key = _question(record)
        call = calls.setdefault(key, [])
        call.append((name, record))
        if record.ok:
            close(calls.pop(key))
    for call in calls.values():
        close(call)
    return [Verdict(kind, not found, [r for pair, _ in found for r in pair], [line for _, line in found])
            for kind, found in (("failed_over_too_early", early), ("never_failed_over", never))]


def assert_failed_over(logs: Mapping[str, Any], retries: int = 0,
                       kinds: Iterable[str] = FAILOVER_KINDS) -> None:
    """Raise AssertionError listing each failover offence of ``kinds`` over ``logs`` (name -> a backend's log)."""
    _raise_offences(tuple(kinds), FAILOVER_KINDS, lambda: judge_failover(logs, retries))


# --- what each verdict looks for: ((earlier, offending), line) pairs ---

Found = Iterable[tuple[tuple[RequestRecord, RequestRecord], str]]


def _line(earlier: RequestRecord, later: RequestRecord, what: str) -> str:
    gap = (later.arrived or 0.0) - (earlier.finished or earlier.arrived or 0.0)
    return f"{later.summary()} sent {gap:.3f} s after {earlier.summary()}: {what}"


def _ignored_retry_after(records: list[RequestRecord]) -> Found:
    told: dict[str, tuple[RequestRecord, float]] = {}  # client -> the error that said when, and until when
    for record in records:
        client = _client(record)
        earlier = told.get(client)
        if earlier is not None and record.arrived is not None and record.arrived < earlier[1]:
            yield (earlier[0], record), _line(earlier[0], record, f"Retry-After was {earlier[0].retry_after:g} s")
        if record.retry_after is not None and record.finished is not None:
            until = record.finished + record.retry_after
            if earlier is None or until > earlier[1]:
                told[client] = (record, until)


def _exceeded_told_limits(records: list[RequestRecord]) -> Found:
    told: dict[str, tuple[RequestRecord, float]] = {}  # client -> the answer that said none left, and until when
    for record in records:
        client = _client(record)
        earlier = told.get(client)
        if earlier is not None and record.arrived is not None and record.arrived < earlier[1]:
            yield (earlier[0], record), _line(earlier[0], record, f"its rate-limit headers said none left for "
                                                                  f"{earlier[0].limit_reset:g} s")
        if record.limit_reset is not None and record.finished is not None:
            told[client] = (record, record.finished + record.limit_reset)


def _fast_retries(records: list[RequestRecord], floor: float) -> Found:
    for failed, retry in _retries(records):
        if failed.finished is not None and retry.arrived is not None and retry.arrived - failed.finished < floor:
            yield (failed, retry), _line(failed, retry, f"a retry sooner than {floor:g} s (no backoff)")


def _non_retryable_retries(records: list[RequestRecord]) -> Found:
    for failed, retry in _retries(records):
        if failed.status in NON_RETRYABLE_STATUSES:
            yield (failed, retry), _line(failed, retry, f"{failed.status} is not retryable")


def _retries(records: list[RequestRecord]) -> Iterable[tuple[RequestRecord, RequestRecord]]:
    """Each failed attempt and the retry that followed it (the next request of the same call)."""
    last: dict[tuple[str, str], RequestRecord] = {}
    for record in records:
        key = (record.route, _fingerprint(record))
        previous = last.get(key)
        last[key] = record
        if previous is None or previous.ok:
            continue
        count = record.headers.get(RETRY_HEADER)
        if count is not None and count.strip() == "0":
            continue  # the client says: a new call with the same body
        yield previous, record


def _accepted_truncations(records: list[RequestRecord]) -> Found:
    cut = [(record, conversation) for record in records if _cut_short(record)
           for conversation in [_conversation(record)] if conversation]
    for record in records:
        turns = _conversation(record)
        if not turns:
            continue
        for short, before in cut:
            if (short is not record and (record.arrived or 0.0) > (short.arrived or 0.0)
                    and len(turns) > len(before) and turns[:len(before)] == before
                    and _role(turns[len(before)]) in _ASSISTANT_ROLES
                    and _text(turns[len(before)]).strip() == (short.cut_answer or "").strip()):
                yield (short, record), _line(short, record, f"continued from an answer cut short ({short.ended}, "
                                                            f"{short.completion_tokens} tokens)")


def _cut_short(record: RequestRecord) -> bool:
    return record.stream and bool(record.cut_answer and record.cut_answer.strip())


def _text(turn: Any) -> str:
    """A turn's text: OpenAI's, Anthropic's and Ollama's ``content`` (a string or parts), Gemini's ``parts``."""
    if not isinstance(turn, dict):
        return ""
    content = turn.get("content", turn.get("parts"))
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict)
                       and isinstance(part.get("text", ""), str))
    return ""


def _conversation(record: RequestRecord) -> list[Any]:
    body = record.body
    if not isinstance(body, dict):
        return []
    for name in ("messages", "contents", "input"):
        turns = body.get(name)
        if isinstance(turns, list):
            return turns
    return []


def _question(record: RequestRecord) -> str:
    """What a call asks, whichever API carried it: its conversation's last turn's text (else its body)."""
    turns = _conversation(record)
    if turns:
        return "turn:" + _text(turns[-1])
    return f"body:{_fingerprint(record)}"


def _role(turn: Any) -> Any:
    return turn.get("role") if isinstance(turn, dict) else None


def _client(record: RequestRecord) -> str:
    keys = presented_credentials(record.headers, "")[0]
    return keys[0] if keys else ""


def _fingerprint(record: RequestRecord) -> str:
    body = record.body
    try:
        text = json.dumps(body, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = repr(body)
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()
