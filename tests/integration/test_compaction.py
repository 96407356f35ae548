"""Checkpoints and garbage collection: bounded storage that never loses what someone needs."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import (
    FakeClock,
    LineReader,
    StoreEnv,
    make_env,
    open_after_crash,
    spawn_child,
)
from histories import drain_all, observe, payload_for, random_history

import s3q
from s3q.log import segment
from s3q.store import open_store
from s3q.writer.collector import KEEP_NEWEST, RUNGS


@pytest.mark.parametrize("seed", [1, 2, 3, 20, 33])  # 20, 33: letters dying at one instant
def test_checkpoint_plus_tail_equals_full_log(durable_env: StoreEnv, seed: int) -> None:
    """Recovering from a checkpoint and the log after it gives the queue a full replay gives."""
    clock = FakeClock()
    opts = dict(
        clock=clock,
        checkpoint_ops=20,
        gc_grace=1e9,
        max_attempts=2,
        retry_delay=1.0,
        completed_retention=100.0,
        dedup_window=50.0,
    )
    q = durable_env.open(**opts)
    sent = random_history(q, clock, random.Random(seed), 300)
    ids = sorted(sent)
    q.close()
    keys = durable_env.keys()
    assert any(k.startswith("checkpoint/") for k in keys), "the workload wrote no checkpoint"
    full = durable_env.sibling()
    durable_env.copy_to(
        full,
        exclude=tuple(k for k in keys if k.startswith("checkpoint/") or k.startswith("writer.")),
    )
    from_checkpoint = durable_env.open(**opts)
    from_log = full.open(**opts)
    try:
        assert observe(from_checkpoint, ids) == observe(from_log, ids)
        clock.advance(1000.0)  # every delay, backoff and lease is over
        assert observe(from_checkpoint, ids) == observe(from_log, ids)
        drained = drain_all(from_checkpoint)
        assert drained == drain_all(from_log)
        assert all(payload == sent[mid] for mid, payload, _ in drained)
    finally:
        from_checkpoint.close()
        from_log.close()


def test_enqueue_complete_then_compact_leaves_little(durable_env: StoreEnv) -> None:
    """After everything is completed and one GC pass, the prefix holds a handful of objects."""
    q = durable_env.open(gc_grace=0.0, completed_retention=0.0, checkpoint_ops=500)
    for start in range(0, 5000, 250):
        q.enqueue_batch([payload_for(i, 512) for i in range(start, start + 250)])
    while batch := q.dequeue(max_messages=400):
        q.complete_batch(batch)
    before = len(durable_env.keys())
    report = q.compact()
    keys = [k for k in list(durable_env.keys()) if not k.startswith("writer.")]
    q.close()
    assert before > 30
    assert report.deleted_objects > 0
    assert len(keys) <= 4, keys
    assert sum(len(durable_env.read(k)) for k in keys) < 64 * 1024


def test_gc_relocates_stragglers_and_keeps_every_live_payload(durable_env: StoreEnv) -> None:
    """Dead letters and a few pending messages in old objects are copied forward, not lost."""
    q = durable_env.open(gc_grace=0.0, completed_retention=0.0, max_attempts=1)
    expected: dict[str, bytes] = {}
    for round_ in range(12):
        payloads = [payload_for(round_ * 100 + i, 300) for i in range(100)]
        ids = q.enqueue_batch(payloads)
        batch = q.dequeue(max_messages=100)
        by_id = dict(zip(ids, payloads, strict=True))
        q.fail(batch[0], "keep me as a dead letter")  # one dead letter per object
        q.complete_batch(batch[1:-1])
        q.extend(batch[-1], 0)  # one straggler back to pending
        expected[batch[0].id] = by_id[batch[0].id]
        expected[batch[-1].id] = by_id[batch[-1].id]
    report = q.compact()
    assert report.relocated_messages > 0
    second = q.compact()
    log_objects = [k for k in list(durable_env.keys()) if k.startswith("log/")]
    assert len(log_objects) <= 4, (report, second, log_objects)
    q.close()
    q = durable_env.open()
    try:
        dead = {m.id: m.payload for m in q.dead_letters(limit=1000)}
        pending = {m.id: m.payload for m in q.dequeue(max_messages=1000)}
        assert {**dead, **pending} == expected
    finally:
        q.close()


def test_gc_gathers_dead_letters_each_committed_alone(durable_env: StoreEnv) -> None:
    """A message committed alone that dies keeps its whole log object alive (its payload is
    all that object was written with): GC gathers such objects into one, and loses none."""
    q = durable_env.open(gc_grace=0.0, completed_retention=0.0, max_attempts=1)
    expected: dict[str, bytes] = {}
    for i in range(30):
        payload = payload_for(i, 100)
        q.enqueue(payload)
        [msg] = q.dequeue()
        q.fail(msg, "keep me as a dead letter")
        expected[msg.id] = payload
    q.compact()
    q.compact()
    log_objects = [k for k in list(durable_env.keys()) if k.startswith("log/")]
    assert len(log_objects) <= 4, log_objects
    q.close()
    q = durable_env.open()
    try:
        assert {m.id: m.payload for m in q.dead_letters(limit=100)} == expected
    finally:
        q.close()


def test_gc_leaves_a_lone_small_straggler_where_it_is(durable_env: StoreEnv) -> None:
    """Moving the one object left holding a dead letter would only keep another in its place:
    pass after pass, nothing is copied."""
    q = durable_env.open(gc_grace=0.0, completed_retention=0.0, max_attempts=1)
    q.enqueue_batch([b"dies", b"done1", b"done2", b"done3"])  # one object, mostly dead soon
    dies, *done = q.dequeue(max_messages=4)
    q.fail(dies, "keep me as a dead letter")
    q.complete_batch(done)
    for i in range(5):  # later objects, all of them finished
        q.enqueue(payload_for(i, 100))
        q.complete_batch(q.dequeue())
    reports = [q.compact() for _ in range(3)]
    try:
        assert [r.relocated_messages for r in reports] == [0, 0, 0]
        assert [m.payload for m in q.dead_letters()] == [b"dies"]
    finally:
        q.close()


def test_gc_during_concurrent_workload_keeps_every_live_message(durable_env: StoreEnv) -> None:
    """GC as aggressive as it gets, racing producers and consumers; then read everything back."""
    q = durable_env.open(
        gc_grace=0.0, completed_retention=0.0, checkpoint_ops=50, visibility_timeout=60.0
    )
    sent: dict[str, bytes] = {}
    done: set[str] = set()
    lock = threading.Lock()
    recorded = threading.Condition()
    stop = threading.Event()
    errors: list[BaseException] = []

    def produce(worker: int) -> None:
        try:
            for i in range(40):
                payloads = [payload_for(worker * 10_000 + i * 10 + k, 200) for k in range(10)]
                ids = q.enqueue_batch(payloads)
                with recorded:
                    sent.update(zip(ids, payloads, strict=True))
                    recorded.notify_all()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def consume() -> None:
        try:
            while not stop.is_set():
                for msg in q.dequeue(max_messages=7, wait=0.05):
                    # a consumer may get a message before its producer has noted the ids
                    with recorded:
                        recorded.wait_for(lambda: msg.id in sent, timeout=30)  # noqa: B023
                    assert msg.payload == sent[msg.id]
                    if int.from_bytes(msg.payload[:1], "big") % 3:
                        q.complete(msg)
                        with lock:
                            done.add(msg.id)
                    else:
                        q.extend(msg, 3600)  # held: stays live, must survive every GC
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def collect() -> None:
        try:
            while not stop.is_set():
                q.compact()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    producers = [threading.Thread(target=produce, args=(w,)) for w in range(3)]
    others = [threading.Thread(target=consume) for _ in range(2)] + [
        threading.Thread(target=collect)
    ]
    for t in producers + others:
        t.start()
    for t in producers:
        t.join()
    stop.set()
    for t in others:
        t.join()
    assert not errors, errors
    q.compact()
    q.close()
    q = durable_env.open(visibility_timeout=60.0)
    try:
        live = set(sent) - done
        seen: dict[str, bytes] = {}
        for mid in live:
            assert q.status(mid) in (s3q.MessageStatus.PENDING, s3q.MessageStatus.PROCESSING)
        # Held messages stay leased across the reopen; every other live one is delivered.
        while batch := q.dequeue(max_messages=100):
            seen.update((m.id, m.payload) for m in batch)
        held = live - set(seen)
        assert all(q.status(mid) == s3q.MessageStatus.PROCESSING for mid in held)
        assert {mid: sent[mid] for mid in seen} == seen
        assert set(seen) <= live
    finally:
        q.close()


def test_reader_of_a_checkpoint_keeps_its_objects_within_the_grace(raw_env: StoreEnv) -> None:
    """A reader that started from a checkpoint finds every object it needs during gc_grace."""
    clock = FakeClock()
    opts = dict(clock=clock, gc_grace=60.0, completed_retention=0.0, checkpoint_ops=10_000)
    q = raw_env.open(**opts)
    first = q.enqueue_batch([payload_for(i) for i in range(200)])
    q.compact()
    # The reader's view: the newest checkpoint and every log object after it.
    view = sorted(k for k in list(raw_env.keys()) if k.startswith(("checkpoint/", "log/")))
    # The writer moves on: everything completed, compacted while the reader is still reading.
    while batch := q.dequeue(max_messages=100):
        q.complete_batch(batch)
    clock.advance(30.0)
    q.compact()
    for key in view:
        assert raw_env.read(key), f"{key} vanished within the grace period"
    # Past the grace, the same objects are collected.
    clock.advance(61.0)
    q.enqueue(b"tick")
    q.compact()
    clock.advance(61.0)
    q.compact()
    left = set(raw_env.keys())
    q.close()
    assert not set(view) & left - {max(k for k in view if k.startswith("log/"))}
    assert len(first) == 200


def test_a_new_writer_collects_what_older_checkpoints_let_go_at_its_first_pass(
    raw_env: StoreEnv,
) -> None:
    """A writer that takes a queue over knows when the checkpoint it opened from was taken, and
    reads when the older ones in the store were: garbage a checkpoint older than gc_grace let go
    is collected at the new writer's first pass, not gc_grace after its open. (A queue whose
    leader changed more often than gc_grace was never collected: issue 36's hour-long soak.)"""
    clock = FakeClock()
    opts = dict(clock=clock, gc_grace=60.0, completed_retention=0.0, checkpoint_ops=10_000)
    q = raw_env.open(**opts)
    q.enqueue_batch([payload_for(i) for i in range(50)])
    while batch := q.dequeue(max_messages=10):
        q.complete_batch(batch)  # a log object each, garbage once the next checkpoint is taken
    q.compact()  # checkpoint A: every log object so far is garbage stamped at or before it
    doomed = {k for k in list(raw_env.keys()) if k.startswith("log/")}
    assert len(doomed) >= 6
    clock.advance(30.0)
    q.enqueue(b"later")
    q.compact()  # checkpoint B, 30 s younger: A is not yet gc_grace old
    assert doomed <= set(raw_env.keys())
    q.close()  # (the newest checkpoint is B's, or one written at close)
    clock.advance(45.0)  # A is 75 s old, B 45 s: only A is stable

    taker = raw_env.open(**opts)  # a new writer, like a broker taking the queue over
    try:
        report = taker.compact()
        left = set(raw_env.keys())
        assert report.deleted_objects >= len(doomed) - 1, report
        assert not doomed & left - {max(doomed)}, sorted(doomed & left)
        assert [m.payload for m in taker.dequeue(max_messages=10)] == [b"later"]
    finally:
        taker.close()


@pytest.fixture(params=["memory", "s3"])
def lease_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreEnv]:
    """A queue location whose writer lease lapses by the clock (not a file lock)."""
    e = make_env(request.param, request, tmp_path)
    yield e
    e.close_all()


def test_a_queue_whose_writer_changes_more_often_than_gc_grace_is_collected(
    lease_env: StoreEnv,
) -> None:
    """Writers take the queue over one after another, each once the last one's lease lapsed
    and each holding it for less than gc_grace (as brokers do when the leader's store is cut
    off for longer than the lease): what the first one's checkpoint let go is collected by a
    later one, and the queue keeps every message. (Issue 36's hour-long soak: a queue whose
    leader changed every minute or so, gc_grace 300 s, never collected.)"""
    clock = FakeClock()
    ttl, grace = 600.0, 1000.0  # no background renewal in a test: leases lapse by the clock
    opts = dict(
        clock=clock, lease_ttl=ttl, gc_grace=grace, completed_retention=0.0, checkpoint_ops=10**4
    )
    store = open_store(lease_env.url, lease_env.options)

    def logs() -> set[int]:
        return {s for k in asyncio.run(store.keys("log/")) if (s := segment.seq_of(k)) is not None}

    left = []  # after each writer's compaction: the first writer's log objects still there
    first: set[int] = set()
    for tenure in range(4):
        q = lease_env.open(**opts)  # takes the queue over: the last writer is fenced
        q.enqueue(b"kept-%d" % tenure)  # (never leased: the others come first)
        q.enqueue_batch([{"payload": payload_for(i), "priority": 9} for i in range(20)])
        for _ in range(4):
            q.complete_batch(q.dequeue(max_messages=5))  # a log object each: garbage soon
        q.compact()
        first = first or logs()
        left.append(len(first & logs()))
        clock.advance(ttl + 1)  # less than gc_grace: no writer sees its own checkpoint stable
    assert len(first) >= 5
    assert left[:2] == [len(first)] * 2  # no checkpoint was gc_grace old yet
    # the third writer finds the first one's checkpoint gc_grace old: collected
    assert left[2] <= 2 and left[3] <= 1, (left, sorted(first & logs()))  # kept-0's is live
    with lease_env.open(**opts) as q:
        got = q.dequeue(max_messages=10, visibility_timeout=5)
        assert sorted(m.payload for m in got) == [b"kept-%d" % t for t in range(4)]
    asyncio.run(store.close())


def test_kill_during_checkpoints_and_gc_loses_nothing(durable_env: StoreEnv) -> None:
    """SIGKILL while the writer checkpoints and collects constantly: every acked id survives."""
    rng = random.Random(7)
    acked: set[str] = set()
    options = dict(gc_grace=0.0, completed_retention=0.0, checkpoint_ops=5, lease_ttl=1.0)

    def take(line: str) -> None:
        record = json.loads(line)
        if "completing" in record:  # pending until the answer, maybe completed after a kill
            acked.difference_update(record["completing"])
            return
        acked.update(record["enqueued"])
        acked.difference_update(record["completed"])

    for _ in range(10):
        proc = spawn_child("child_compact.py", durable_env, **options)
        reader = LineReader(proc)
        try:
            for _ in range(rng.randint(1, 40)):
                take(reader.next())
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        for line in reader.rest():
            take(line)
        q, _ = open_after_crash(durable_env, **options)
        try:
            for mid in acked:
                assert q.status(mid) is not s3q.MessageStatus.COMPLETED
        finally:
            q.close()
    # Far in the future every lease has lapsed: each acked message is delivered or dead.
    q = durable_env.open(clock=FakeClock(4e9), **options)
    try:
        seen = {m.id: m.payload for m in q.dead_letters(limit=10_000)}
        while batch := q.dequeue(max_messages=1000):
            seen.update((m.id, m.payload) for m in batch)
        seen.update((m.id, m.payload) for m in q.dead_letters(limit=10_000))
        assert acked <= set(seen)
        assert all(seen[mid].startswith(b"m-") for mid in acked)
    finally:
        q.close()


def test_a_busy_queue_keeps_a_few_checkpoints_per_gc_grace_and_still_collects(
    raw_env: StoreEnv,
) -> None:
    """A queue that checkpoints often (here every log object, once a second) does not keep
    every checkpoint of the last gc_grace: collection thins those newer than the stable one
    to about RUNGS per gc_grace, and what they let go is still collected once one of them is
    gc_grace old. Reopening finds the newest."""
    clock = FakeClock()
    grace = 40.0  # (40 checkpoints a gc_grace unthinned, against the 13 allowed)
    opts = dict(clock=clock, gc_grace=grace, completed_retention=0.0, checkpoint_interval=1.0)
    q = raw_env.open(**opts)
    first_logs: set[str] = set()

    def checkpoints() -> list[str]:
        return sorted(k for k in list(raw_env.keys()) if k.startswith("checkpoint/"))

    most = 0
    for second in range(int(2.5 * grace)):
        clock.advance(1.0)
        q.enqueue(payload_for(second))  # a log object, and a checkpoint: one second passed
        q.complete_batch(q.dequeue(max_messages=1))
        q.compact()
        first_logs = first_logs or {k for k in list(raw_env.keys()) if k.startswith("log/")}
        most = max(most, len(checkpoints()))
    assert most <= RUNGS + KEEP_NEWEST + 3, most  # not the 40 of a gc_grace
    assert not first_logs & set(raw_env.keys())  # what the early checkpoints let go went
    newest = checkpoints()[-1]
    q.enqueue(b"last")
    q.close()
    with raw_env.open(**opts) as q:
        assert [m.payload for m in q.dequeue(max_messages=5)] == [b"last"]
    assert newest <= checkpoints()[-1]
