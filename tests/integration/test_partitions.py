"""A queue of several partitions (``s3q.partitions``), opened embedded, on every store."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest
from conftest import MotoServer, Parked, StoreEnv, drain, woke

import s3q
from s3q.faults.proxy import FaultProxy
from s3q.faults.schedule import S3_LATENCY
from s3q.partitions import placement

S = s3q.MessageStatus


def _partition(q: s3q.Queue, mid: str) -> int:
    return q.stats().queue_id.split(",").index(mid[:8])


def test_a_queue_of_one_partition_has_no_partition_objects(env: StoreEnv) -> None:
    with env.open() as q:
        q.enqueue(b"x")
        assert q.config.partitions == 1
        assert isinstance(q.async_queue, s3q.AsyncQueue)
    if env.raw:
        listed = env.keys()
        assert not [k for k in listed if k.startswith("partitions/")]


def test_partitions_are_logs_of_their_own_under_the_queue(env: StoreEnv) -> None:
    with env.open(partitions=3) as q:
        assert isinstance(q.async_queue, s3q.PartitionedQueue)
        ids = [q.enqueue(b"m%d" % i) for i in range(6)]
        stats = q.stats()
        assert len(stats.partitions) == 3
        assert len(set(stats.queue_id.split(","))) == 3
        # messages with neither group nor dedup id go to every partition in turn
        assert Counter(_partition(q, mid) for mid in ids) == {0: 2, 1: 2, 2: 2}
        assert [p.pending for p in stats.partitions] == [2, 2, 2]
        assert stats.pending == 6 and stats.total_enqueued == 6
    if env.raw:
        keys = list(env.keys())
        assert any(k.startswith("partitions/1/log/") for k in keys)
        assert any(k.startswith("partitions/2/log/") for k in keys)
    with env.open() as q:  # the count is the queue's: later opens need not give it
        assert q.config.partitions == 3
        assert sorted(m.payload for m in drain(q)) == [b"m%d" % i for i in range(6)]


def test_partitions_are_set_before_the_first_message_and_never_changed(env: StoreEnv) -> None:
    with env.open(partitions=2) as q:
        q.enqueue(b"x")
        with pytest.raises(s3q.InvalidConfig, match="partitions"):
            q.configure(partitions=3)
    with pytest.raises(s3q.InvalidConfig, match="partitions=2, not 4"):
        env.open(partitions=4)
    with env.open() as q:  # nothing changed
        assert q.config.partitions == 2
        assert [m.payload for m in drain(q)] == [b"x"]
    with pytest.raises(s3q.InvalidConfig, match="partitions must be an integer"):
        env.sibling().open(partitions=0)


def test_a_plain_queue_with_messages_cannot_be_partitioned(env: StoreEnv) -> None:
    with env.open() as q:
        q.enqueue(b"x")
    with pytest.raises(s3q.InvalidConfig, match="partitions=1, not 2"):
        env.open(partitions=2)


def test_a_group_stays_in_one_partition_and_in_order(env: StoreEnv) -> None:
    with env.open(partitions=4) as q:
        for i in range(12):
            q.enqueue(b"%d" % i, group=f"g{i % 3}")
        seen: dict[str, list[bytes]] = {}
        while msgs := q.dequeue(10):
            for m in msgs:
                assert m.group is not None
                assert _partition(q, m.id) == placement.home(m.group, 4)
                seen.setdefault(m.group, []).append(m.payload)
            q.complete_batch(msgs)
        for g in range(3):
            assert seen[f"g{g}"] == [b"%d" % i for i in range(g, 12, 3)]


def test_a_dedup_id_is_deduplicated_whichever_partition_asks(env: StoreEnv) -> None:
    with env.open(partitions=4) as q:
        first = q.enqueue(b"a", dedup_id="order-1")
        assert [q.enqueue(b"a", dedup_id="order-1") for _ in range(5)] == [first] * 5
        assert q.enqueue_batch([{"payload": b"a", "dedup_id": "order-1"}, b"b"])[0] == first
        assert q.stats().total_enqueued == 2


def test_a_batch_is_split_by_partition_and_answers_in_its_order(env: StoreEnv) -> None:
    with env.open(partitions=3) as q:
        items = [{"payload": b"%d" % i, "group": f"g{i}"} for i in range(9)] + [b"plain"]
        ids = q.enqueue_batch(items)
        for i, mid in enumerate(ids[:9]):
            assert _partition(q, mid) == placement.home(f"g{i}", 3)
            assert q.status(mid) is S.PENDING
        got = {m.id: m.payload for m in drain(q)}
        assert [got[mid] for mid in ids] == [b"%d" % i for i in range(9)] + [b"plain"]
        # a batch of plain payloads is one call to one partition
        plain = q.enqueue_batch([b"x"] * 5)
        assert len({_partition(q, mid) for mid in plain}) == 1


def test_receipts_go_to_their_partition(env: StoreEnv) -> None:
    with env.open(partitions=3, max_attempts=2, retry_delay=0.0, retry_delay_max=0.0) as q:
        q.enqueue_batch([b"a", b"b", b"c"])
        q.enqueue(b"d")
        q.enqueue(b"e")
        msgs = q.dequeue(10)
        assert len(msgs) == 5 and len({_partition(q, m.id) for m in msgs}) == 3
        done, failed, extended, released, *rest = msgs
        q.complete(done)
        q.fail(failed.receipt, "boom")
        q.extend(extended, 100)
        q.release([released])
        q.complete_batch(rest)
        assert q.status(done.id) is S.COMPLETED
        assert q.status(extended.id) is S.PROCESSING
        assert q.status(released.id) is S.PENDING
        for m in rest:
            assert q.status(m.id) is S.COMPLETED
        with pytest.raises(s3q.ReceiptExpired):
            q.complete(done)
        with pytest.raises(s3q.MessageNotFound):
            q.status("ffffffff" + done.id[8:])


def test_a_batch_done_in_some_partitions_but_not_all_is_of_unknown_outcome(
    env: StoreEnv,
) -> None:
    """Each partition is all or none, a batch over several is not: one partition refusing
    (a stale receipt) while another completed its part is OutcomeUnknown, naming both, not
    the refusal (a caller would take that for "nothing was done", and send it again); a
    batch refused everywhere raises the refusal."""
    with env.open(partitions=2) as q:
        q.enqueue(b"a")
        q.enqueue(b"b")
        first, second = q.dequeue(10)
        assert _partition(q, first.id) != _partition(q, second.id)
        q.complete(first)
        with pytest.raises(s3q.OutcomeUnknown, match=r"done in partitions \[\d\] .* not in"):
            q.complete_batch([first, second])  # first's receipt is stale now
        assert q.status(second.id) is S.COMPLETED
        with pytest.raises(s3q.ReceiptExpired):
            q.complete_batch([first, second])


@pytest.mark.parametrize("stale_first", [True, False])
def test_a_dequeue_completing_in_some_partitions_but_not_all_is_of_unknown_outcome(
    env: StoreEnv, stale_first: bool
) -> None:
    """A dequeue's completions go to their partitions (the first one tried on its lease's
    commit): one partition refusing its part while another did it is OutcomeUnknown, and
    what the call leased is given back; whichever partition the dequeue tries first."""
    with env.open(partitions=2) as q:
        q.enqueue(b"a")
        q.enqueue(b"b")
        first, second = q.dequeue(10)
        stale_in = _partition(q, first.id)
        assert stale_in != _partition(q, second.id)
        q.complete(first)  # first's receipt is stale now
        # the dequeue starts with the partition of the best message: put it where wanted
        tried_first = stale_in if stale_first else 1 - stale_in
        more = [q.enqueue(b"c", priority=5)]
        here = _partition(q, more[0]) == tried_first
        more.append(q.enqueue(b"d", priority=1 if here else 9))  # (in turn: the other one)
        assert [_partition(q, mid) == tried_first for mid in more] == [here, not here]
        with pytest.raises(s3q.OutcomeUnknown, match=r"done in partitions \[\d\] .* not in"):
            q.dequeue(10, complete=[first, second])
        assert q.status(second.id) is S.COMPLETED
        assert {q.status(mid) for mid in more} == {S.PENDING}  # leased, then given back


def test_a_message_with_no_key_goes_where_the_next_write_leaves_soonest(
    moto_server: MotoServer, s3_bucket: str
) -> None:
    """On S3 with S3's latency (a write takes 20-60 ms): while partition 1 writes, a message
    that may go anywhere goes to partition 0, which writes nothing, though the turn names
    partition 1 (it would wait for the write in flight, then its own)."""
    busy = next(g for g in map(str, range(100)) if placement.home(g, 2) == 1)

    async def main() -> None:
        with FaultProxy(moto_server.endpoint, S3_LATENCY, seed=1) as proxy:
            options = {**moto_server.store_options(), "endpoint_url": proxy.endpoint}
            q = await s3q.open_async(f"s3://{s3_bucket}/soonest", partitions=2, **options)
            assert isinstance(q, s3q.PartitionedQueue)
            try:
                ids = (await q.stats()).queue_id.split(",")
                writer = q.partitions[1].led
                assert writer is not None
                for _ in range(5):  # each time two turns: the message's names partition 1
                    keyed = asyncio.ensure_future(q.enqueue(b"keyed", group=busy))
                    while writer.writing_since() is None and not keyed.done():
                        await asyncio.sleep(0.001)  # (its write begins: no event says so)
                    assert not keyed.done()
                    free = await q.enqueue(b"free")
                    assert ids.index(free[:8]) == 0
                    assert ids.index((await keyed)[:8]) == 1
            finally:
                await q.close()

    asyncio.run(main())


def test_dequeue_takes_from_every_partition_and_starves_none(env: StoreEnv) -> None:
    with env.open(partitions=4) as q:
        for p in range(4):  # a backlog in each partition: one batch each
            q.enqueue_batch([b"%d" % p] * 20)
        firsts = [q.dequeue(5) for _ in range(4)]
        # each call starts one partition further on: the first four calls reach all four
        assert len({_partition(q, msgs[0].id) for msgs in firsts}) == 4
        rest = q.dequeue(100)
        assert len(rest) == 60  # a dequeue takes from as many partitions as it needs


def test_a_dequeue_starts_with_the_partition_of_the_highest_priority(env: StoreEnv, clock) -> None:
    """Across partitions led in one process, the best message any partition has goes first,
    whichever partition's turn it is."""
    with env.open(partitions=3, clock=clock) as q:
        low = q.enqueue_batch([{"payload": b"low", "priority": 1}] * 2)  # (a batch: one partition)
        high = q.enqueue(b"high", priority=9)
        later = q.enqueue(b"later", priority=5, delay=10.0)
        assert len({_partition(q, mid) for mid in (low[0], high, later)}) == 3
        assert [m.payload for m in q.dequeue(2)] == [b"high", b"low"]
        clock.advance(11.0)  # (the delay's end is a timer: the best message once it is due)
        assert [m.payload for m in q.dequeue(1)] == [b"later"]
        assert [m.payload for m in q.dequeue(5)] == [b"low"]


def test_a_long_poll_wakes_on_any_partition(env: StoreEnv, parked: Parked) -> None:
    async def run() -> None:
        q = await s3q.open_async(env.url, partitions=4, **env.options)
        try:
            for target in range(4):
                poll = asyncio.ensure_future(q.dequeue(1, wait=10))
                await parked.wait_async(4)  # waiting on every partition
                assert not poll.done()
                changed = time.monotonic()
                await q.partitions[target].queue.enqueue(b"%d" % target)
                got = await poll
                assert woke(time.monotonic(), changed)
                assert [m.payload for m in got] == [b"%d" % target]
                await q.complete(got[0])
        finally:
            await q.close()

    asyncio.run(run())


def test_the_queue_as_a_whole_spans_the_partitions(env: StoreEnv, clock) -> None:
    q = env.open(partitions=3, max_attempts=1, clock=clock)
    try:
        q.enqueue_batch([{"payload": b"%d" % i, "priority": i % 2} for i in range(3)])
        q.enqueue(b"hi", priority=5)
        q.enqueue(b"lo")
        peeked = q.peek(10)
        assert peeked[0].payload == b"hi" and len(peeked) == 5
        for m in q.dequeue(2):
            q.fail(m, "boom")  # max_attempts=1: dead
        dead = q.dead_letters()
        assert len(dead) == 2 and q.stats().dead == 2
        assert q.redrive([dead[0].id]) == 1
        assert q.redrive() == 1
        assert q.stats().dead == 0
        q.configure(visibility_timeout=77.0)
        for part in q.async_queue.partitions:
            assert part.queue.config.visibility_timeout == 77.0
        assert q.purge() == 5
        assert q.stats().pending == 0
        report = q.compact()
        assert report.objects > 0
    finally:
        q.close()


def test_lease_and_locate_name_keys_from_the_queue(raw_env: StoreEnv) -> None:
    with raw_env.open(partitions=2, large_payload=8) as q:
        q.enqueue_batch([b"payload-%d-is-large" % i for i in range(4)])
        q.enqueue(b"payload-4-is-large")
        located = q.lease(10)
        assert len(located) == 5
        for each in located:
            loc = each.location
            assert raw_env.read(loc.key)[loc.offset : loc.offset + loc.size].startswith(b"payload-")
        assert {mid for mid in q.locate([m.message.id for m in located])} == {
            m.message.id for m in located
        }


def test_bad_keys_get_the_errors_of_a_queue_and_change_nothing(env: StoreEnv) -> None:
    with env.open(partitions=3) as q:
        for bad in ({"group": 5}, {"dedup_id": b"x"}, {"group": "\ud800"}):
            with pytest.raises(s3q.InvalidArgument):
                q.enqueue(b"x", **bad)
            with pytest.raises(s3q.InvalidArgument):
                q.enqueue_batch([{"payload": b"x", **bad}, {"payload": b"y", "group": "g"}])
        assert q.stats().total_enqueued == 0


def test_staged_objects_commit_into_partition_0_where_they_lie(durable_env: StoreEnv) -> None:
    """Staged objects lie under the queue's own prefix: only partition 0's log can name them.
    A token replayed finds them committed there."""
    from test_staged import stage

    with durable_env.open(partitions=3) as q:
        ids = q.enqueue_staged([stage(durable_env, [b"one", b"two"])], token="sink:1")
        assert ids is not None and {_partition(q, mid) for mid in ids} == {0}
        assert q.enqueue_staged([stage(durable_env, [b"one", b"two"])], token="sink:1") is None
        assert sorted(m.payload for m in drain(q)) == [b"one", b"two"]


class Away:
    """A partition led by another broker, as a partitioned queue reaches it: the queue's
    surface only (no waiting on its writer, no pages). ``together`` holds each answer with
    messages until that many are ready, as a broker's busy event loop would take them in at
    once; ``stalled`` makes every dequeue hang, as a dead or paused leader's does."""

    def __init__(self, queue: s3q.AsyncQueue, together: asyncio.Barrier | None = None) -> None:
        self._queue, self._together = queue, together
        self.stalled = asyncio.Event()
        self.asked = 0

    async def dequeue(self, *args: Any, **kwargs: Any) -> list[s3q.Message]:
        self.asked += 1
        if self.stalled.is_set():
            await asyncio.Event().wait()
        got = await self._queue.dequeue(*args, **kwargs)
        if got and self._together is not None:
            await self._together.wait()
        return got

    def __getattr__(self, name: str) -> Any:
        if name in ("dequeue_pages", "changed", "here", "best_priority", "writing_since"):
            raise AttributeError(name)  # (not led here, not paged, not followed)
        return getattr(self._queue, name)


def test_a_long_poll_woken_in_every_partition_answers_no_more_than_it_asked(
    parked: Parked,
) -> None:
    """Partitions led elsewhere each get a long poll for the whole ``max_messages``; when
    several answer at once, the answer is cut to ``max_messages`` and the rest is released at
    once (visible again, its attempt given back), not held until its visibility timeout."""

    async def run() -> None:
        q = await s3q.open_async("memory://cut-long-poll", partitions=4)
        assert isinstance(q, s3q.PartitionedQueue)
        together = asyncio.Barrier(4)
        inner = [p.queue for p in q.partitions]
        far = s3q.PartitionedQueue(q.url, [Away(p, together) for p in inner])  # type: ignore[arg-type]
        try:
            poll = asyncio.ensure_future(far.dequeue(10, visibility_timeout=60, wait=10))
            await parked.wait_async(4)  # a long poll in each partition
            for part in inner:
                await part.enqueue_batch([b"m"] * 10)
            got = await poll
            assert len(got) == 10
            stats = await q.stats()
            assert stats.processing == 10 and stats.pending == 30
            again = await q.dequeue(100)
            assert len(again) == 30 and {m.attempts for m in again} == {1}
        finally:
            await q.close()

    asyncio.run(run())


def test_a_dequeue_answers_from_the_partitions_led_here_while_another_is_stalled() -> None:
    """With the leader of one partition stalled, a dequeue answers what the partitions led
    here (and the live ones elsewhere) have, at once: it does not wait on the stalled one."""

    async def run() -> None:
        q = await s3q.open_async("memory://stalled-partition", partitions=4)
        assert isinstance(q, s3q.PartitionedQueue)
        inner = [p.queue for p in q.partitions]
        stalled, live = Away(inner[1]), Away(inner[3])
        stalled.stalled.set()
        mixed = s3q.PartitionedQueue(q.url, [inner[0], stalled, inner[2], live])  # type: ignore[list-item]
        try:
            for part in inner:
                await part.enqueue_batch([b"m"] * 20)
            for wait in (0.0, 5.0):
                began = time.monotonic()
                got = await mixed.dequeue(10, wait=wait)
                assert len(got) == 10 and time.monotonic() - began < 0.1
            began = time.monotonic()
            got = await mixed.dequeue(100, wait=5.0)  # the led partitions and the live one
            assert len(got) == 60 - 20 and time.monotonic() - began < 0.25
            assert stalled.asked == 1  # asked once: not again while its last ask hangs
        finally:
            await q.close()

    asyncio.run(run())
