"""release gives delivered messages back unprocessed: visible at once, the delivery uncounted."""

from __future__ import annotations

import pytest
from conftest import FakeClock, StoreEnv

import s3q

S = s3q.MessageStatus


def test_released_messages_are_deliverable_at_once_with_attempts_unchanged(env: StoreEnv) -> None:
    clock = FakeClock()
    q = env.open(clock=clock, max_attempts=1)
    try:
        ids = q.enqueue_batch([b"a", b"b"])
        first = q.dequeue(2)
        assert [m.attempts for m in first] == [1, 1]
        q.release(first)
        assert [q.status(i) for i in ids] == [S.PENDING, S.PENDING]
        again = q.dequeue(2)
        assert [(m.id, m.attempts) for m in again] == [(ids[0], 1), (ids[1], 1)]
        with pytest.raises(s3q.ReceiptExpired):
            q.release(first[0])  # its lease ended with the release
        q.complete_batch(again)  # max_attempts=1: had the release counted, these would be dead
        assert [q.status(i) for i in ids] == [S.COMPLETED, S.COMPLETED]
    finally:
        q.close()


def test_release_survives_reopen_and_keeps_group_order(durable_env: StoreEnv) -> None:
    clock = FakeClock()
    q = durable_env.open(clock=clock)
    ids = q.enqueue_batch([{"payload": b"1", "group": "g"}, {"payload": b"2", "group": "g"}])
    [head] = q.dequeue(2)
    assert head.id == ids[0]
    q.release(head)
    q.close()
    q = durable_env.open(clock=clock)
    try:
        [m] = q.dequeue(2)
        assert (m.id, m.attempts) == (ids[0], 1)
    finally:
        q.close()


def test_release_of_an_unknown_receipt_changes_nothing(env: StoreEnv) -> None:
    q = env.open()
    try:
        q.enqueue(b"x")
        [m] = q.dequeue()
        before = q.stats()
        with pytest.raises(s3q.ReceiptExpired):
            q.release([m, "no-such-receipt"])
        after = q.stats()
        assert (after.processing, after.pending) == (before.processing, before.pending)
    finally:
        q.close()


def test_fail_tells_when_the_message_is_retried(env: StoreEnv) -> None:
    clock = FakeClock()
    q = env.open(clock=clock, max_attempts=2, retry_delay=10.0)
    try:
        q.enqueue(b"x")
        [m] = q.dequeue()
        retry_at = q.fail(m, "first")
        assert retry_at is not None and clock.now + 5.0 <= retry_at <= clock.now + 10.0
        clock.set(retry_at)
        [m] = q.dequeue()
        assert q.fail(m, "second") is None  # out of attempts: dead, no retry
    finally:
        q.close()
