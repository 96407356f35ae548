"""Quiet tenants beside a flood: the scenario the flood test and benchmarks/tenants.py run."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import random
import time
from typing import Any

import s3q


@dataclasses.dataclass
class Quiet:
    """How the quiet tenants' messages fared: each one's wait, from its enqueue to its delivery
    (seconds, sorted), and how many of the flood's messages were delivered after its enqueue
    was acknowledged and before it (sorted). A wait depends on the machine's speed; an
    overtaking count does not: a consumer takes one message at a time, so a fair queue lets at
    most one per consumer (those it chose before the quiet message was there) go ahead."""

    dwell: list[float]
    overtaken: list[int]


CONSUMERS = 32


async def quiet_dwell(
    url: str,
    options: dict[str, Any],
    flood: bool,
    tenant: str | None,
    seconds: float,
    drain: float = 0.3,
) -> Quiet:
    """Four quiet tenants send 4 messages a second each for ``seconds`` to a queue 32 consumers
    drain (each message takes one 100 to 300 ms, about 150 a second in all, each consumer
    acknowledging in the background while it asks again); with ``flood``, one more sends 100
    times a quiet tenant's rate (400 a second, on a backlog of 3,000) as ``tenant``. The
    quiet messages' waits and overtaking counts (``Quiet``). The consumers go on for up to
    ``drain`` seconds after the last send, until every quiet message is delivered; a quiet
    message still waiting then has no wait, and the flood's deliveries since its ack as its
    overtaking count."""
    q = await s3q.open_async(url, **options)
    dwell: list[float] = []
    overtaken: list[int] = []
    floods_delivered = 0
    at_ack: dict[str, int] = {}  # a quiet message not delivered: the flood's deliveries at its ack
    delivered: set[str] = set()
    done = asyncio.Event()
    all_quiet = asyncio.Event()  # every quiet message sent so far is delivered
    big = {"payload": b"big", "tenant": tenant}
    acks: set[asyncio.Task[None]] = set()

    async def consume() -> None:
        nonlocal floods_delivered
        while not done.is_set():
            for m in await q.dequeue(max_messages=1, wait=0.1):
                if m.payload == b"big":
                    floods_delivered += 1
                else:
                    dwell.append(time.time() - m.enqueued_at)
                    # (delivered before its sender heard the ack: nothing overtook it)
                    overtaken.append(floods_delivered - at_ack.pop(m.id, floods_delivered))
                    delivered.add(m.id)
                    if not at_ack:
                        all_quiet.set()
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
        consumers = [asyncio.create_task(consume()) for _ in range(CONSUMERS)]

        async def quietly(tenant: str) -> None:
            sent = await q.enqueue(b"q", tenant=tenant)
            if sent not in delivered:  # (not delivered before its sender heard the ack)
                all_quiet.clear()
                at_ack[sent] = floods_delivered

        quiet = [functools.partial(quietly, f"t{i}") for i in range(4)]
        senders = [every(0.25, send) for send in quiet]
        if flood:
            senders.append(every(0.05, functools.partial(q.enqueue_batch, [big] * 20)))
        await asyncio.gather(*senders)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_quiet.wait(), drain)
        done.set()
        await asyncio.gather(*consumers, *acks)
    finally:
        await q.close()
    overtaken.extend(floods_delivered - before for before in at_ack.values())
    return Quiet(sorted(dwell), sorted(overtaken))
