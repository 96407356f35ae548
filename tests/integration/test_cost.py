"""What calls cost in store requests: the commit window gathers calls into one PUT, and a
consumer waiting on an empty queue costs nothing.

The store's own request counters (``stats().store_puts`` and the rest) tell what the calls cost;
the window's waits are counted in ``stats().commit_waits``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from conftest import FakeClock, StoreEnv

import s3q
from s3q.writer.commit import FULL_WEIGHT, PROBE_EVERY


async def paced_enqueues(q: Any, count: int, every: float) -> list[str]:
    """One producer making single enqueue calls at a steady rate, not waiting for each answer
    before the next (a web app enqueueing per request): the answers, in order."""
    calls = []
    for i in range(count):
        calls.append(asyncio.ensure_future(q.enqueue(b"m%d" % i)))
        await asyncio.sleep(every)  # the producer's pace: what the test is about
    return list(await asyncio.gather(*calls))


async def puts_for(env: StoreEnv, window: float, count: int, every: float) -> tuple[int, int]:
    q = await s3q.open_async(env.url, **env.options, commit_window=window)
    try:
        before = await q.stats()
        ids = await paced_enqueues(q, count, every)
        after = await q.stats()
        assert len(set(ids)) == count and after.pending == before.pending + count
        return after.store_puts - before.store_puts, after.commit_waits
    finally:
        await q.close()


def test_a_window_gathers_single_enqueues_from_one_producer_into_fewer_puts(
    durable_env: StoreEnv,
) -> None:
    """100 single enqueues at about 200 a second: without a window nearly every one is a PUT
    of its own; with a 100 ms window they share a PUT per window."""
    alone, waited = asyncio.run(puts_for(durable_env, 0.0, 100, 0.005))
    assert waited == 0
    gathered, waits = asyncio.run(puts_for(durable_env, 0.1, 100, 0.005))
    assert waits >= 1
    assert gathered <= 25, f"{gathered} PUTs for 100 enqueues in a 100 ms window"
    assert gathered * 3 <= alone, f"{gathered} PUTs with the window, {alone} without"


def test_a_caller_that_waits_for_each_answer_stops_paying_the_window(env: StoreEnv) -> None:
    """One call at a time cannot gather anything: after a few waits that gather nothing, the
    writer waits on one idle batch in PROBE_EVERY only."""

    async def main() -> s3q.QueueStats:
        q = await s3q.open_async(env.url, **env.options, commit_window=0.05)
        try:
            for i in range(80):
                await q.enqueue(b"%d" % i)
            return await q.stats()
        finally:
            await q.close()

    stats = asyncio.run(main())
    assert stats.pending == 80
    assert stats.commit_waits <= 4 + 80 // PROBE_EVERY + 1, stats.commit_waits


def test_close_and_a_full_batch_do_not_wait_out_the_window(env: StoreEnv) -> None:
    async def main() -> None:
        q = await s3q.open_async(env.url, **env.options, commit_window=10.0)
        full = [b"x"] * FULL_WEIGHT
        # a full batch is written at once (the guard fails the test long before 10 s)
        ids = await asyncio.wait_for(q.enqueue_batch(full), 5)
        assert len(ids) == FULL_WEIGHT
        pending = asyncio.ensure_future(q.enqueue(b"last"))
        await asyncio.sleep(0)  # the enqueue is now waiting for company
        await asyncio.wait_for(q.close(), 5)  # closing writes it without waiting the window
        assert isinstance(await pending, str)
        q = await s3q.open_async(env.url, **env.options)
        try:
            assert (await q.stats()).pending == FULL_WEIGHT + 1
        finally:
            await q.close()

    asyncio.run(main())


def test_long_polls_on_an_empty_queue_make_no_store_requests(durable_env: StoreEnv) -> None:
    """A consumer waiting costs nothing: its long polls are answered from the writer's index.
    (A lease long enough that no renewal falls within the test.)"""

    async def main() -> None:
        q = await s3q.open_async(durable_env.url, **durable_env.options, lease_ttl=300.0)
        try:
            before = await q.stats()
            polls = await asyncio.gather(*(q.dequeue(10, wait=1.0) for _ in range(5)))
            assert polls == [[]] * 5
            after = await q.stats()
            assert after.store_requests == before.store_requests, (before, after)
        finally:
            await q.close()

    asyncio.run(main())


Counts = tuple[int, int, int, int]  # PUTs, GETs, LISTs, DELETEs


def _requests(stats: s3q.QueueStats) -> Counts:
    return stats.store_puts, stats.store_gets, stats.store_lists, stats.store_deletes


def _history_work(env: StoreEnv, **options: Any) -> list[Counts]:
    """The same calls on a fresh queue each time, by a fake clock: the requests of the calls,
    of two collection passes, and of a writer recovering the queue. (No checkpoint falls due
    by itself: its collection pass would run beside the calls, as timing has it.)"""
    clock = FakeClock()
    settings: dict[str, Any] = {
        "gc_grace": 0.0,
        "completed_retention": 0.0,
        "checkpoint_interval": 1e6,
        **options,
    }
    q = env.open(clock=clock, max_attempts=2, retry_delay=0.0, **settings)
    try:
        start = q.stats()
        for r in range(8):
            q.enqueue_batch([b"m%d-%d" % (r, i) for i in range(30)])
            q.enqueue(b"single %d" % r, tenant="t")
            got = q.dequeue(max_messages=31)
            q.fail(got[0], "boom")
            q.extend(got[1], 60.0)
            q.complete_batch(got[1:])
            clock.advance(10)
        q.complete_batch(q.dequeue(max_messages=10))
        worked = q.stats()
        for _ in range(2):
            clock.advance(600)
            q.compact()
            q.enqueue(b"between")
        collected = q.stats()
    finally:
        q.close()
    with env.open(clock=clock, **settings) as q:
        recovered = q.stats()
    return [
        tuple(a - b for a, b in zip(_requests(end), _requests(begin), strict=True))  # type: ignore[misc]
        for begin, end in ((start, worked), (worked, collected))
    ] + [_requests(recovered)]


def test_a_queue_without_history_costs_what_it_did(env: StoreEnv) -> None:
    """``history_retention`` 0, given or by default, is today's queue: the same calls cost the
    same PUTs, GETs, LISTs and DELETEs, collection and recovery included, and collection reads
    no header to find a history horizon (no GET at all). A queue keeping history pays the same
    for its calls and its recovery; only its collection differs: it reads the times of the
    oldest objects and deletes none it keeps."""
    default = _history_work(env)
    calls, collection, recovery = default
    assert collection[3] > 0, default
    assert _history_work(env.sibling(), history_retention=0.0) == default
    kept = _history_work(env.sibling(), history_retention=3600.0)
    assert kept[0] == calls and kept[2] == recovery, (kept, default)
    assert kept[1][1] > 0 and kept[1][3] < collection[3], (kept, default)
