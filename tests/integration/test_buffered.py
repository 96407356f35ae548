"""Buffered enqueues (``durability="buffered"``): answered once they are in the writer's batch,
lost only if the writer dies before that batch is written, never after.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from pathlib import Path

import httpx
import pytest
from broker_harness import Broker
from conftest import LineReader, StoreEnv, drain, open_after_crash, spawn_child
from crash import _kill_after_random_lines

import s3q
from s3q.client import connect
from s3q.config import QueueConfig
from s3q.log import ids
from s3q.store import RetryingStore, Store, open_store
from s3q.writer.commit import BUFFER_WEIGHT
from s3q.writer.engine import Engine

S = s3q.MessageStatus


def test_a_buffered_enqueue_is_answered_before_its_batch_is_written(env: StoreEnv) -> None:
    """With a 500 ms window the batch is still gathering when a buffered enqueue returns; a
    durable one returns once its log object is written. A clean close writes what was buffered."""

    async def main() -> None:
        q = await s3q.open_async(env.url, **env.options, durability="buffered", commit_window=0.5)
        try:
            before = await q.stats()
            mid = await q.enqueue(b"quick")
            answered = await q.stats()
            assert answered.log_seq == before.log_seq  # not written yet
            assert answered.buffered_answers == 1 and answered.pending == 1
            await q.configure(durability="durable")
            await q.enqueue(b"slow")
            written = await q.stats()
            assert written.log_seq > before.log_seq and written.buffered_answers == 1
        finally:
            await q.close()
        again = await s3q.open_async(env.url, **env.options)
        try:
            assert again.config.durability == "durable"
            assert await again.status(mid) is S.PENDING
        finally:
            await again.close()

    asyncio.run(main())


class GatedStore(RetryingStore):
    """A store whose log writes wait until ``gate`` is set (a store that cannot keep up)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.gate = asyncio.Event()
        self.gate.set()

    async def put_new(self, key: str, data: bytes | bytearray) -> None:
        if key.startswith("log/"):
            await self.gate.wait()
        await super().put_new(key, data)


def test_buffered_enqueues_wait_for_the_store_once_too_much_is_unwritten() -> None:
    """While log writes are held up, buffered enqueues are answered until BUFFER_WEIGHT
    operations wait to be written; the next one waits for the store like a durable one."""

    async def main() -> None:
        store = GatedStore(open_store(f"memory://gated-{uuid.uuid4().hex}").base)
        config = QueueConfig(durability="buffered", commit_window=0.0)
        q = s3q.AsyncQueue(await Engine.open(store, config))
        try:
            store.gate.clear()
            half = BUFFER_WEIGHT // 2
            await q.enqueue_batch([b"x"] * half)  # its write is held up
            await q.enqueue_batch([b"y"] * half)  # still within the buffer
            late = asyncio.ensure_future(q.enqueue(b"one too many"))
            for _ in range(20):
                await asyncio.sleep(0)
            assert not late.done()
            assert (await q.stats()).buffered_answers == 2 * half
            store.gate.set()
            await late
            stats = await q.stats()
            assert stats.buffered_answers == 2 * half and stats.pending == 2 * half + 1
        finally:
            store.gate.set()
            await q.close()

    asyncio.run(main())


def test_durability_must_be_durable_or_buffered(env: StoreEnv) -> None:
    with pytest.raises(s3q.InvalidConfig, match="durability must be 'durable' or 'buffered'"):
        s3q.open(env.url, **env.options, durability="fast")
    with env.open() as q:
        with pytest.raises(s3q.InvalidConfig, match="durability"):
            q.configure(durability=1)
        assert q.config.durability == "durable"


ROUNDS = 8


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_sigkill_loses_only_buffered_enqueues_of_the_batches_not_yet_written(
    durable_env: StoreEnv,
) -> None:
    """A child enqueues with durability="buffered" and prints each answer; it is killed at a
    random moment. Every answered message whose log object was written is there; those lost
    belong to the last batches, the ones the writer had not written yet (at most two: the one
    being written and the one filling)."""
    rng = random.Random(0xB0F + len(durable_env.kind))
    lost_rounds = 0
    for round_no in range(ROUNDS):
        env = durable_env.sibling()
        proc = spawn_child("child_enqueue.py", env, durability="buffered")
        acked = dict(
            line.split(" ", 1) for line in _kill_after_random_lines(proc, LineReader(proc), rng)
        )
        q, _clock = open_after_crash(env)
        try:
            durable = q.stats().log_seq
            kept = {m.id: m.payload for m in drain(q)}
        finally:
            q.close()
        lost = {mid for mid in acked if mid not in kept}
        for mid, payload in acked.items():
            if mid in kept:
                assert kept[mid] == payload.encode(), (round_no, mid)
        written_before = max((ids.enqueued_by(mid) for mid in kept), default=0)
        lost_batches = {ids.enqueued_by(mid) for mid in lost}
        assert all(seq > written_before for seq in lost_batches), (round_no, lost_batches)
        assert len(lost_batches) <= 2, (round_no, lost_batches)
        assert all(ids.enqueued_by(mid) <= durable for mid in kept)
        lost_rounds += bool(lost)
    print(f"{lost_rounds} of {ROUNDS} rounds lost buffered answers")


def test_a_queue_configured_buffered_answers_the_brokers_enqueues_early(tmp_path: Path) -> None:
    """The setting is the queue's: configured through the native API, the broker's enqueues
    (and the SQS endpoint's, which call the same queue) are answered before they are durable."""
    with Broker(f"file://{tmp_path}/store") as broker, connect(broker.url) as client:
        q = client.queue("clicks")
        assert q.configure(durability="buffered")["durability"] == "buffered"
        q.enqueue_batch([b"a", b"b"])
        q.enqueue(b"c")
        assert q.stats().buffered_answers == 3
        assert (
            's3q_queue_buffered_answers{queue="clicks"} 3.0'
            in httpx.get(broker.url + "/metrics").text
        )


def test_a_call_chooses_its_own_durability(env: StoreEnv) -> None:
    """``durability=`` on enqueue and enqueue_batch overrides the queue's setting, both ways;
    a bad value is refused and nothing is enqueued."""

    async def main() -> None:
        q = await s3q.open_async(env.url, **env.options, commit_window=0.5)
        try:
            before = await q.stats()
            await q.enqueue(b"quick", durability="buffered")
            await q.enqueue_batch([b"a", b"b"], durability="buffered")
            await q.enqueue_batch([{"payload": b"c", "priority": 2}], durability="buffered")
            answered = await q.stats()
            assert answered.log_seq == before.log_seq and answered.buffered_answers == 4
            await q.configure(durability="buffered")
            await q.enqueue(b"slow", durability="durable")
            assert (await q.stats()).log_seq > before.log_seq
            for bad in ("fast", 1, True):
                with pytest.raises(s3q.InvalidArgument, match="durability must be"):
                    await q.enqueue(b"never", durability=bad)  # type: ignore[arg-type]
            assert (await q.stats()).pending == 5
        finally:
            await q.close()

    asyncio.run(main())


def test_a_remote_call_chooses_its_own_durability(tmp_path: Path) -> None:
    with Broker(f"file://{tmp_path}/store") as broker, connect(broker.url) as client:
        q = client.queue("events")
        q.enqueue(b"a", durability="buffered")
        q.enqueue_batch([b"b", b"c"], durability="buffered")
        q.enqueue(b"d")
        assert q.stats().buffered_answers == 3 and q.stats().pending == 4
        answer = httpx.post(
            f"{broker.url}/v1/queues/events/enqueue",
            json={"payload": "x", "durability": "fast"},
        )
        assert answer.status_code == 400 and "durability" in answer.text
        assert q.stats().pending == 4


# -- buffered acknowledgements (``ack_durability="buffered"``) -----------------------------------


def test_a_buffered_completion_is_answered_before_its_batch_is_written(env: StoreEnv) -> None:
    """With a 500 ms window the batch is still gathering when a buffered completion returns; a
    durable one returns once its log object is written. A clean close writes what was buffered."""

    async def main() -> None:
        q = await s3q.open_async(
            env.url, **env.options, ack_durability="buffered", commit_window=0.5
        )
        try:
            first, second = await q.enqueue_batch([b"a", b"b"])
            got = await q.dequeue(max_messages=2)
            before = await q.stats()
            await q.complete(got[0])
            answered = await q.stats()
            assert answered.log_seq == before.log_seq  # not written yet
            assert answered.buffered_acks == 1 and answered.completed == 1
            await q.configure(ack_durability="durable")
            await q.complete(got[1])
            written = await q.stats()
            assert written.log_seq > before.log_seq and written.buffered_acks == 1
        finally:
            await q.close()
        again = await s3q.open_async(env.url, **env.options)
        try:
            assert again.config.ack_durability == "durable"
            assert await again.status(first) is S.COMPLETED
            assert await again.status(second) is S.COMPLETED
        finally:
            await again.close()

    asyncio.run(main())


def test_ack_durability_must_be_durable_or_buffered(env: StoreEnv) -> None:
    with pytest.raises(s3q.InvalidConfig, match="ack_durability must be 'durable' or 'buffered'"):
        s3q.open(env.url, **env.options, ack_durability="later")
    with env.open() as q:
        with pytest.raises(s3q.InvalidConfig, match="ack_durability"):
            q.configure(ack_durability=None)
        assert q.config.ack_durability == "durable"


N_ACKS = 400


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_sigkill_makes_buffered_completions_deliver_again_never_lose_a_message(
    durable_env: StoreEnv,
) -> None:
    """A child dequeues and completes with ack_durability="buffered", printing each answered
    completion; it is killed at a random moment. A completion it was answered for may be lost
    with the batches not yet written: that message is delivered again once the child's lease
    lapses. No message is lost: each one is completed, or delivered again."""
    rng = random.Random(0xAC4 + len(durable_env.kind))
    undone = 0
    for round_no in range(ROUNDS):
        env = durable_env.sibling()
        with env.open() as q:
            all_ids = q.enqueue_batch([f"m{i}".encode() for i in range(N_ACKS)])
        proc = spawn_child(
            "child_complete.py", env, visibility_timeout=30.0, ack_durability="buffered"
        )
        lines = _kill_after_random_lines(proc, LineReader(proc), rng)
        acked = {line for line in lines if line != "empty"}
        q, clock = open_after_crash(env)
        try:
            clock.advance(31)  # every lease the child held has lapsed
            back = {m.id for m in drain(q)}
            completed = {mid for mid in all_ids if q.status(mid) is S.COMPLETED}
            assert back | completed == set(all_ids), round_no  # none lost
            assert not back & completed, round_no
            undone += len(acked - completed)
            assert acked - completed <= back, round_no  # a lost completion delivers again
        finally:
            q.close()
    print(f"{undone} answered completions were lost and delivered again in {ROUNDS} rounds")
