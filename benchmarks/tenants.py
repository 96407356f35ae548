"""Tenant fairness, two figures side by side in one run:

* cost: batch dequeue throughput of one backlog (``dequeue(--batch)`` + ``complete_batch``),
  untenanted against the same messages spread over tenants, one of which sends 90 % of them
  (noisy, so its messages are set aside and delivered after the quiet tenants');
* dwell: how long quiet tenants' messages wait (enqueue to delivery; p50/p90/p99) while four
  quiet tenants send 4 msg/s each to 32 consumers (100-300 ms per message, ~150 msg/s in
  all), with no flood, with a tenant flooding 100x a quiet tenant's rate (400 msg/s on a
  backlog of 3,000), and with the same flood sent without a tenant (one crowd).

    python benchmarks/tenants.py --messages 200000 --batch 1000 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from typing import Any

import local_s3
from floods import quiet_dwell

import s3q


def drain(url: str, options: dict[str, Any], messages: int, batch: int, tenants: bool) -> float:
    """Messages dequeued and completed per second, draining a backlog of ``messages``."""
    with s3q.open(url, **options) as q:
        for start in range(0, messages, 10_000):
            items: list[Any] = []
            for i in range(start, min(start + 10_000, messages)):
                if not tenants:
                    items.append(b"x" * 100)
                else:  # 90 % of them one tenant's, the rest spread over nine
                    tenant = "big" if i % 10 else f"t{i // 10 % 9}"
                    items.append({"payload": b"x" * 100, "tenant": tenant})
            q.enqueue_batch(items)
        started = time.perf_counter()
        done = 0
        while got := q.dequeue(max_messages=batch):
            q.complete_batch(got)
            done += len(got)
        assert done == messages, done
        return done / (time.perf_counter() - started)


def at(values: list[float], p: float) -> str:
    return f"{values[int(p * (len(values) - 1))] * 1000:,.1f}" if values else "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    moto = local_s3.start("tenants")
    print(
        f"python benchmarks/tenants.py --messages {args.messages} --batch {args.batch} "
        f"--seconds {args.seconds:g}\n"
    )

    def where(store: str) -> tuple[str, dict[str, Any]]:
        name = uuid.uuid4().hex[:8]
        if store == "memory":
            return f"memory://tenants-{name}", {}
        if store == "file":
            return f"file://{tempfile.mkdtemp()}/{name}", {}
        return f"s3://tenants/{name}", dict(moto.store_options())

    try:
        print("| store | messages | round | dequeued+completed msg/s |")
        print("|---|---|---|---|")
        for store in ("memory", "s3"):
            for rnd in range(1, args.rounds + 1):
                for tenants in (False, True):
                    url, options = where(store)
                    rate = drain(url, options, args.messages, args.batch, tenants)
                    kind = "90 % one noisy tenant" if tenants else "no tenants"
                    print(f"| {store} | {kind} | {rnd} | {rate:,.0f} |", flush=True)
        print()
        print("| store | quiet tenants' neighbour | delivered | dwell p50 ms | p90 | p99 |")
        print("|---|---|---|---|---|---|")
        for store in ("s3", "file"):
            for label, flood, tenant in (
                ("none", False, "big"),
                ("a tenant flooding 100x", True, "big"),
                ("the same flood, no tenant", True, None),
            ):
                url, options = where(store)
                dwell = asyncio.run(quiet_dwell(url, options, flood, tenant, args.seconds)).dwell
                sent = int(args.seconds / 0.25) * 4
                print(
                    f"| {store} | {label} | {len(dwell)} of ~{sent} | {at(dwell, 0.5)} | "
                    f"{at(dwell, 0.9)} | {at(dwell, 0.99)} |",
                    flush=True,
                )
    finally:
        moto.stop()


if __name__ == "__main__":
    main()
