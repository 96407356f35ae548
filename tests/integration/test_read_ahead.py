"""A queue read ahead of its takeover (``s3q.broker.readahead``): the index read while the
leader's lease runs out is read on from with only the log written since (``snapshot.load``'s
``since``), unless another checkpoint was written meanwhile or the queue was made again; a
writer opened on it serves the queue exactly as it was left."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from conftest import StoreEnv

import s3q
from s3q import snapshot
from s3q.api import open_log
from s3q.index import checkpoint
from s3q.store import open_store


def _same(a: snapshot.Loaded, b: snapshot.Loaded) -> None:
    assert a.seq == b.seq and a.replayed == b.replayed and a.last_at == b.last_at
    assert msgspec.msgpack.encode(checkpoint.take(a.state)) == msgspec.msgpack.encode(
        checkpoint.take(b.state)
    )


async def _enqueue_each(queue: Any, first: int, count: int) -> list[str]:
    """``count`` enqueues, one log object each (each awaited before the next)."""
    return [await queue.enqueue(b"m%d" % i, dedup_id=f"d{i}") for i in range(first, first + count)]


def test_a_snapshot_read_on_from_an_earlier_one_equals_one_read_afresh(
    durable_env: StoreEnv,
) -> None:
    """The writer goes on after the index was read ahead: reading on from it gives the index a
    fresh read gives, with one GET per log object written since and no checkpoint read."""

    async def main() -> None:
        queue = await durable_env.open_async()
        await _enqueue_each(queue, 0, 10)
        await queue.close()  # (a checkpoint at close)
        queue = await durable_env.open_async()
        await _enqueue_each(queue, 10, 5)
        ahead = await snapshot.load(open_store(durable_env.url, durable_env.options))
        await _enqueue_each(queue, 15, 6)
        got = await queue.dequeue(max_messages=4)
        await queue.complete_batch(got)
        store = open_store(durable_env.url, durable_env.options)
        read_to, checkpointed = ahead.seq, max(ahead.checkpoints)
        later = await snapshot.load(store, since=ahead)
        assert later is ahead and later.seq > read_to  # (read on: the same index, further)
        afresh = open_store(durable_env.url, durable_env.options)
        _same(later, await snapshot.load(afresh))
        # what a fresh read reads, but the log objects up to where it was read ahead (and the
        # checkpoint's first bytes, not all of it)
        assert store.counts.gets == afresh.counts.gets - (read_to - checkpointed)
        assert store.counts.lists == afresh.counts.lists == 2  # the checkpoints, the log after
        await queue.close()

    asyncio.run(main())


def test_a_snapshot_read_on_past_a_newer_checkpoint_starts_from_that_checkpoint(
    durable_env: StoreEnv,
) -> None:
    """A checkpoint written after the index was read ahead (objects before it may be collected
    once it is old enough): the read starts from it, as a fresh one does."""

    async def main() -> None:
        queue = await durable_env.open_async()
        await _enqueue_each(queue, 0, 8)
        ahead = await snapshot.load(open_store(durable_env.url, durable_env.options))
        await _enqueue_each(queue, 8, 4)
        await queue.close()  # a checkpoint newer than what was read ahead
        newest = max(s for s in map(checkpoint.seq_of, durable_env.keys()) if s is not None)
        assert newest > ahead.seq
        store = open_store(durable_env.url, durable_env.options)
        later = await snapshot.load(store, since=ahead)
        assert later.seq == newest and later.replayed == 0
        _same(later, await snapshot.load(open_store(durable_env.url, durable_env.options)))

    asyncio.run(main())


def test_a_writer_opened_on_an_index_read_ahead_serves_the_queue_as_left(
    durable_env: StoreEnv,
) -> None:
    """The next writer opens on the index read ahead: every message is there, once, in its
    order, dedup ids answer what they made, completed ones stay completed."""

    async def main() -> None:
        queue = await durable_env.open_async()
        sent = await _enqueue_each(queue, 0, 12)
        got = await queue.dequeue(max_messages=3)
        await queue.complete_batch(got)
        await queue.close()
        ahead = await snapshot.load(open_store(durable_env.url, durable_env.options))
        queue = await open_log(durable_env.url, ahead, **durable_env.options)
        try:
            assert await queue.enqueue(b"again", dedup_id="d5") == sent[5]
            rest = await queue.dequeue(max_messages=20)
            assert [m.id for m in rest] == sent[3:]
            assert [m.payload for m in rest] == [b"m%d" % i for i in range(3, 12)]
            assert await queue.status(sent[0]) is s3q.MessageStatus.COMPLETED
        finally:
            await queue.close()

    asyncio.run(main())


def test_a_snapshot_read_ahead_of_a_queue_made_again_is_not_read_on_from(
    durable_env: StoreEnv,
) -> None:
    """The queue was deleted and made again under its name meanwhile, its newest checkpoint
    at the same place as the one read from: the read starts from the new queue's."""

    async def main() -> None:
        queue = await durable_env.open_async()
        await _enqueue_each(queue, 0, 8)
        await queue.close()
        ahead = await snapshot.load(open_store(durable_env.url, durable_env.options))
        store = open_store(durable_env.url, durable_env.options)
        for key in await store.keys(""):  # (as the SQS endpoint's DeleteQueue does)
            await store.delete(key)
        queue = await durable_env.open_async()
        await _enqueue_each(queue, 100, 8)
        await queue.close()
        later = await snapshot.load(open_store(durable_env.url, durable_env.options), since=ahead)
        assert later.seq == ahead.seq  # (the same place: only the checkpoint's time differs)
        assert later is not ahead
        _same(later, await snapshot.load(open_store(durable_env.url, durable_env.options)))

    asyncio.run(main())
