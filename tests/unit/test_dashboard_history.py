"""The throughput history the broker keeps for its dashboard: what it samples, when it reads a
queue's figures, and what it keeps."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from s3q.api import AsyncQueue
from s3q.broker.dashboard.history import History
from s3q.broker.registry import QueueRegistry


def test_history_samples_counters_and_reads_only_queues_that_wrote(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[str] = []
    real_stats = AsyncQueue.stats

    async def counted(self: AsyncQueue) -> Any:
        reads.append(self.url)
        return await real_stats(self)

    monkeypatch.setattr(AsyncQueue, "stats", counted)

    async def scenario() -> None:
        now = [1000.0]
        registry = QueueRegistry(f"memory://history-{uuid.uuid4().hex}")
        history = History(registry, span=10, step=1, clock=lambda: now[0])
        try:
            registry.on_open = history.opened
            q = await registry.get("jobs")
            assert isinstance(q, AsyncQueue)
            await asyncio.gather(*history._looking)  # a first look as it opens
            now[0] += 1
            await q.enqueue_batch([b"x"] * 5)

            async def tick() -> None:
                await history.sample()
                now[0] += 1

            await tick()  # its writes moved since the first look: read
            await tick()  # and at the last look: read again
            await tick()  # idle: the figures kept, no read
            assert len(reads) == 3
            await q.complete_batch(await q.dequeue(max_messages=2))
            await tick()  # a commit since: read
            await tick()  # and once more after it
            await tick()
            assert len(reads) == 5
            assert history.summary()["queues"]["jobs"] == [
                [1000.0, 0, 0],
                [1001.0, 5, 0],
                [1002.0, 5, 0],
                [1003.0, 5, 0],
                [1004.0, 5, 2],
                [1005.0, 5, 2],
                [1006.0, 5, 2],
            ]

            for _ in range(30):  # a ring of the samples of the last ``span`` seconds
                await tick()
            ring = history._rings["jobs"].samples
            assert len(ring) == ring.maxlen == 11
            samples = history.summary()["queues"]["jobs"]
            assert [t for t, _, _ in samples] == [now[0] - i for i in range(10, 0, -1)]
            assert history.summary()["step"] == 1

            await registry.close_queue("jobs")  # closed here: forgotten at the next step
            await tick()
            assert history.summary()["queues"] == {}
        finally:
            await registry.close()

    asyncio.run(scenario())
