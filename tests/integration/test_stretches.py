"""Leases per stretch: a dequeue of a run's members leases them as one stretch (one entry in the
Lease, no record each); settling part of it, failing or extending one member, the stretch's
lease running out, and a reopen in between all behave as leases of single messages do."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FakeClock, StoreEnv

import s3q
from s3q.log import segment
from s3q.log.ops import Lease

S = s3q.MessageStatus


def _state(q: s3q.Queue):  # type: ignore[no-untyped-def]
    return q._aq._engine.state


def _killed(q: s3q.Queue) -> None:
    """Close ``q`` as if its process died: no checkpoint, the next open replays the log."""
    q._aq._engine.commit.failure = s3q.StoreError("killed")
    q.close()


def test_a_dequeue_of_a_run_leases_one_stretch(env: StoreEnv, clock: FakeClock) -> None:
    q = env.open(clock=clock, visibility_timeout=30.0)
    ids = q.enqueue_batch([b"m%d" % i for i in range(10)])
    got = q.dequeue(10)
    assert [m.id for m in got] == ids
    assert [m.payload for m in got] == [b"m%d" % i for i in range(10)]
    assert {m.attempts for m in got} == {1}
    assert all(m.first_delivered_at == clock.now for m in got)
    state = _state(q)
    assert (len(state.messages), len(state.stretches), state.stretches.members) == (0, 1, 10)
    tokens = {m.receipt.split("~")[1] for m in got if m.receipt}
    assert len(tokens) == 1  # the receipts share the stretch's token
    assert {q.status(i) for i in ids} == {S.PROCESSING}
    assert q.stats().processing == 10


def test_the_lease_is_one_entry_in_the_log(tmp_path: Path, clock: FakeClock) -> None:
    with s3q.open(f"file://{tmp_path}/q", clock=clock) as q:
        q.enqueue_batch([b"x"] * 500)
        q.dequeue(500)
        newest = max((tmp_path / "q" / "log").iterdir())
        data = newest.read_bytes()
        assert data.endswith(b"S3Q%d" % segment.BASE_FORMAT) and segment.BASE_FORMAT >= 4
        (lease,) = [op for op in segment.decode(data, newest.name).ops if isinstance(op, Lease)]
        assert lease.leases == [] and lease.stretches is not None
        (stretch,) = lease.stretches
        assert stretch[2] == 500


def test_settling_part_of_a_stretch(env: StoreEnv, clock: FakeClock) -> None:
    q = env.open(clock=clock, visibility_timeout=30.0, max_attempts=3, retry_delay=5.0)
    ids = q.enqueue_batch([b"m%d" % i for i in range(8)])
    got = q.dequeue(8)
    q.complete_batch(got[:3])  # a range
    q.complete(got[5])  # one in the middle
    assert q.fail(got[3], "boom") is not None  # one member fails: a record of its own
    q.extend(got[4], 100.0)  # one outlives the stretch's lease
    q.release([got[6]])  # one given back
    with pytest.raises(s3q.ReceiptExpired):
        q.complete(got[0])  # settled already
    state = _state(q)
    assert state.stretches.members == 1  # got[7] only
    assert [q.status(i) for i in ids] == [S.COMPLETED] * 3 + [
        S.RETRY,
        S.PROCESSING,
        S.COMPLETED,
        S.PENDING,
        S.PROCESSING,
    ]
    [again] = q.dequeue(5)  # the released one: its delivery not counted
    assert (again.id, again.attempts) == (ids[6], 1)
    clock.advance(31)  # the stretch's lease (got[7]) runs out, got[4]'s does not
    later = q.dequeue(5)
    assert {m.id: m.attempts for m in later} == {ids[3]: 2, ids[6]: 2, ids[7]: 2}
    assert q.status(ids[4]) is S.PROCESSING
    with pytest.raises(s3q.ReceiptExpired):
        q.complete(got[7])  # its lease ran out and it went to another consumer
    q.complete(got[4])
    q.complete_batch(later)
    assert q.stats().completed == 8
    assert (len(state.stretches), state.stretches.members) == (0, 0)


@pytest.mark.parametrize("reopen", ["killed", "checkpoint"])
def test_a_stretch_outlives_a_reopen(env: StoreEnv, clock: FakeClock, reopen: str) -> None:
    options = {"visibility_timeout": 30.0, "max_attempts": 2, "clock": clock}
    q = env.open(**options)
    ids = q.enqueue_batch([b"m%d" % i for i in range(6)])
    got = q.dequeue(6)
    q.complete_batch(got[:2])
    if reopen == "killed":
        _killed(q)  # the stretch is replayed from the log's Lease
    else:
        q.compact()  # the stretch's members are in the checkpoint as records
        q.close()
    q = env.open(**options)
    assert [q.status(i) for i in ids] == [S.COMPLETED] * 2 + [S.PROCESSING] * 4
    q.complete(got[2])  # the receipts handed out before still settle their leases
    q.fail(got[3], "boom")
    with pytest.raises(s3q.ReceiptExpired):
        q.complete(got[0])
    clock.advance(31)
    again = q.dequeue(10)
    assert sorted(m.id for m in again) == [ids[3], ids[4], ids[5]]
    assert {m.attempts for m in again} == {2}
    clock.advance(31)  # the last attempt runs out: dead
    assert q.dequeue(10) == []
    assert {q.status(i) for i in ids[3:]} == {S.DEAD}
    assert q.stats().dead == 3


def test_peek_does_not_touch_a_stretch_whose_lease_ran_out(env: StoreEnv, clock: FakeClock) -> None:
    q = env.open(clock=clock, visibility_timeout=10.0)
    ids = q.enqueue_batch([b"a", b"b", b"c"])
    got = q.dequeue(3)
    state = _state(q)
    # peek on the index itself, at a time past the lease (a dequeue's sweep has not run)
    later = clock.now + 11
    assert [rec.id for rec in state.peek(later, 5, 5)] == ids
    assert (state.stretches.members, len(state.messages)) == (3, 0)  # as it was
    assert state.peek(clock.now, 5, 5) == []  # still leased now
    clock.advance(11)
    assert [m.id for m in q.peek(5)] == ids
    assert [m.id for m in q.dequeue(5)] == ids
    with pytest.raises(s3q.ReceiptExpired):
        q.complete(got[0])
