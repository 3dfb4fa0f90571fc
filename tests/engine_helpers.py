"""What the engine tests share: a listener that keeps token times, an engine factory, prompts."""

from __future__ import annotations

from typing import Any

from pytest_llmsim.sim.config import SimConfig
from pytest_llmsim.sim.engine import Engine, SeqState, SimSequence


class Recorder:
    """Engine listener that keeps every token time and finish."""

    def __init__(self) -> None:
        self.tokens: dict[int, list[float]] = {}
        self.finished: list[tuple[int, SeqState, float]] = []

    def on_token(self, seq: SimSequence, now: float) -> None:
        self.tokens.setdefault(seq.index, []).append(now)

    def on_finish(self, seq: SimSequence, now: float) -> None:
        self.finished.append((seq.index, seq.state, now))


def make_engine(kind: type[Engine] = Engine, **settings: Any) -> tuple[Any, Recorder]:
    """An engine of ``kind`` with ``settings`` over the defaults, and its recorder."""
    recorder = Recorder()
    return kind(SimConfig().replace(**settings), recorder), recorder


def prompt(length: int, start: int = 1000) -> list[int]:
    return list(range(start, start + length))


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:])]
