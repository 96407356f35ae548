"""Completed messages keep no record: status and stats answer for them from compact chunks
for ``completed_retention``, across checkpoints and replays."""

from __future__ import annotations

import pytest
from conftest import FakeClock, StoreEnv, drain

import s3q

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
