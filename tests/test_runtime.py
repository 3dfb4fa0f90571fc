"""The runtime's hand-off between the engine and a request's handler (``Ticket``)."""

from __future__ import annotations

import threading

import pytest

from pytest_llmsim.sim import runtime
from pytest_llmsim.sim.engine import SimSequence
from pytest_llmsim.sim.runtime import FINISH, TOKEN, ClientGone, Ticket


@pytest.fixture
def every_wake_up_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every wake-up asks whether the client is there (no interval to wait for)."""
    monkeypatch.setattr(runtime, "CLIENT_CHECK_INTERVAL", 0.0)


def _hang_up(ticket: Ticket) -> None:
    """Read the ticket's news as a handler does, the client found gone at the first wake-up."""
    with pytest.raises(ClientGone):
        for _ in ticket.batches(client_gone=lambda: True):
            pass


def _wait_returns(ticket: Ticket, seconds: float = 2.0) -> bool:
    """Whether reading the ticket's news to the end returns within ``seconds`` (run in a thread: a
    stranded read never does). Reads as a stream's handler does: ``wait()`` skips reading once the
    ticket is over."""
    def read_to_the_end() -> None:
        for _ in ticket.batches():
            pass

    waiter = threading.Thread(target=read_to_the_end, daemon=True)
    waiter.start()
    waiter.join(seconds)
    return not waiter.is_alive()


@pytest.mark.usefixtures("every_wake_up_asks")
def test_a_hang_up_noticed_after_news_arrived_does_not_strand_the_wait_that_follows() -> None:
    """The handler learns of the hang-up just after a token's wake-up: the engine's next news (the
    cancelled sequence's finish) must still wake the ``wait()`` the handler then makes.

    It did not: the wake-up was taken, the token's news left unread, so the finish found the news
    non-empty and woke nobody — the handler waited for ever, holding its thread and the connection
    (a descriptor per such hang-up under load: ``benchmarks/memory.py`` showed them growing).
    """
    seq = SimSequence([1, 2, 3], 5)
    ticket = Ticket([seq])
    ticket.post(TOKEN, seq, 1, 0.1)
    _hang_up(ticket)
    ticket.post(FINISH, seq, 1, 0.2)  # the engine, cancelling the sequence
    assert _wait_returns(ticket), "wait() missed the finish"
    assert ticket.open_count == 0


@pytest.mark.usefixtures("every_wake_up_asks")
def test_a_finish_that_came_with_the_wake_up_is_counted_when_the_client_is_gone() -> None:
    """The wake-up brings the sequence's finish and the check finds the client gone: the finish is
    counted all the same, so the ``wait()`` that follows returns at once."""
    seq = SimSequence([1, 2, 3], 5)
    ticket = Ticket([seq])
    ticket.post(FINISH, seq, 5, 0.3)
    _hang_up(ticket)
    assert ticket.open_count == 0
    assert _wait_returns(ticket)


def test_wait_returns_only_when_every_sequence_is_over() -> None:
    """``wait()`` returns at once for a ticket whose sequences all finished (an instantaneous backend
    posts every finish before the handler waits), and keeps waiting while one is still running."""
    first, second = SimSequence([1, 2, 3], 5), SimSequence([1, 2, 3], 5)
    ticket = Ticket([first, second])
    ticket.post(FINISH, first, 5, 0.1)
    assert not ticket.over
    waiter = threading.Thread(target=ticket.wait, daemon=True)
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive(), "wait() returned with a sequence still running"
    ticket.post(FINISH, second, 5, 0.2)
    waiter.join(2.0)
    assert not waiter.is_alive()
    assert ticket.over
    done = Ticket([SimSequence([1], 1)])
    done.post(FINISH, done.sequences[0], 1, 0.3)
    done.wait()  # returns at once: nothing left to wait for
