"""Completed messages keep no record: status and stats answer for them from compact chunks
for ``completed_retention``, across checkpoints and replays."""

from __future__ import annotations

import pytest
from conftest import FakeClock, StoreEnv, drain

import s3q
from s3q.completed import Chunk, Completed

S = s3q.MessageStatus


def test_a_chunk_holds_ranges_of_places() -> None:
    chunk = Chunk.of(7, 1.0, [5, 3, 4, 9, 4, 12, 11])
    assert list(chunk.ranges) == [3, 6, 9, 10, 11, 13]
    assert chunk.count == 6
    assert [p for p in range(15) if p in chunk] == [3, 4, 5, 9, 11, 12]


def test_completed_by_object_and_time_then_pruned() -> None:
    done = Completed()
    done.add(10.0, {1: list(range(1000)), 2: [5]})
    done.add(20.0, {1: [2000, 2001]})
    assert done.count == 1003 and len(done) == 3
    assert done.finished_at(1, 999) == 10.0 and done.finished_at(1, 2001) == 20.0
    assert done.finished_at(1, 1000) is None and done.finished_at(3, 0) is None
    assert done.count_since(10.0) == 2 and done.count_since(9.0) == 1003
    assert done.prunable(10.0) and not done.prunable(9.9)
    assert done.prune(10.0) == 1001
    assert done.finished_at(1, 5) is None and done.finished_at(1, 2000) == 20.0
    again = Completed.from_snap(done.to_snap())
    assert again.count == 2 and again.finished_at(1, 2000) == 20.0


def _records(q: s3q.Queue) -> int:
    return len(q._aq._engine.state.messages)


def test_completed_messages_leave_no_record(env: StoreEnv, clock: FakeClock) -> None:
    q = env.open(clock=clock, completed_retention=100.0)
    ids = q.enqueue_batch([b"%d" % i for i in range(5000)])
    got = drain(q)
    assert _records(q) == 5000  # leased: a record each
    q.complete_batch(got[:4000])
    for m in got[4000:]:
        q.complete(m)
    assert _records(q) == 0
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
    assert state.completed.count == 2
    q = raw_env.open(clock=clock)
    assert [q.status(i) for i in ids] == [S.COMPLETED, S.COMPLETED, S.PROCESSING]
    assert _records(q) == 1
