"""What idle queues cost: a broker leading N idle queues against N queues open embedded.

Over moto's S3 on 127.0.0.1, N queues each get one message and are then left alone for
``--seconds``. A broker (``QueueRegistry``, as ``s3q serve`` runs it) keeps its queues' leases on
one broker lease; queues opened with ``s3q.open`` each renew their own. The store's request
counters give the requests of the idle span; dollars a month are S3's list prices.

    python benchmarks/idle.py --queues 100 --seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

import local_s3

import s3q
from s3q.broker.registry import QueueRegistry
from s3q.prices import MONTH, S3
from s3q.store.base import Counts


def total(counts: list[Counts]) -> Counts:
    out = Counts()
    for c in counts:
        out.add(c)
    return out


async def idle_broker(url: str, options: dict[str, Any], queues: int, seconds: float) -> Counts:
    registry = QueueRegistry(url, options, address="http://127.0.0.1:1", idle_close=0)
    try:
        for i in range(queues):
            q = await registry.get(f"idle-{i}")
            assert isinstance(q, s3q.AsyncQueue)
            await q.enqueue(b"one")
        before = registry.requests()
        await asyncio.sleep(seconds)  # the idle span being measured
        after = registry.requests()
    finally:
        await registry.close()
    return difference(after, before)


async def idle_embedded(url: str, options: dict[str, Any], queues: int, seconds: float) -> Counts:
    opened = [await s3q.open_async(f"{url}/idle-{i}", **options) for i in range(queues)]
    try:
        for q in opened:
            await q.enqueue(b"one")
        before = total([q.requests for q in opened])
        await asyncio.sleep(seconds)  # the idle span being measured
        after = total([q.requests for q in opened])
    finally:
        for q in opened:
            await q.close()
    return difference(after, before)


def difference(after: Counts, before: Counts) -> Counts:
    return Counts(**{k: getattr(after, k) - getattr(before, k) for k in vars(after)})


def row(what: str, queues: int, seconds: float, spent: Counts) -> str:
    dollars = S3.dollars(spent.puts, spent.gets, spent.lists) / seconds * MONTH
    return (
        f"| {what} | {queues} | {spent.puts} | {spent.gets} | "
        f"{spent.puts / seconds * 3:.2f} | ${dollars:,.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--lease-ttl", type=float, default=10.0)
    args = parser.parse_args()
    moto = local_s3.start("idle")
    options = {**moto.store_options(), "lease_ttl": args.lease_ttl}
    try:
        print(f"python benchmarks/idle.py --queues {args.queues} --seconds {args.seconds:g}")
        print()
        print("| held by | queues | PUTs idle | GETs idle | PUTs per 3 s | $ a month |")
        print("|---|---|---|---|---|---|")
        started = time.monotonic()
        for what, run in (("a broker (`s3q serve`)", idle_broker), ("s3q.open", idle_embedded)):
            url = f"s3://idle/{uuid.uuid4().hex[:8]}"
            spent = asyncio.run(run(url, options, args.queues, args.seconds))
            print(row(what, args.queues, args.seconds, spent), flush=True)
        print(f"\n({time.monotonic() - started:.0f} s)")
    finally:
        moto.stop()


if __name__ == "__main__":
    main()
