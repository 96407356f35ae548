"""The async API (open_async) and long-polling dequeue(wait=...) in both APIs."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from conftest import FakeClock, StoreEnv, woke

import s3q

S = s3q.MessageStatus


def run(coro):
    return asyncio.run(coro)


def test_async_roundtrip(env: StoreEnv, clock: FakeClock) -> None:
    async def main() -> None:
        aq = await env.open_async(clock=clock, max_attempts=2, retry_delay_max=2.0)
        try:
            assert type(aq) is s3q.AsyncQueue
            a = await aq.enqueue(b"a", priority=1, attributes={"x": "y"})
            ids = await aq.enqueue_batch([b"b", {"payload": b"c", "priority": 9}])
            assert await aq.status(a) is S.PENDING
            msgs = await aq.dequeue(max_messages=3)
            assert [m.id for m in msgs] == [ids[1], a, ids[0]]
            assert msgs[1].attributes == {"x": "y"}
            await aq.complete(msgs[0])
            await aq.complete_batch([msgs[1].receipt])
            await aq.fail(msgs[2], "oops")
            assert await aq.status(ids[0]) is S.RETRY
            clock.advance(2.1)
            [m] = await aq.dequeue()
            assert (m.id, m.attempts, m.last_error) == (ids[0], 2, "oops")
            await aq.extend(m, 50)
            clock.advance(40)
            assert await aq.status(m.id) is S.PROCESSING
            await aq.fail(m, "again")
            assert await aq.status(m.id) is S.DEAD
            assert [d.id for d in await aq.dead_letters()] == [m.id]
            assert await aq.redrive() == 1
            st = await aq.stats()
            assert (st.pending, st.completed, st.dead, st.total_enqueued) == (1, 2, 0, 3)
            clock.advance(4000)
            assert await aq.cleanup() >= 2
            assert await aq.purge() == 1
            with pytest.raises(s3q.MessageNotFound):
                await aq.status(a)
        finally:
            await aq.close()

    run(main())


def test_async_context_manager_and_errors(env: StoreEnv) -> None:
    async def main() -> str:
        async with await env.open_async(max_message_size=10) as aq:
            with pytest.raises(s3q.MessageTooLarge):
                await aq.enqueue(b"x" * 11)
            with pytest.raises(s3q.InvalidPriority):
                await aq.enqueue(b"x", priority=256)
            with pytest.raises(s3q.ReceiptExpired):
                await aq.complete("bogus")
            return await aq.enqueue(b"ok")

    mid = run(main())
    with env.open() as q:
        assert q.status(mid) is S.PENDING
        assert q.stats().total_enqueued == 1


def test_async_open_of_locked_queue(env: StoreEnv) -> None:
    async def main() -> None:
        async with await env.open_async():
            with pytest.raises(s3q.QueueLocked):
                await env.open_async()

    run(main())


def test_async_concurrent_enqueues_group_commit(durable_env: StoreEnv) -> None:
    async def main() -> None:
        async with await durable_env.open_async() as aq:
            c0 = (await aq.stats()).commits
            ids = await asyncio.gather(*(aq.enqueue(f"m{i}".encode()) for i in range(500)))
            assert len(set(ids)) == 500
            st = await aq.stats()
            assert st.commits - c0 < 100, st
            assert st.pending == 500

    run(main())


def test_async_bad_options(env: StoreEnv) -> None:
    async def main() -> None:
        with pytest.raises(s3q.InvalidConfig):
            await env.open_async(max_attempts=0)

    run(main())


# --------------------------------------------------------------------------- long polling


@pytest.mark.parametrize("kind", ["memory", "file", "s3"])
def test_sync_dequeue_wait_returns_when_message_arrives(kind, request, tmp_path, parked) -> None:
    from conftest import make_env

    env = make_env(kind, request, tmp_path)
    with env.open() as q:
        result: dict[str, object] = {}

        def consumer() -> None:
            result["msgs"] = q.dequeue(wait=20.0)
            result["returned"] = time.monotonic()

        t = threading.Thread(target=consumer)
        t.start()
        parked.wait(1)  # the consumer is blocked before the message arrives
        with parked.change() as enqueued:
            mid = q.enqueue(b"wake")
        t.join(25)
        assert not t.is_alive()
        assert [m.id for m in result["msgs"]] == [mid]
        assert enqueued.woke(result["returned"])


def test_sync_dequeue_wait_times_out_with_empty_list(env: StoreEnv) -> None:
    with env.open() as q:
        t0 = time.monotonic()
        assert q.dequeue(wait=0.6) == []
        elapsed = time.monotonic() - t0
        assert 0.55 <= elapsed < 5.0, elapsed


def test_sync_dequeue_wait_wakes_for_delayed_message(env: StoreEnv) -> None:
    with env.open() as q:
        t0 = time.monotonic()
        mid = q.enqueue(b"soon", delay=0.5)
        msgs = q.dequeue(wait=20.0)
        assert [m.id for m in msgs] == [mid]
        assert time.monotonic() - t0 >= 0.45  # not before its delay
        assert woke(time.monotonic(), t0 + 0.5)  # by its timer, as it came due


def test_sync_dequeue_wait_returns_immediately_when_available(env: StoreEnv) -> None:
    with env.open() as q:
        q.enqueue(b"here")
        t0 = time.monotonic()
        assert len(q.dequeue(wait=20.0)) == 1
        assert time.monotonic() - t0 < 2.0


def test_sync_dequeue_wait_wakes_when_lease_released(env: StoreEnv, parked) -> None:
    with env.open() as q:
        q.enqueue(b"x")
        [m] = q.dequeue(visibility_timeout=60)
        result: dict[str, object] = {}

        def consumer() -> None:
            result["msgs"] = q.dequeue(wait=20.0)
            result["returned"] = time.monotonic()

        t = threading.Thread(target=consumer)
        t.start()
        parked.wait(1)  # the consumer is blocked before the lease is given back
        with parked.change() as released:
            q.extend(m, 0)
        t.join(25)
        assert [x.id for x in result["msgs"]] == [m.id]
        assert released.woke(result["returned"])


def test_async_dequeue_wait_returns_when_other_task_enqueues(env: StoreEnv, parked) -> None:
    async def main() -> None:
        async with await env.open_async() as aq:

            async def consumer():
                msgs = await aq.dequeue(wait=20.0)
                return msgs, time.monotonic()

            task = asyncio.create_task(consumer())
            await parked.wait_async(1)  # the consumer is parked before the message arrives
            assert not task.done()
            with parked.change() as enqueued:
                mid = await aq.enqueue(b"wake")
            msgs, returned = await asyncio.wait_for(task, 25)
            assert [m.id for m in msgs] == [mid]
            assert enqueued.woke(returned)

    run(main())


def test_async_dequeue_wait_times_out(env: StoreEnv) -> None:
    async def main() -> None:
        async with await env.open_async() as aq:
            t0 = time.monotonic()
            assert await aq.dequeue(wait=0.6) == []
            assert 0.55 <= time.monotonic() - t0 < 5.0

    run(main())


def test_async_wait_does_not_block_event_loop(env: StoreEnv) -> None:
    async def main() -> None:
        async with await env.open_async() as aq:
            ticks = 0

            async def ticker():
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.02)
                    ticks += 1

            tick_task = asyncio.create_task(ticker())
            assert await aq.dequeue(wait=0.5) == []
            tick_task.cancel()
            assert ticks >= 5, "dequeue(wait=...) blocked the event loop"

    run(main())


def test_two_waiters_one_message(env: StoreEnv, parked) -> None:
    """Only one of two parked consumers receives the message, woken by it; the other times
    out empty."""
    with env.open() as q:
        results: list[tuple[int, float]] = []
        lock = threading.Lock()

        def consumer() -> None:
            got = q.dequeue(wait=1.5)
            with lock:
                results.append((len(got), time.monotonic()))

        threads = [threading.Thread(target=consumer) for _ in range(2)]
        for t in threads:
            t.start()
        parked.wait(2)  # both consumers are parked before the message arrives
        with parked.change() as enqueued:
            q.enqueue(b"only")
        for t in threads:
            t.join(20)
        assert sorted(n for n, _ in results) == [0, 1]
        assert enqueued.woke(next(at for n, at in results if n))
