"""Quiet tenants beside a flood: the scenario the flood test and benchmarks/tenants.py run."""

from __future__ import annotations

import asyncio
import functools
import random
import time
from typing import Any

import s3q


async def quiet_dwell(
    url: str, options: dict[str, Any], flood: bool, tenant: str | None, seconds: float
) -> list[float]:
    """Four quiet tenants send 4 messages a second each for ``seconds`` to a queue 32 consumers
    drain (each message takes one 100 to 300 ms, about 150 a second in all, each consumer
    acknowledging in the background while it asks again); with ``flood``, one more sends 100
    times a quiet tenant's rate (400 a second, on a backlog of 3,000) as ``tenant``. The
    seconds each quiet message waited, from its enqueue to its delivery, sorted; those not
    delivered within the run are missing."""
    q = await s3q.open_async(url, **options)
    dwell: list[float] = []
    done = asyncio.Event()
    big = {"payload": b"big", "tenant": tenant}
    acks: set[asyncio.Task[None]] = set()

    async def consume() -> None:
        while not done.is_set():
            for m in await q.dequeue(max_messages=1, wait=0.1):
                if m.payload != b"big":
                    dwell.append(time.time() - m.enqueued_at)
                await asyncio.sleep(random.uniform(0.1, 0.3))
                ack = asyncio.create_task(q.complete(m))
                acks.add(ack)
                ack.add_done_callback(acks.discard)

    async def every(pause: float, send: Any) -> None:
        """``send`` every ``pause`` seconds for ``seconds``, on a schedule: a slow send (a loaded
        machine, a slow store) does not lower the rate, the next one goes at once."""
        start = time.monotonic()
        for k in range(round(seconds / pause)):
            await asyncio.sleep(max(0.0, start + k * pause - time.monotonic()))
            await send()

    try:
        if flood:
            await q.enqueue_batch([big] * 3000)
        consumers = [asyncio.create_task(consume()) for _ in range(32)]
        quiet = [functools.partial(q.enqueue, b"q", tenant=f"t{i}") for i in range(4)]
        senders = [every(0.25, send) for send in quiet]
        if flood:
            senders.append(every(0.05, functools.partial(q.enqueue_batch, [big] * 20)))
        await asyncio.gather(*senders)
        await asyncio.sleep(0.3)
        done.set()
        await asyncio.gather(*consumers, *acks)
    finally:
        await q.close()
    return sorted(dwell)
