"""Stateful property test of subscriptions: random sequences of enqueues, pushes taken,
settles on the channel (complete, ack and flush, fail, release, extend), the channel closed and
opened again, and plain dequeues and completes over HTTP beside it, against a broker on
127.0.0.1. What must hold, whatever the sequence:

* a message is held by one consumer at a time: never by the subscription and a dequeue at once;
* the subscription never holds more than its prefetch unsettled;
* a settle on the channel answers as the lease it names stands (stale: ``ReceiptExpired``);
* what the channel held when it closed is delivered again at once (not at its lease's end);
* in the end every message is completed exactly once, and the queue says so.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import hypothesis.strategies as st
import pytest
from broker_harness import Broker
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import s3q
from s3q.client import Client, Subscription, connect
from s3q.errors import ReceiptExpired

pytestmark = pytest.mark.slow

VT = 120.0  # no lease runs out within a sequence: what moves is what the rules do
_broker: Broker | None = None


@pytest.fixture(scope="module", autouse=True)
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    global _broker
    store = f"file://{tmp_path_factory.mktemp('model')}/store"
    with Broker(store, max_attempts=1000, retry_delay=0.001, retry_delay_max=0.001) as b:
        _broker = b
        yield b
    _broker = None


class Subscriptions(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        assert _broker is not None
        self.client: Client = connect(_broker.url)
        self.q = self.client.queue(f"m{uuid.uuid4().hex[:12]}")
        self.enqueued: set[str] = set()
        self.completed: set[str] = set()
        self.taken: dict[str, s3q.Message] = {}  # taken from the subscription, not settled
        self.dequeued: dict[str, s3q.Message] = {}  # dequeued over HTTP, not settled
        self.stale: list[s3q.Message] = []  # settled or given back: receipts that are stale
        self.prefetch = 0
        self.sub: Subscription | None = None

    def _open(self, prefetch: int) -> None:
        self.prefetch = prefetch
        self.sub = self.q.subscribe(prefetch=prefetch, visibility_timeout=VT).open()

    def _live(self) -> int:
        return len(self.enqueued - self.completed)

    @rule(count=st.integers(1, 6))
    def enqueue(self, count: int) -> None:
        self.enqueued |= set(self.q.enqueue_batch([b"p"] * count))

    @precondition(lambda self: self.sub is None)
    @rule(prefetch=st.integers(1, 5))
    def subscribe(self, prefetch: int) -> None:
        self._open(prefetch)

    @precondition(lambda self: self.sub is not None)
    @rule()
    def take(self) -> None:
        assert self.sub is not None
        free = self._live() - len(self.taken) - len(self.dequeued)
        room = self.prefetch - len(self.taken)
        # a message must come when one is free and the subscription has room for it
        msg = self.sub.get(5.0 if free > 0 and room > 0 else 0.05)
        if free > 0 and room > 0:
            assert msg is not None, f"nothing pushed: {free} free, room for {room}"
        if msg is None:
            return
        assert msg.id in self.enqueued and msg.id not in self.completed
        assert msg.id not in self.dequeued, "held by a dequeue and pushed"
        assert msg.id not in self.taken
        self.taken[msg.id] = msg
        assert len(self.taken) <= self.prefetch

    def _settled(self, mid: str) -> s3q.Message:
        msg = self.taken.pop(mid)
        self.stale.append(msg)
        return msg

    @precondition(lambda self: self.taken)
    @rule(data=st.data(), how=st.sampled_from(["complete", "ack", "fail", "release"]))
    def settle(self, data: st.DataObject, how: str) -> None:
        assert self.sub is not None
        mid = data.draw(st.sampled_from(sorted(self.taken)))
        msg = self._settled(mid)
        if how == "complete":
            self.sub.complete(msg)
            self.completed.add(mid)
        elif how == "ack":
            self.sub.ack(msg)
            self.sub.flush()
            self.completed.add(mid)
        elif how == "fail":
            assert self.sub.fail(msg, "boom") is not None  # retried (1000 attempts)
        else:
            self.sub.release(msg)

    @precondition(lambda self: self.taken)
    @rule(data=st.data())
    def extend(self, data: st.DataObject) -> None:
        assert self.sub is not None
        msg = self.taken[data.draw(st.sampled_from(sorted(self.taken)))]
        self.sub.extend(msg, VT)

    @precondition(lambda self: self.stale and self.sub is not None)
    @rule(data=st.data(), how=st.sampled_from(["complete", "release", "fail"]))
    def settle_stale(self, data: st.DataObject, how: str) -> None:
        assert self.sub is not None
        msg = data.draw(st.sampled_from(self.stale))
        if msg.id in self.taken or msg.id in self.dequeued:
            held = self.taken.get(msg.id) or self.dequeued[msg.id]
            if held.receipt == msg.receipt:
                return  # (the same lease again: not stale)
        with pytest.raises(ReceiptExpired):
            if how == "complete":
                self.sub.complete(msg)
            elif how == "release":
                self.sub.release(msg)
            else:
                self.sub.fail(msg)

    @precondition(lambda self: self.sub is not None)
    @rule()
    def close(self) -> None:
        assert self.sub is not None
        self.sub.close()
        self.sub = None
        self.stale += self.taken.values()
        self.taken.clear()

    @rule(count=st.integers(1, 4))
    def dequeue(self, count: int) -> None:
        free = self._live() - len(self.taken) - len(self.dequeued)
        # what the subscription holds unseen is leased too: wait only for what must come
        got = self.q.dequeue(count, visibility_timeout=VT, wait=0.0)
        if self.sub is None and free > 0 and not got:
            got = self._waited(count)
        for msg in got:
            assert msg.id not in self.taken, "pushed and dequeued"
            assert msg.id not in self.dequeued and msg.id not in self.completed
            self.dequeued[msg.id] = msg

    def _waited(self, count: int) -> list[s3q.Message]:
        """A closed channel's leases come back a moment after the close: wait for them."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            got = self.q.dequeue(count, visibility_timeout=VT, wait=1.0)
            if got:
                return got
        raise AssertionError("messages free, none delivered within 10 s")

    @precondition(lambda self: self.dequeued)
    @rule(data=st.data())
    def complete_dequeued(self, data: st.DataObject) -> None:
        mid = data.draw(st.sampled_from(sorted(self.dequeued)))
        msg = self.dequeued.pop(mid)
        self.q.complete(msg)
        self.completed.add(mid)
        self.stale.append(msg)

    @invariant()
    def within_prefetch(self) -> None:
        assert len(self.taken) <= max(self.prefetch, 0) or self.sub is None

    def teardown(self) -> None:
        try:
            if self.sub is not None:
                self.close()
            for mid in list(self.dequeued):
                self.q.complete(self.dequeued.pop(mid))
                self.completed.add(mid)
            left = self.enqueued - self.completed
            deadline = time.monotonic() + 20
            while left and time.monotonic() < deadline:
                for msg in self.q.dequeue(10, visibility_timeout=VT, wait=1.0):
                    assert msg.id in left, "a message completed was delivered again"
                    self.q.complete(msg)
                    left.discard(msg.id)
                    self.completed.add(msg.id)
            assert not left, f"{len(left)} never delivered again"
            if not self.enqueued:
                return  # (no queue was made)
            st_ = self.q.stats()
            assert (st_.completed, st_.processing, st_.pending) == (len(self.enqueued), 0, 0)
        finally:
            self.client.close()


Subscriptions.TestCase.settings = settings(
    max_examples=int(__import__("os").environ.get("S3Q_MODEL_EXAMPLES", "20")),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
test_subscriptions_model = Subscriptions.TestCase
