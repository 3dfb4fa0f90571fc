"""The runtime's hand-off between the engine and a request's handler (``TokenFeed``)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from pytest_llmsim.sim import token_feed
from pytest_llmsim.sim.engine import SimSequence
from pytest_llmsim.sim.token_feed import FINISH, TOKEN, ClientGone, TokenFeed


@pytest.fixture
def every_wake_up_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every wake-up asks whether the client is there (no interval to wait for)."""
    monkeypatch.setattr(token_feed, "CLIENT_CHECK_INTERVAL", 0.0)


def _hang_up(feed: TokenFeed) -> None:
    """Read the feed's news as a handler does, the client found gone at the first wake-up."""
    with pytest.raises(ClientGone):
        for _ in feed.batches(client_gone=lambda: True):
            pass


def _wait_returns(feed: TokenFeed, seconds: float = 2.0) -> bool:
    """Whether reading the feed's news to the end returns within ``seconds`` (run in a thread: a
    stranded read never does). Reads as a stream's handler does: ``wait()`` skips reading once the
    feed is over."""
    def read_to_the_end() -> None:
        for _ in feed.batches():
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
    feed = TokenFeed([seq])
    feed.post(TOKEN, seq, 1, 0.1)
    _hang_up(feed)
    feed.post(FINISH, seq, 1, 0.2)  # the engine, cancelling the sequence
    assert _wait_returns(feed), "wait() missed the finish"
    assert feed.open_count == 0


@pytest.mark.usefixtures("every_wake_up_asks")
def test_a_finish_that_came_with_the_wake_up_is_counted_when_the_client_is_gone() -> None:
    """The wake-up brings the sequence's finish and the check finds the client gone: the finish is
    counted all the same, so the ``wait()`` that follows returns at once."""
    seq = SimSequence([1, 2, 3], 5)
    feed = TokenFeed([seq])
    feed.post(FINISH, seq, 5, 0.3)
    _hang_up(feed)
    assert feed.open_count == 0
    assert _wait_returns(feed)


def test_wait_returns_only_when_every_sequence_is_over() -> None:
    """``wait()`` returns at once for a feed whose sequences all finished (an instantaneous backend
    posts every finish before the handler waits), and keeps waiting while one is still running."""
    first, second = SimSequence([1, 2, 3], 5), SimSequence([1, 2, 3], 5)
    feed = TokenFeed([first, second])
    feed.post(FINISH, first, 5, 0.1)
    assert not feed.over
    waiter = threading.Thread(target=feed.wait, daemon=True)
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive(), "wait() returned with a sequence still running"
    feed.post(FINISH, second, 5, 0.2)
    waiter.join(2.0)
    assert not waiter.is_alive()
    assert feed.over
    done = TokenFeed([SimSequence([1], 1)])
    done.post(FINISH, done.sequences[0], 1, 0.3)
    done.wait()  # returns at once: nothing left to wait for


def _writes_directly(feed: TokenFeed, seconds: float, then_finish: bool) -> threading.Thread:
    """A thread that plays the engine writing ``token_feed``'s tokens itself (``TokenFeed.direct``) every 5 ms for
    ``seconds``, through the runtime's listener, then posts the finish (or falls silent)."""
    seq = feed.sequences[0]
    seq.owner = feed
    listener = token_feed.TokenFeedListener()

    def send(sequence: SimSequence, emitted: int, due: float) -> bool:
        feed.direct_writes += 1  # as the server's writer counts a send that went out
        return True

    feed.direct = send

    def write() -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            seq.emitted += 1
            listener.on_token(seq, 0.0)
            time.sleep(0.005)
        if then_finish:
            feed.post(FINISH, seq, seq.emitted, 0.0)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    return writer


def test_a_stream_the_engine_writes_is_not_polled_for_hang_ups_while_its_writes_go_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """While the engine writes a stream's tokens itself, the handler is not woken every check interval
    to look for a hang-up: a send to a client that is gone fails and wakes it. It was: at 64 streams,
    those wake-ups (20 a second per stream) were a fifth of the loop core's busy time."""
    monkeypatch.setattr(token_feed, "CLIENT_CHECK_INTERVAL", 0.01)
    monkeypatch.setattr(token_feed, "QUIET_CHECK_INTERVAL", 0.2)
    feed = TokenFeed([SimSequence([1, 2, 3], 1000)])
    looks: list[float] = []

    def client_gone() -> bool:
        looks.append(time.monotonic())
        return False

    writer = _writes_directly(feed, 0.4, then_finish=True)
    for _ in feed.batches(client_gone):
        pass
    writer.join()
    assert len(looks) <= 5, f"{len(looks)} looks for a hang-up in 0.4 s of direct writes (every 10 ms: ~40)"


def test_a_hang_up_is_noticed_at_the_check_interval_once_the_direct_writes_stop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """When the engine's writes stop (a preempted stream waits for a slot) and the client hangs up, the
    handler notices within one quiet interval and the short ones after it."""
    monkeypatch.setattr(token_feed, "CLIENT_CHECK_INTERVAL", 0.01)
    monkeypatch.setattr(token_feed, "QUIET_CHECK_INTERVAL", 0.2)
    feed = TokenFeed([SimSequence([1, 2, 3], 1000)])
    writer = _writes_directly(feed, 0.1, then_finish=False)
    writer.join()
    stopped = time.monotonic()
    with pytest.raises(ClientGone):
        for _ in feed.batches(lambda: True):
            pass
    assert time.monotonic() - stopped < 1.0


def test_only_the_direct_writes_that_send_bytes_count_as_writes_going_out() -> None:
    """A token event the engine-side writer takes without sending a byte (OpenAI chat hides a reasoning
    model's thinking: its token events render empty) proves nothing about the client, so the handler must
    keep looking for a hang-up at the short interval; one that sends does count."""
    from pytest_llmsim.server.stream_writer import ChunkOutput, _DirectWriter

    class Renderer:
        def opening(self, index: int) -> bytes:
            return b""

        def token(self, index: int, position: int, piece: str) -> bytes:
            return b"" if position < 2 else f"data: {piece}\n\n".encode()

    server_side, client_side = socket.socketpair()
    with server_side, client_side:
        seq = SimSequence([1, 2, 3], 4)
        feed = TokenFeed([seq])
        seq.owner = feed
        writer = _DirectWriter(ChunkOutput(server_side), Renderer(), ["a", "b", "c", "d"], lambda due: None, feed)
        writer.enabled = True
        feed.direct = writer
        listener = token_feed.TokenFeedListener()
        for emitted in (1, 2):  # the hidden thinking
            seq.emitted = emitted
            listener.on_token(seq, 0.0)
        assert feed.direct_writes == 0
        seq.emitted = 3
        listener.on_token(seq, 0.0)
        assert feed.direct_writes == 1
        assert client_side.recv(100) == b"9\r\ndata: c\n\n\r\n"  # one HTTP/1.1 chunk of 9 bytes


def test_the_direct_writer_renders_a_stream_the_same_a_token_at_a_time_or_in_a_backlog() -> None:
    """The engine-side writer's one-token path (the usual call) and its backlog path give the same events in
    the same order: an opening first, each piece once."""
    from pytest_llmsim.server.stream_writer import ChunkOutput, _DirectWriter

    class Renderer:
        def opening(self, index: int) -> bytes:
            return b"[open]"

        def token(self, index: int, position: int, piece: str) -> bytes:
            return f"<{position}:{piece}>".encode()

    pieces = ["a", "b", "c", "d", "e"]
    feed = TokenFeed([SimSequence([1], 5)])
    with socket.socket() as first, socket.socket() as second:
        one_at_a_time = _DirectWriter(ChunkOutput(first), Renderer(), pieces, lambda due: None, feed)
        backlog = _DirectWriter(ChunkOutput(second), Renderer(), pieces, lambda due: None, feed)
        stepwise = b"".join(one_at_a_time.render(upto) for upto in (1, 2, 2, 3, 4, 5))
        assert stepwise == backlog.render(2) + backlog.render(5) + backlog.render(5)
        assert stepwise == b"[open]<0:a><1:b><2:c><3:d><4:e>" and one_at_a_time.written == 5
