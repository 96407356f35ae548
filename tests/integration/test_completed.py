"""Completed messages keep no record: status and stats answer for them from compact chunks
for ``completed_retention``, across checkpoints and replays."""

from __future__ import annotations

import pytest
from conftest import FakeClock, StoreEnv, drain

import s3q
from s3q.log import ids
from s3q.writer.cache import SWEEP_EVERY
from s3q.writer.checkpointer import CHECKPOINT_OBJECTS

S = s3q.MessageStatus


def _records(q: s3q.Queue) -> int:
    return len(q._aq._engine.state.messages)


def _in_stretches(q: s3q.Queue) -> int:
    """Messages leased as members of stretches: no record each either."""
    return q._aq._engine.state.stretches.members


def test_completed_messages_leave_no_record(env: StoreEnv, clock: FakeClock) -> None:
    q = env.open(clock=clock, completed_retention=100.0)
    ids = q.enqueue_batch([b"%d" % i for i in range(5000)])
    got = drain(q)
    assert (_records(q), _in_stretches(q)) == (0, 5000)  # leased in stretches of their runs
    q.complete_batch(got[:4000])
    for m in got[4000:]:
        q.complete(m)
    assert (_records(q), _in_stretches(q)) == (0, 0)
    assert q.stats().completed == 5000
    assert {q.status(ids[i]) for i in (0, 1234, 4999)} == {S.COMPLETED}
    with pytest.raises(s3q.ReceiptExpired):
        q.complete(got[0])
    q.close()

    q = env.open(clock=clock, completed_retention=100.0)  # from the checkpoint at close
    assert q.stats().completed == 5000 and q.status(ids[17]) == S.COMPLETED
    clock.advance(101)
    assert q.stats().completed == 0
    with pytest.raises(s3q.MessageNotFound):
        q.status(ids[17])
    assert q.cleanup() == 5000
    q.close()


def test_completions_replayed_from_the_log(raw_env: StoreEnv, clock: FakeClock) -> None:
    q = raw_env.open(clock=clock, checkpoint_ops=10**9, checkpoint_interval=10**6)
    ids = q.enqueue_batch([b"a", b"b", b"c"])
    got = drain(q)
    q.complete_batch(got[:2])
    state = q._aq._engine.state
    # as if killed: the next open replays the log, with no checkpoint since the enqueue
    q._aq._engine.commit.failure = s3q.StoreError("killed")
    q.close()
    assert state.retention.completed.count == 2
    q = raw_env.open(clock=clock)
    assert [q.status(i) for i in ids] == [S.COMPLETED, S.COMPLETED, S.PROCESSING]
    assert (_records(q), _in_stretches(q)) == (0, 1)


def test_a_checkpoint_due_by_log_objects_prunes_first(env: StoreEnv, clock: FakeClock) -> None:
    """Whatever makes a checkpoint due (here the count of log objects alone), retention and the
    dedup window are pruned as it is taken: otherwise a busy queue, whose checkpoints all come
    from that count, would remember every completion and dedup id for ever."""
    q = env.open(
        clock=clock,
        completed_retention=10.0,
        dedup_window=10.0,
        checkpoint_ops=10**9,
        checkpoint_interval=10**6,
    )
    first = q.enqueue(b"x", dedup_id="once")
    q.complete(drain(q)[0])
    retention = q._aq._engine.state.retention
    assert (len(retention.dedup), retention.completed.count) == (1, 1)
    clock.advance(11)
    for i in range(CHECKPOINT_OBJECTS[0] + 1):  # one log object each
        q.enqueue(b"%d" % i)
    assert (len(retention.dedup), retention.completed.count) == (0, 0)
    assert q.enqueue(b"y", dedup_id="once") != first
    q.close()


def test_the_cache_keeps_only_objects_with_messages_not_finished(env: StoreEnv) -> None:
    """A queue whose consumers keep up holds no payloads it will not read again: its cache
    is not filled to its budget with completed messages' log objects."""
    q = env.open(payload_cache_bytes=1 << 20)
    cache = q._aq._engine._core.cache
    for _ in range(50):
        q.enqueue_batch([b"p" * 1000] * 4)
        q.complete_batch(drain(q))
    assert cache.size <= SWEEP_EVERY * 4 * 1000  # what came since the last sweep, not 50
    kept = q.enqueue_batch([b"kept"] * 3)
    leased = drain(q)  # leased, not finished: their object stays while others come and go
    for _ in range(20):
        q.enqueue(b"gone")
        q.complete_batch(drain(q))
    seq = ids.enqueued_by(kept[0])  # the log object its payload rode
    assert cache.get(seq) is not None
    q.complete_batch(leased)
    for _ in range(2 * SWEEP_EVERY):  # a sweep or two later
        q.enqueue(b"next")
        q.complete_batch(drain(q))
    assert cache.get(seq) is None
    q.close()
