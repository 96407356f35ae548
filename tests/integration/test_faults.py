"""The writer under store faults: scripted faults for each finding, short seeded fault runs, and
the fault proxy against the real S3 client. (The history checker's own tests are in
tests/unit/test_fault_checker.py; brokers whose leader is paused, in
tests/e2e/test_cluster_faults.py.)

Real parts: the in-process memory store behind :class:`s3q.faults.FaultyStore` and the
writer's own retry layer; nothing is mocked.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from conftest import FakeClock, state_of
from fault_harness.workload import Plan, Report, Target, run_embedded, through_proxy

import s3q
from s3q.config import QueueConfig
from s3q.errors import TransientError
from s3q.faults import HARSH, FaultProfile, FaultyStore
from s3q.faults.proxy import FaultProxy
from s3q.lease import KEY as LEASE_KEY
from s3q.store import RetryingStore, open_store
from s3q.writer.checkpointer import RETRY_AFTER
from s3q.writer.engine import Engine

QUIET = FaultProfile()


def stack(timeout: float = 0.3) -> tuple[FaultyStore, RetryingStore]:
    """A fresh memory store behind scripted faults, behind the writer's retries."""
    raw = open_store(f"memory://faults-{uuid.uuid4().hex}")
    assert isinstance(raw, RetryingStore)
    faulty = FaultyStore(raw.inner, QUIET, seed=1, timeout=timeout)
    return faulty, RetryingStore(faulty, patience=2.0)


def run(coro_fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(coro_fn())


def config(**kw: Any) -> QueueConfig:
    return QueueConfig(**{"lease_ttl": 3.0, "commit_timeout": 5.0, **kw})


def hang_seen(faulty: FaultyStore) -> asyncio.Event:
    """Set when a request of ``faulty`` meets a hang (as it begins, not when it times out)."""
    seen = asyncio.Event()
    draw = faulty.schedule.draw

    def watched(request: str, key: str, read: bool) -> str | None:
        fault = draw(request, key, read)
        if fault == "hang":
            seen.set()
        return fault

    faulty.schedule.draw = watched  # type: ignore[method-assign]
    return seen


# --------------------------------------------------------------------------- scripted faults


@pytest.mark.parametrize("fault", ["before", "after", "hang"])
def test_a_failed_log_write_is_tried_again_and_counted_once(fault: str) -> None:
    """A reset before the store, an answer lost after it, a hung PUT: the enqueue succeeds,
    the writer goes on, and the message is in the log once."""

    async def main() -> None:
        faulty, store = stack()
        engine = await Engine.open(store, config())
        q = s3q.AsyncQueue(engine)
        faulty.script(fault, "put_new", "log/", times=2)
        mid = await q.enqueue(b"x")
        # "after": the second attempt meets the first one's object (AlreadyExists), its own
        assert faulty.injected[fault] == (1 if fault == "after" else 2)
        assert engine.failure is None
        await q.enqueue(b"y")
        await q.close()
        again = s3q.AsyncQueue(await Engine.open(store, config()))
        assert (await again.stats()).total_enqueued == 2
        got = await again.dequeue(max_messages=10)
        assert [m.id for m in got][:1] == [mid]
        await again.close()

    run(main)


def test_a_renewal_whose_answer_was_lost_does_not_fence_the_writer() -> None:
    async def main() -> None:
        faulty, store = stack()
        engine = await Engine.open(store, config())
        faulty.script("after", "put_versioned", LEASE_KEY, times=1)
        await engine._lease.renew()  # applied; its answer lost; the retry meets a Conflict
        assert faulty.injected["after"] == 1
        await engine._lease.renew()
        q = s3q.AsyncQueue(engine)
        await q.enqueue(b"still the writer")
        assert engine.failure is None
        await q.close()

    run(main)


def test_a_full_store_refuses_changes_nothing_and_the_writer_goes_on() -> None:
    """A log write refused for want of space (ENOSPC, injected): the calls riding it and the
    batch folded after it raise StoreFull, the stats are as before, the writer has not
    stopped, the next write goes through without a reopen, and a reopen finds just what was
    acknowledged."""

    async def main() -> None:
        faulty, store = stack()
        engine = await Engine.open(store, config())
        q = s3q.AsyncQueue(engine)
        await q.enqueue(b"leased")
        kept = await q.enqueue(b"kept")
        [leased] = await q.dequeue(visibility_timeout=600)
        before = state_of(await q.stats())
        faulty.script("full", "put_new", "log/", times=1)
        answers = await asyncio.gather(
            q.enqueue(b"refused"), q.complete(leased), q.dequeue(), return_exceptions=True
        )
        assert [type(a) for a in answers] == [s3q.StoreFull] * 3, answers
        assert faulty.injected["full"] == 1
        assert state_of(await q.stats()) == before
        assert engine.failure is None
        after = await q.enqueue(b"after")
        await q.complete(leased)
        await q.close()
        again = s3q.AsyncQueue(await Engine.open(store, config()))
        got = await again.dequeue(max_messages=10)
        assert sorted(m.id for m in got) == sorted([kept, after])
        assert (await again.stats()).completed == 1
        await again.close()

    run(main)


@pytest.mark.parametrize("fault", ["after", "hang"])
def test_open_and_close_never_leave_the_lease_held(fault: str) -> None:
    """An acquire or release whose answer was lost (or that hung, applied or not): the next
    open is not QueueLocked."""

    async def main() -> None:
        faulty, store = stack()
        faulty.script(fault, "put_versioned", LEASE_KEY, times=1)  # the acquire
        engine = await Engine.open(store, config())
        faulty.script(fault, "put_versioned", LEASE_KEY, times=1)  # the release
        await engine.close()
        assert faulty.injected[fault] == 2
        again = await Engine.open(store, config())  # QueueLocked if the lease were held
        await again.close()

    run(main)


def test_a_failed_open_gives_the_lease_back() -> None:
    """An open that fails after taking the lease (its replay cannot read the log) releases
    it: the next open succeeds at once rather than waiting out lease_ttl."""

    async def main() -> None:
        faulty, store = stack()
        first = s3q.AsyncQueue(await Engine.open(store, config()))
        await first.enqueue(b"x")
        await first.close()
        faulty.script("before", "list", "log/", times=100)  # more than the retries last
        with pytest.raises(s3q.StoreError):
            await Engine.open(store, config(lease_ttl=600.0))
        faulty.enabled = False  # the store is back
        again = await Engine.open(store, config(lease_ttl=600.0))
        await again.close()

    run(main)


def test_a_dequeue_slower_than_its_lease_hands_out_nothing_twice() -> None:
    """The commit of a lease hangs past the visibility timeout: meanwhile another consumer
    may lease the message; the slow dequeue leaves it out rather than answer with a lease
    that lapsed (or with the other consumer's receipt)."""

    async def main() -> None:
        faulty, store = stack(timeout=0.6)
        clock = FakeClock(time.time())
        engine = await Engine.open(store, config(clock=clock))
        q = s3q.AsyncQueue(engine)
        await q.enqueue(b"x")
        hanging = hang_seen(faulty)
        faulty.script("hang", "put_new", "log/", times=1)
        slow = asyncio.create_task(q.dequeue(visibility_timeout=0.2))
        await asyncio.wait_for(hanging.wait(), 30)  # the slow dequeue's lease is being written
        clock.advance(0.35)  # and lapses while its write hangs
        fast = await q.dequeue(visibility_timeout=30)
        first = await slow
        receipts = [m.receipt for m in [*first, *fast]]
        assert len(fast) == 1 and first == []
        assert len(set(receipts)) == len(receipts)
        await q.complete(fast[0])
        await q.close()

    run(main)


def test_a_partition_longer_than_commit_timeout_answers_outcome_unknown_then_applies() -> None:
    async def main() -> None:
        faulty, store = stack()
        engine = await Engine.open(store, config(commit_timeout=0.5))
        q = s3q.AsyncQueue(engine)
        faulty.partitions.cut(1.5)
        with pytest.raises(s3q.OutcomeUnknown):
            await q.enqueue(b"x", dedup_id="order-1")
        assert engine.failure is None  # still trying
        while time.monotonic() < faulty.partitions.until:
            await asyncio.sleep(0.05)
        for _ in range(20):  # the safe retry, as often as it takes the writer to catch up
            try:
                again = await q.enqueue(b"x", dedup_id="order-1")
                break
            except s3q.OutcomeUnknown:
                continue
        # The store is back: what follows may wait as long as a loaded machine needs (a
        # lease commit slower than 0.5 s under the full suite made this test flaky).
        engine.commit.commit_timeout = 30.0
        stats = await q.stats()
        assert stats.total_enqueued == 1
        assert (await q.dequeue())[0].id == again
        await q.close()

    run(main)


def test_close_on_a_vanished_store_ends_within_commit_timeout() -> None:
    """The store goes away with a write in flight and a checkpoint due: close gives up on
    each step in time (the store's own patience is ten times longer) and the caller whose
    write was never confirmed is told OutcomeUnknown."""

    async def main() -> None:
        faulty, _ = stack()
        store = RetryingStore(faulty, patience=20.0)
        engine = await Engine.open(store, config(commit_timeout=1.0, lease_ttl=30.0))
        q = s3q.AsyncQueue(engine)
        await q.enqueue(b"before")
        faulty.partitions.cut(120)
        in_flight = asyncio.create_task(q.enqueue(b"during"))
        await asyncio.sleep(0)  # its operation is in the batch being written
        started = time.monotonic()
        await q.close()
        took = time.monotonic() - started
        with pytest.raises(s3q.OutcomeUnknown):
            await in_flight
        assert took < 1.0 + 1.0 + 1.0, took  # commit_timeout, the lease's second, slack

    run(main)


def test_writer_fenced_names_the_writer_that_took_over() -> None:
    async def main() -> None:
        _, store = stack()
        clock = FakeClock(time.time())
        old = await Engine.open(store, config(lease_ttl=0.5, clock=clock))
        old._stopping.set()  # no more renewals: the lease lapses, as in a long pause
        assert old._renewer is not None
        await old._renewer
        clock.advance(0.6)
        new = await Engine.open(store, config(writer_address="http://10.0.0.2:8765", clock=clock))
        with pytest.raises(s3q.WriterFenced) as caught:
            await s3q.AsyncQueue(old).enqueue(b"late")
        assert caught.value.holder is not None and "10.0.0.2:8765" in caught.value.holder
        assert "10.0.0.2:8765" in str(caught.value)
        await old.close()
        await new.close()

    run(main)


def test_a_small_queue_checkpoints_every_hundred_log_objects() -> None:
    """A checkpoint costs little next to replaying log objects one GET each: a writer whose
    checkpoint is small takes one every 100 objects, so a reopen replays at most that."""

    async def main() -> None:
        _, store = stack()
        engine = await Engine.open(store, config(checkpoint_interval=3600))
        q = s3q.AsyncQueue(engine)
        for i in range(250):
            await q.enqueue(b"%d" % i)
        while engine._tasks:
            await asyncio.wait(set(engine._tasks))
        assert sorted(seq for seq in engine.checkpoints if seq)[-2:] == [100, 200]
        assert engine.checkpointer.objects_since == 51  # the Open record and 250 enqueues
        await engine.close()

    run(main)


def test_a_checkpoint_the_store_had_no_room_for_is_taken_again_later() -> None:
    """The checkpoint due at log object 100 meets a full store: not written, and due again
    ``RETRY_AFTER`` seconds later (not 100 objects later); the log meanwhile goes on."""

    async def main() -> None:
        faulty, store = stack()
        clock = FakeClock()
        engine = await Engine.open(store, config(checkpoint_interval=3600, clock=clock))
        q = s3q.AsyncQueue(engine)
        faulty.script("full", "put_new", "checkpoint/", times=1)
        for i in range(101):
            await q.enqueue(b"%d" % i)
        while engine._tasks:
            await asyncio.wait(set(engine._tasks))
        assert faulty.injected["full"] == 1
        assert not [seq for seq in engine.checkpoints if seq]
        await q.enqueue(b"not yet")
        clock.advance(RETRY_AFTER)
        await q.enqueue(b"now")
        while engine._tasks:
            await asyncio.wait(set(engine._tasks))
        assert [seq for seq in engine.checkpoints if seq] == [104]  # (1: the Open record)
        await engine.close()

    run(main)


def test_a_collection_pass_that_meets_a_store_fault_is_one_warning_and_the_next_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The pass after a checkpoint meets a store that fails every listing of checkpoints
    (more than the retries last): one warning line names it, no traceback; the pass after
    the next checkpoint collects the log the first one could not."""

    async def main() -> None:
        faulty, store = stack()
        config_ = config(checkpoint_interval=3600, gc_grace=0, clock=FakeClock())
        engine = await Engine.open(store, config_)
        q = s3q.AsyncQueue(engine)

        async def checkpointed() -> None:
            for i in range(40):  # 120 log objects, none of them live
                await q.enqueue(b"%d" % i)
                (message,) = await q.dequeue()
                await q.complete(message.receipt)
            while engine._tasks:  # the checkpoint's write, then its collection pass
                await asyncio.wait(set(engine._tasks))

        faulty.script("before", "list", "checkpoint/", times=1000)
        await checkpointed()
        assert faulty.injected["before"] > 0
        said = [r for r in caplog.records if "garbage collection" in r.getMessage()]
        assert len(said) == 1 and said[0].levelname == "WARNING" and not said[0].exc_info
        left = len(await store.keys("log/"))
        faulty.schedule._scripted.clear()
        await checkpointed()
        assert len(await store.keys("log/")) < left
        await engine.close()

    caplog.set_level(logging.WARNING)
    run(main)
    gc.collect()  # an exception no one retrieved is logged when its task is collected
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


def test_a_long_replay_is_checkpointed_so_the_next_open_is_short() -> None:
    async def main() -> None:
        faulty, store = stack()
        engine = await Engine.open(store, config(checkpoint_interval=3600))
        q = s3q.AsyncQueue(engine)
        faulty.script("before", "put_new", "checkpoint", times=10**6)  # none lands
        for i in range(150):
            await q.enqueue(b"%d" % i)
        engine.commit.failure = s3q.StoreError("stopped without a checkpoint")  # as if killed
        while engine._tasks:  # checkpoint writes still trying: let them fail, not land later
            await asyncio.wait(set(engine._tasks))
        faulty.enabled = False
        await engine._lease.release()
        again = await Engine.open(store, config())
        while again._tasks:  # the checkpoint taken after the long replay
            await asyncio.wait(set(again._tasks))
        assert max(again.checkpoints) >= 150
        await again.close()
        third = await Engine.open(store, config())
        assert third.checkpointer.objects_since <= 3
        assert (await s3q.AsyncQueue(third).stats()).pending == 150
        await third.close()

    run(main)


# --------------------------------------------------------------------------- seeded fault runs


def fault_run(seed: int, target: Callable[[Plan], Target] | None = None, **kw: Any) -> Report:
    plan = Plan(seed=seed, **kw)
    report = asyncio.run(run_embedded(plan, target(plan) if target else None))
    print(report.summary())
    assert report.faults > 0
    assert report.violations == [], f"seed {seed}: {report.violations[:5]}"
    assert not report.stops, f"seed {seed}: the writer stopped: {dict(report.stops)}"
    return report


@pytest.mark.parametrize("seed", [1, 2])
def test_a_short_fault_run_keeps_every_promise(seed: int) -> None:
    fault_run(seed, ops=3000, profile=HARSH)


@pytest.mark.parametrize("seed", [3, 4])
def test_a_partitioned_queue_keeps_every_promise_under_faults(seed: int) -> None:
    """Three partitions, each a writer over a store that fails, behind one queue: every
    acknowledged message is in one of them, none delivered twice at once, none lost."""
    report = fault_run(seed, ops=3000, profile=HARSH, partitions=3)
    ids = {c.ids[0][:8] for c in report.history.calls if c.kind == "enqueue" and c.ids}
    assert len(ids) == 3, ids  # the messages went to every partition


def test_leases_shorter_than_a_hung_commit_are_never_shared() -> None:
    """Visibility timeouts shorter than a hung request: the case that once handed one
    message to two consumers."""
    fault_run(3, ops=2000, profile=HARSH, visibility_timeout=0.3)


def test_a_writer_whose_clock_jumps_keeps_every_promise() -> None:
    """Jumps forward and back larger than the visibility timeout and the lease TTL: leases
    end early or late by the writer's clock, and nothing else changes."""
    fault_run(4, ops=3000, profile=HARSH, clock_jumps=8.0, jump_every=0.5)


def test_a_store_often_full_keeps_every_promise() -> None:
    """Writes refused for want of space now and then (and 5xx answers): every StoreFull
    answer changed nothing, and the writer never stopped."""
    report = fault_run(5, ops=2000, profile=FaultProfile(full=0.03, before=0.01))
    assert report.injected["full"] > 0
    assert report.history.calls and any(c.error == "StoreFull" for c in report.history.calls)


def test_a_random_seed_keeps_every_promise() -> None:
    seed = int(os.environ.get("S3Q_FAULT_SEED") or random.randrange(1 << 30))
    print(f"fault run seed {seed} (S3Q_FAULT_SEED={seed} repeats it)")
    fault_run(seed, ops=3000, profile=HARSH)


# --------------------------------------------------------------------------- the proxy


@pytest.fixture
def proxied(moto_server: Any, s3_bucket: str) -> Iterator[tuple[FaultProxy, str, dict[str, Any]]]:
    """A quiet fault proxy in front of the moto server, a fresh queue URL, and the options
    that reach the server directly."""
    with FaultProxy(moto_server.endpoint, QUIET, seed=1, hang=1.0) as proxy:
        yield proxy, f"s3://{s3_bucket}/{uuid.uuid4().hex[:8]}", moto_server.store_options()


# request, fault -> (error expected, object there afterwards)
WIRE_FAULTS = {
    ("put_new", "before"): True,
    ("put_new", "after"): True,
    ("put_new", "hang"): None,  # applied or not, even odds
    ("get", "truncate"): True,
    ("list", "before"): True,
}


@pytest.mark.parametrize(("request_", "fault"), sorted(WIRE_FAULTS))
def test_the_proxy_fails_the_real_client_on_the_wire(
    proxied: tuple[FaultProxy, str, dict[str, Any]], request_: str, fault: str
) -> None:
    """The S3 client meets each fault as a transient error; a write that applied is there."""
    proxy, url, options = proxied
    through = open_store(url, {**options, "endpoint_url": proxy.endpoint, "store_timeout": 0.4})
    direct = open_store(url, options)
    assert isinstance(through, RetryingStore)
    client = through.inner  # no retries: each request meets its fault

    async def main() -> None:
        await direct.put_new("log/there", b"0123456789")
        proxy.schedule.script(fault, request_)
        started = time.monotonic()
        with pytest.raises(TransientError):
            if request_ == "put_new":
                await client.put_new("log/new", b"abc")
            elif request_ == "get":
                await client.get("log/there")
            else:
                await client.keys("log/")
        took = time.monotonic() - started
        assert proxy.schedule.injected == {fault: 1}
        assert (took >= 0.4) == (fault == "hang")
        if request_ == "put_new" and fault != "hang":
            assert ("log/new" in await direct.keys("log/")) == (fault == "after")
        assert await client.get("log/there") == b"0123456789"  # the next request goes through

    asyncio.run(main())


def test_a_queue_over_s3_through_the_proxy_keeps_every_promise(
    moto_server: Any, s3_bucket: str
) -> None:
    """The whole stack, real S3 client included, under harsh faults on the wire."""
    url = f"s3://{s3_bucket}/{uuid.uuid4().hex[:8]}"
    with FaultProxy(moto_server.endpoint, HARSH, seed=5, hang=1.0) as proxy:
        fault_run(
            5,
            lambda plan: through_proxy(plan, proxy, url, moto_server.store_options()),
            ops=1500,
            profile=HARSH,
            store_timeout=0.5,
        )
