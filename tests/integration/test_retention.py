"""Retention: a queue with ``retention`` removes the messages enqueued that long ago, whatever
their state, through its log (a Retire operation), so a reopened queue, a queue read from its
log alone and the history agree; payloads of retired messages become garbage; a queue without
retention keeps every message however old."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeClock, StoreEnv
from histories import observe

import s3q
import s3q.index.state
from s3q.history import log_events
from s3q.log import ids, segment
from s3q.log.ops import Retire
from s3q.store import open_store

S = s3q.MessageStatus
RETENTION = 3600.0
OPTIONS: dict[str, Any] = dict(
    retention=RETENTION,
    max_attempts=2,
    retry_delay=300.0,
    retry_delay_max=300.0,
    visibility_timeout=7200.0,
    max_delay=7200.0,
    large_payload=1024,  # the big message's payload goes to an object of its own
    gc_grace=1e6,  # the whole log kept, to be read alone (the test collects it at the end)
    completed_retention=0.0,
)


def _state(q: s3q.Queue) -> Any:
    return q._aq._engine.state


def _old_messages(q: s3q.Queue, clock: FakeClock) -> dict[str, str]:
    """Messages enqueued at the clock's start, in every state by its start + 3599 s: id -> the
    state. The clock is left there."""
    t0 = clock.now
    run = q.enqueue_batch([b"r%d" % i for i in range(40)])
    delayed = q.enqueue(b"later", delay=5000.0)
    g1 = q.enqueue(b"g1", group="g", priority=5)
    g2 = q.enqueue(b"g2", group="g", priority=5)
    big = q.enqueue(b"B" * 5000, priority=5)
    assert {m.id for m in q.dequeue(2)} == {g1, big}  # leased alone (g2 waits behind g1)
    stretch = q.dequeue(10)  # a stretch of the run's members
    assert [m.id for m in stretch] == run[:10]
    (dying,) = q.dequeue(1)
    q.fail(dying, "first")
    clock.set(t0 + 301.0)
    (again,) = q.dequeue(1)
    assert again.id == dying.id
    q.fail(again, "second")  # the last attempt: dead
    clock.set(t0 + 3500.0)
    (retrying,) = q.dequeue(1)
    q.fail(retrying, "retried after the retention")  # backoff 150 to 300 s
    clock.set(t0 + RETENTION - 1)
    states = {
        g1: S.PROCESSING,
        big: S.PROCESSING,
        run[0]: S.PROCESSING,
        run[9]: S.PROCESSING,
        dying.id: S.DEAD,
        retrying.id: S.RETRY,
        delayed: S.DELAYED,
        g2: S.PENDING,
        run[20]: S.PENDING,
        run[39]: S.PENDING,
    }
    for mid, status in states.items():
        assert q.status(mid) is status, mid
    old = {mid: "pending" for mid in [*run, delayed, g1, g2, big]}
    old.update((mid, status.value) for mid, status in states.items())
    return old


async def _events(env: StoreEnv) -> list[log_events.Event]:
    store = open_store(env.url, dict(env.options))
    try:
        return [e async for e in log_events.read(store)]
    finally:
        await store.close()


def test_messages_in_every_state_retire_and_every_reader_agrees(
    durable_env: StoreEnv, clock: FakeClock
) -> None:
    q = durable_env.open(clock=clock, **OPTIONS)
    old = _old_messages(q, clock)
    assert len(q.dead_letters()) == 1
    first_log = ids.enqueued_by(next(iter(old)))  # the log object that enqueued the run
    present = durable_env.keys()
    assert segment.key(first_log) in present
    assert any(k.startswith("blob/") for k in present)  # the big message's payload
    young = q.enqueue_batch([{"payload": b"y%d" % i, "priority": 9} for i in range(5)])
    young_delayed = q.enqueue(b"young later", delay=100.0)
    leased_young = q.dequeue(1, visibility_timeout=1.0)
    assert [m.id for m in leased_young] == [young[0]]
    clock.advance(2.0)  # the old ones are past their retention, the young ones not
    stats = q.stats()  # (the first call since: it retires, then counts)
    assert stats.retired == len(old) == 44
    assert (stats.pending, stats.processing, stats.retry, stats.dead, stats.delayed) == (
        5,  # (the young lease ran out)
        0,
        0,
        0,
        1,
    )
    events = asyncio.run(_events(durable_env))  # the history, read with no writer
    retirements = [e for e in events if e.kind == "retired"]
    assert sorted(e.id for e in retirements if e.id) == sorted(old)
    assert {e.at for e in retirements} == {clock.now}
    dead = next(mid for mid, state in old.items() if state == "dead")
    life = [e.kind for e in asyncio.run(_life(durable_env, dead))]
    assert life == ["enqueued", "leased", "failed", "retried", "dead", "retired"]
    for mid in old:
        with pytest.raises(s3q.MessageNotFound):
            q.status(mid)
    assert q.dead_letters() == []
    ops = [op for k in durable_env.log_keys() for op in _ops(durable_env, k)]
    retired = [op for op in ops if isinstance(op, Retire)]
    assert len(retired) == 1 and retired[0].at == clock.now
    assert retired[0].ranges is not None  # the run's members: one range, not 28 ids
    assert sum(c for _, _, c in retired[0].ranges) + len(retired[0].ids) == 44
    # the same queue read from its log alone agrees with it
    q.close()
    full = durable_env.sibling()
    keys = durable_env.keys()
    durable_env.copy_to(
        full, exclude=tuple(k for k in keys if k.startswith(("checkpoint/", "writer.")))
    )
    everyone = [*old, *young, young_delayed]
    from_log = full.open(clock=clock)
    again = durable_env.open(clock=clock, gc_grace=0.0)
    try:
        seen = observe(again, everyone)
        assert seen == observe(from_log, everyone)
        assert {mid for mid, status in seen["statuses"].items() if status != "gone"} == {
            *young,
            young_delayed,
        }
        assert again.configure()["retention"] == RETENTION  # saved with the queue
        clock.advance(100.0)
        got = again.dequeue(100)
        assert {m.id: m.payload for m in got} == {
            **{mid: b"y%d" % i for i, mid in enumerate(young)},
            young_delayed: b"young later",
        }
        # the payloads of retired messages are garbage: the log object that enqueued the run
        # and the big message's object are gone once collected
        again.compact()
        present = durable_env.keys()
        assert segment.key(first_log) not in present
        assert not any(k.startswith("blob/") for k in present)
    finally:
        again.close()
        from_log.close()


async def _life(env: StoreEnv, mid: str) -> list[log_events.Event]:
    store = open_store(env.url, dict(env.options))
    try:
        return await log_events.life(store, mid)
    finally:
        await store.close()


def _ops(env: StoreEnv, key: str) -> list[Any]:
    return list(segment.decode(env.read(key), key).ops)


def test_a_receipt_of_a_retired_message_is_stale(env: StoreEnv, clock: FakeClock) -> None:
    q = env.open(clock=clock, retention=60.0, visibility_timeout=600.0)
    q.enqueue_batch([b"a", b"b", b"c"])
    leased = q.dequeue(3)
    assert len(leased) == 3
    q.complete(leased[0])
    clock.advance(60.0)
    for call in (
        lambda: q.complete(leased[1]),
        lambda: q.extend(leased[1], 30.0),
        lambda: q.fail(leased[2], "late"),
        lambda: q.release([leased[2]]),
    ):
        with pytest.raises(s3q.ReceiptExpired, match="retired by the queue's retention"):
            call()
    stats = q.stats()
    assert (stats.processing, stats.completed, stats.retired) == (0, 1, 2)
    assert q.status(leased[0].id) is S.COMPLETED  # a completed message is not retired


def test_a_queue_only_written_to_retires_as_it_commits(
    durable_env: StoreEnv, clock: FakeClock
) -> None:
    """No read, no dequeue: the retirement rides the next commit."""
    q = durable_env.open(clock=clock, retention=60.0)
    old = q.enqueue_batch([b"x"] * 100)
    clock.advance(61.0)
    new = q.enqueue(b"new")
    q.close()
    retired = [
        op for k in durable_env.log_keys() for op in _ops(durable_env, k) if isinstance(op, Retire)
    ]
    assert [(r.ids, r.ranges) for r in retired] == [([], [(ids.enqueued_by(old[0]), 0, 100)])]
    with durable_env.open(clock=clock) as q:
        assert q.stats().pending == 1
        assert [m.id for m in q.dequeue(10)] == [new]


def test_a_queue_without_retention_keeps_every_message_however_old(
    env: StoreEnv, clock: FakeClock
) -> None:
    q = env.open(clock=clock, max_attempts=1)
    sent = q.enqueue_batch([b"m%d" % i for i in range(20)])
    q.fail(q.dequeue(1)[0], "dead letter")
    q.dequeue(5, visibility_timeout=1e4)
    before = observe(q, sent)
    clock.advance(1e8)  # three years
    q.enqueue(b"later")
    after = observe(q, sent)
    assert after["statuses"] == before["statuses"] | {  # (their leases ran out, the last try)
        mid: "dead" for mid, status in before["statuses"].items() if status == "processing"
    }
    assert len(after["dead"]) == 6 and q.stats().retired == 0
    assert not _state(q).ages.watching  # the index keeps no ages for it: nothing to pay
    assert q.configure()["retention"] is None


def test_retention_set_on_an_existing_queue_then_turned_off(
    env: StoreEnv, clock: FakeClock
) -> None:
    q = env.open(clock=clock)
    first = q.enqueue_batch([b"a", b"b"])
    clock.advance(100.0)
    second = q.enqueue(b"c")
    assert q.configure(retention=50.0)["retention"] == 50.0
    assert q.stats().pending == 1 and q.stats().retired == 2  # the next call retired them
    with pytest.raises(s3q.MessageNotFound):
        q.status(first[0])
    q.configure(retention=0)  # off
    assert not _state(q).ages.watching
    clock.advance(1000.0)
    assert q.status(second) is S.PENDING and q.stats().retired == 2
    q.configure(retention=None)
    q.configure(retention=1000.0)  # on again: the ages are built anew
    assert q.stats().pending == 0 and q.stats().retired == 3


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf"), "60", True, 1e10, [60]])
def test_a_bad_retention_is_refused_and_changes_nothing(clock: FakeClock, value: object) -> None:
    url = f"memory://retention-{uuid.uuid4().hex}"
    with pytest.raises(s3q.InvalidConfig, match="retention must be a number of seconds"):
        s3q.open(url, clock=clock, retention=value)
    with s3q.open(url, clock=clock, retention=60.0) as q:
        with pytest.raises(s3q.InvalidConfig, match="retention must be a number of seconds"):
            q.configure(retention=value)
        assert q.configure()["retention"] == 60.0


def test_a_deep_backlog_retires_run_by_run_without_reading_it(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Untouched messages retire a run at a time: no record is made, nothing is read back
    (the runs, restored from a checkpoint, hold no tables), and the Retire is one range each."""
    monkeypatch.setattr(s3q.index.state, "TABLE_BUDGET", 10)
    url = f"file://{tmp_path}/q"
    with s3q.open(url, clock=clock, retention=60.0) as q:
        for _ in range(4):
            q.enqueue_batch([b"x"] * 25_000)
    with s3q.open(url, clock=clock) as q:
        state = _state(q)
        assert state.runs.untouched == 100_000 and state.runs.tabled == 0
        gets = q.stats().store_gets
        clock.advance(60.0)
        stats = q.stats()
        assert (stats.retired, stats.pending, stats.store_gets) == (100_000, 0, gets)
        assert (len(state.messages), state.runs.count, len(state.payloads.refs)) == (0, 0, 0)
    (op,) = [
        op
        for key in sorted((tmp_path / "q" / "log").iterdir())
        for op in segment.decode(key.read_bytes(), key.name).ops
        if isinstance(op, Retire)
    ]
    assert op.ids == [] and op.ranges is not None and len(op.ranges) == 4


def test_a_purge_counts_only_what_the_retention_left(env: StoreEnv, clock: FakeClock) -> None:
    q = env.open(clock=clock, retention=60.0)
    q.enqueue_batch([b"a", b"b"])
    clock.advance(30.0)
    q.enqueue(b"c")
    clock.advance(30.0)
    assert q.purge() == 1
    assert q.stats().retired == 2
