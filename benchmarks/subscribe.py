"""A subscribed consumer against a polling one, draining the same backlog through the broker.

    python benchmarks/subscribe.py [--messages 100000] [--rounds 2] [--store memory|file]

``s3q serve`` in a child process on a memory:// (or a temporary file://) store; a backlog of
``--messages`` messages of 1 KiB (enqueued in batches of 1,000), drained in turn, in each round:

- **poll**: ``dequeue(1000)`` then ``complete_batch`` of what it got (the batch path);
- **subscribe**: ``queue.subscribe(prefetch=1000)``, each message completed on its own
  (``sub.complete(msg)``, not awaited in turn: as a consumer with many handlers does), the
  completions of one loop turn travelling as one frame;
- **worker (push)** and **worker (poll)**: ``s3q.worker.Worker`` with an async handler that does
  nothing, concurrency 64, messages pushed on a subscription or polled.

Prints per way: messages/s, the broker's CPU seconds per 100,000 messages (psutil), and the
command. One async client in this process; the machine's other core runs the broker.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

import psutil
from request_cpu import PAYLOAD, broker

import s3q
from s3q.client import AsyncRemoteQueue, connect, connect_async
from s3q.worker import Worker

BATCH = 1000


async def poll(queue: AsyncRemoteQueue, count: int) -> None:
    left = count
    while left > 0:
        got = await queue.dequeue(BATCH, 30.0, 1.0)
        if got:
            await queue.complete_batch(got)
            left -= len(got)


async def subscribe(queue: AsyncRemoteQueue, count: int) -> None:
    async with queue.subscribe(prefetch=2 * BATCH, visibility_timeout=30.0) as sub:
        left = count
        while left > 0:
            for msg in await sub.take(BATCH, 1.0):
                sub.ack(msg)  # each on its own
                left -= 1
        await sub.flush()


def worker(push: bool) -> Callable[[AsyncRemoteQueue, int], Awaitable[None]]:
    async def drain(queue: AsyncRemoteQueue, count: int) -> None:
        done = asyncio.Event()
        seen = 0

        async def handler(msg: s3q.Message) -> None:
            nonlocal seen
            seen += 1
            if seen == count:
                done.set()

        w = Worker(queue, handler, concurrency=64, push=push)
        task = asyncio.create_task(w.serve())
        await done.wait()
        w.stop()
        await task

    return drain


WAYS: dict[str, Callable[[AsyncRemoteQueue, int], Awaitable[None]]] = {
    "poll: dequeue(1000) + complete_batch": poll,
    "subscribe: prefetch 2000, one ack per message": subscribe,
    "worker (push), concurrency 64": worker(True),
    "worker (poll), concurrency 64": worker(False),
}


async def drained(url: str, way: str, count: int) -> float:
    async with connect_async(url) as client:
        queue = client.queue("drain")
        started = time.perf_counter()
        await WAYS[way](queue, count)
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--store", choices=["memory", "file"], default="memory")
    args = parser.parse_args()
    src = str(__import__("pathlib").Path(s3q.__file__).parents[1])
    results: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory() as tmp:
        store = "memory://drain" if args.store == "memory" else f"file://{tmp}/store"
        with broker(src, store) as (child, url):
            server = psutil.Process(child.pid)
            for _ in range(args.rounds):
                for way in WAYS:
                    with connect(url) as client:
                        queue = client.queue("drain")
                        for _ in range(args.messages // BATCH):
                            queue.enqueue_batch([PAYLOAD] * BATCH)
                    cpu = sum(server.cpu_times()[:2])
                    seconds = asyncio.run(drained(url, way, args.messages))
                    used = sum(server.cpu_times()[:2]) - cpu
                    results[way].append((args.messages / seconds, used * 1e5 / args.messages))
    print(f"draining {args.messages:,} messages of 1 KiB on {args.store}://, {args.rounds} rounds")
    print(f"{'way':<52} {'msg/s':>18} {'broker CPU s / 100k':>22}")
    for way, found in results.items():
        rates = "-".join(f"{r:,.0f}" for r in sorted({round(r) for r, _ in found}))
        cpus = "-".join(f"{c:.2f}" for c in sorted({round(c, 2) for _, c in found}))
        print(f"{way:<52} {rates:>18} {cpus:>22}")
    print("command: python " + shlex.join(sys.argv))


if __name__ == "__main__":
    main()
