"""peek shows what dequeue would deliver next, and changes nothing."""

from __future__ import annotations

from conftest import FakeClock, StoreEnv

import s3q


def test_peek_is_the_next_delivery_in_order_and_leases_nothing(env: StoreEnv) -> None:
    clock = FakeClock()
    q = env.open(clock=clock)
    try:
        q.enqueue(b"low")
        q.enqueue(b"high", priority=9)
        q.enqueue(b"g1", group="g")
        q.enqueue(b"g2", group="g")  # waits behind g1
        q.enqueue(b"later", delay=30)
        before = q.stats()
        peeked = q.peek(10)
        assert [m.payload for m in peeked] == [b"high", b"low", b"g1"]
        assert all(m.receipt is None for m in peeked)
        assert q.stats() == before
        assert [m.payload for m in q.dequeue(10, visibility_timeout=100)] == [
            b"high",
            b"low",
            b"g1",
        ]
        assert q.peek(10) == []
        clock.advance(31)
        assert [m.payload for m in q.peek(1)] == [b"later"]
    finally:
        q.close()


def test_peek_rejects_a_bad_limit(env: StoreEnv) -> None:
    q = env.open()
    try:
        for bad in (0, -1, "3", 1.5):
            try:
                q.peek(bad)  # type: ignore[arg-type]
            except s3q.InvalidArgument:
                continue
            raise AssertionError(f"peek({bad!r}) was accepted")
    finally:
        q.close()
