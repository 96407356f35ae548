"""Batch dequeue throughput, strict delivery against fair, side by side in one run.

An embedded queue holds ``--messages`` plain messages spread over ``--priorities`` priorities
(enqueued in batches); one consumer drains it with ``dequeue(--batch)`` + ``complete_batch``.
The store is memory (the writer's CPU is what the delivery order costs) or moto's S3.

    python benchmarks/fair.py --messages 200000 --priorities 3 --batch 1000
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections import Counter

import local_s3

import s3q


def drain(
    url: str, options: dict[str, object], args: argparse.Namespace
) -> tuple[float, Counter[int]]:
    with s3q.open(url, **options) as q:
        per = args.messages // args.priorities
        for priority in range(args.priorities):
            for start in range(0, per, 10_000):
                q.enqueue_batch(
                    [{"payload": b"x" * 100, "priority": priority}] * min(10_000, per - start)
                )
        first: Counter[int] = Counter()
        started = time.perf_counter()
        done = 0
        while True:
            got = q.dequeue(max_messages=args.batch)
            if not got:
                break
            if done < args.batch * 3:
                first.update(m.priority for m in got)
            q.complete_batch(got)
            done += len(got)
        return done / (time.perf_counter() - started), first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--priorities", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    moto = local_s3.start("fair")
    print(
        f"python benchmarks/fair.py --messages {args.messages} "
        f"--priorities {args.priorities} --batch {args.batch}\n"
    )
    print("| store | delivery | round | dequeued+completed msg/s | first 3 batches by priority |")
    print("|---|---|---|---|---|")
    try:
        for store in ("memory", "s3"):
            for rnd in range(1, args.rounds + 1):
                for delivery in ("strict", "fair"):
                    name = uuid.uuid4().hex[:8]
                    if store == "memory":
                        url, options = f"memory://fair-{name}", {}
                    else:
                        url, options = f"s3://fair/{name}", dict(moto.store_options())
                    options["delivery"] = delivery
                    rate, first = drain(url, options, args)
                    shares = ", ".join(f"{p}: {n}" for p, n in sorted(first.items()))
                    print(f"| {store} | {delivery} | {rnd} | {rate:,.0f} | {shares} |", flush=True)
    finally:
        moto.stop()


if __name__ == "__main__":
    main()
