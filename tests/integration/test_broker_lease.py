"""A broker's one lease: the queues it leads ride on it, so an idle queue costs no requests,
while takeover and fencing stay per queue.

Brokers run in process (:class:`~s3q.broker.registry.QueueRegistry`) over S3 (moto's server);
a fake clock stands for a broker paused past its lease without waiting that long.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest
from conftest import FakeClock, S3Env, make_env

import s3q
from s3q.broker.lease import STALE_AFTER
from s3q.broker.registry import QueueRegistry
from s3q.errors import QueueLocked, WriterFenced
from s3q.lease import BROKERS, KEY, LeaseRecord, read_record
from s3q.store import Store, open_store, queue_url


@pytest.fixture
def s3(request: pytest.FixtureRequest, tmp_path: Any) -> S3Env:
    env = make_env("s3", request, tmp_path)
    assert isinstance(env, S3Env)
    return env


def broker(env: S3Env, address: str, **options: Any) -> QueueRegistry:
    return QueueRegistry(env.url, {**env.options, **options}, address=address)


def store_of(env: S3Env, name: str) -> Store:
    return open_store(queue_url(env.url, name), env.options)


async def record_of(env: S3Env, name: str) -> LeaseRecord:
    store = store_of(env, name)
    try:
        current = await read_record(store)
    finally:
        await store.close()
    assert current is not None and current[0] is not None
    return current[0]


async def until(condition: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    """Wait for ``condition`` to hold (checked every 50 ms), failing after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not await condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def test_idle_queues_cost_nothing_beyond_the_brokers_one_lease(s3: S3Env) -> None:
    """Twenty queues led by one broker, idle while the broker renews its lease six times: the
    queues' own stores see no request at all."""

    async def main() -> None:
        registry = broker(s3, "http://10.0.0.1:8765", lease_ttl=1.5)
        try:
            queues = [await registry.get(f"idle-{i}") for i in range(20)]
            for queue in queues:
                assert isinstance(queue, s3q.AsyncQueue)
                await queue.enqueue(b"one")
            lease = registry.lease.held
            assert lease is not None
            before = [(await q.stats()).store_requests for q in queues]
            renewals = lease.store.counts.puts

            async def renewed_six_times() -> bool:
                return lease.store.counts.puts >= renewals + 6

            await until(renewed_six_times)
            after = [(await q.stats()).store_requests for q in queues]
            assert after == before
            for i in range(20):
                record = await record_of(s3, f"idle-{i}")
                assert record.broker == lease.key and record.address == "http://10.0.0.1:8765"
        finally:
            await registry.close()

    asyncio.run(main())


def test_an_embedded_writer_keeps_a_lease_of_its_own(s3: S3Env) -> None:
    """Outside a broker a queue renews its own lease: its lease object names no broker."""

    async def main() -> None:
        q = await s3q.open_async(queue_url(s3.url, "alone"), **s3.options, lease_ttl=1.5)
        try:
            before = (await q.stats()).store_puts

            async def renewed() -> bool:
                return (await q.stats()).store_puts >= before + 2

            await until(renewed)
            assert (await record_of(s3, "alone")).broker is None
        finally:
            await q.close()

    asyncio.run(main())


def test_a_queue_is_taken_over_once_its_brokers_lease_lapses_and_the_old_leader_is_fenced(
    s3: S3Env,
) -> None:
    """Broker A stalls past its lease (the clock jumps; no renewal ran): broker B takes the
    queue over. A's next call renews A's lease, sees that it had lapsed, reads the queue's
    lease and refuses to write: nothing A acknowledges after the takeover exists."""

    async def main() -> None:
        clock = FakeClock(time.time())
        a = broker(s3, "http://10.0.0.1:8765", lease_ttl=600.0, clock=clock)
        b = broker(s3, "http://10.0.0.2:8765", lease_ttl=600.0, clock=clock)
        try:
            old = await a.get("work")
            assert isinstance(old, s3q.AsyncQueue)
            await old.enqueue(b"before")
            with pytest.raises(QueueLocked) as locked:
                await b.take_over("work")
            assert locked.value.address == "http://10.0.0.1:8765"
            clock.advance(601.0)
            new = await b.take_over("work")
            assert (await record_of(s3, "work")).address == "http://10.0.0.2:8765"
            with pytest.raises(WriterFenced):
                await old.enqueue(b"after the takeover")
            assert old.stopped is not None
            assert [m.payload for m in await new.peek(10)] == [b"before"]
        finally:
            await a.close()
            await b.close()

    asyncio.run(main())


def test_a_broker_whose_lease_lapsed_unnoticed_goes_on_after_one_look(s3: S3Env) -> None:
    """A stall nobody used: the broker renews late, checks each queue's lease once (one GET,
    at the queue's next commit) and goes on writing."""

    async def main() -> None:
        clock = FakeClock(time.time())
        a = broker(s3, "http://10.0.0.1:8765", lease_ttl=600.0, clock=clock)
        try:
            q = await a.get("steady")
            assert isinstance(q, s3q.AsyncQueue)
            await q.enqueue(b"one")
            clock.advance(601.0)
            before = await q.stats()
            await q.enqueue(b"two")
            after = await q.stats()
            assert after.store_gets == before.store_gets + 1  # the look at its lease
            await q.enqueue(b"three")
            assert (await q.stats()).store_gets == after.store_gets
            assert (await q.stats()).pending == 3
        finally:
            await a.close()

    asyncio.run(main())


def test_an_embedded_opener_waits_for_the_brokers_lease_not_the_queues(s3: S3Env) -> None:
    """The queue's lease object was written when the broker opened the queue and is never
    renewed: while the broker's lease runs, ``s3q.open`` is refused all the same, naming the
    broker; once the broker lets go, it opens."""

    async def main() -> None:
        clock = FakeClock(time.time())
        a = broker(s3, "http://10.0.0.1:8765", lease_ttl=5.0, clock=clock)
        url = queue_url(s3.url, "shared")
        try:
            await a.get("shared")
            clock.advance(3.0)  # past the expiry the queue's own lease object states
            lease = a.lease.held
            assert lease is not None
            await lease.renew()
            with pytest.raises(QueueLocked) as locked:
                await s3q.open_async(url, **s3.options, clock=clock)
            assert locked.value.address == "http://10.0.0.1:8765"
        finally:
            await a.close()
        q = await s3q.open_async(url, **s3.options, clock=clock)
        await q.close()

    asyncio.run(main())


def test_a_lost_broker_lease_closes_its_queues_and_the_next_call_reopens_them(
    s3: S3Env,
) -> None:
    """The broker lease object vanishes (another broker swept it while this one stalled): the
    next renewal finds it gone, the queues riding on it are closed, and the next call opens the
    queue again on a new broker lease, with nothing lost."""

    async def main() -> None:
        a = broker(s3, "http://10.0.0.1:8765", lease_ttl=1.5)
        try:
            q = await a.get("orphan")
            assert isinstance(q, s3q.AsyncQueue)
            await q.enqueue(b"kept")
            lease = a.lease.held
            assert lease is not None
            await lease.store.delete(lease.key)

            async def closed() -> bool:
                return a.local("orphan") is None

            await until(closed)
            again = await a.get("orphan")
            assert isinstance(again, s3q.AsyncQueue) and again is not q
            assert a.lease.held is not None and a.lease.held.key != lease.key
            assert (await record_of(s3, "orphan")).broker == a.lease.held.key
            assert [m.payload for m in await again.peek(10)] == [b"kept"]
        finally:
            await a.close()

    asyncio.run(main())


def test_a_queue_left_on_the_brokers_own_lease_reopens_at_once(s3: S3Env) -> None:
    """A queue object of this broker that is gone without giving its lease back (a close that
    failed) does not lock the broker out of its own queue until the broker lease lapses."""

    async def main() -> None:
        a = broker(s3, "http://10.0.0.1:8765", lease_ttl=600.0)
        try:
            await a.get("first")  # takes the broker lease
            lease = a.lease.held
            assert lease is not None
            store = store_of(s3, "left")
            record = LeaseRecord("a queue object gone", "0" * 16, 1e12, a.address, lease.key)
            await store.put_versioned(KEY, msgspec.json.encode(record), None)
            await store.close()
            q = await a.get("left")
            assert isinstance(q, s3q.AsyncQueue)
            assert (await record_of(s3, "left")).token != "0" * 16
        finally:
            await a.close()

    asyncio.run(main())


def test_closing_a_broker_deletes_its_lease_and_hands_its_queues_over_at_once(
    s3: S3Env,
) -> None:
    async def main() -> None:
        a = broker(s3, "http://10.0.0.1:8765", lease_ttl=600.0)
        b = broker(s3, "http://10.0.0.2:8765", lease_ttl=600.0)
        brokers = open_store(queue_url(s3.url, BROKERS), s3.options)
        try:
            await a.get("handed")
            assert len(await brokers.keys("")) == 1
            await a.close()
            assert await brokers.keys("") == []
            await b.take_over("handed")
        finally:
            await b.close()
            await brokers.close()

    asyncio.run(main())


def test_a_broker_deletes_the_leases_that_killed_brokers_left_behind(s3: S3Env) -> None:
    """Leases run out for over STALE_AFTER go when the next broker takes its lease; a lease
    that ran out recently (its broker may only be stalled) stays."""

    async def main() -> None:
        brokers = open_store(queue_url(s3.url, BROKERS), s3.options)
        now = time.time()
        for key, expires_at in (("stale", now - STALE_AFTER - 60), ("recent", now - 60)):
            record = LeaseRecord("a killed broker", key, expires_at, "http://10.0.0.9:1")
            await brokers.put_versioned(key, msgspec.json.encode(record), None)
        a = broker(s3, "http://10.0.0.1:8765", lease_ttl=600.0)
        try:
            await a.get("sweeper")
            lease = a.lease.held
            assert lease is not None

            async def swept() -> bool:
                return "stale" not in await brokers.keys("")

            await until(swept)
            assert sorted(await brokers.keys("")) == sorted(["recent", lease.key])
        finally:
            await a.close()
            await brokers.close()

    asyncio.run(main())


def test_a_broker_over_a_local_directory_takes_no_lease(tmp_path: Any) -> None:
    """Queues in a local directory hold file locks for their writer's life: nothing to renew."""

    async def main() -> None:
        registry = QueueRegistry(str(tmp_path), address="http://10.0.0.1:8765")
        try:
            await registry.get("local")
            assert registry.lease.local and registry.lease.held is None
            assert not (tmp_path / BROKERS).exists()
        finally:
            await registry.close()

    asyncio.run(main())
