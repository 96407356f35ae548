"""Single-enqueue latency, durability "buffered" against "durable", side by side in one run.

One caller makes single ``enqueue`` calls one after another (each waits for its answer) on an
embedded queue over moto's S3 on 127.0.0.1 and over a local directory, default commit window.

    python benchmarks/durability.py --calls 500
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid

import local_s3

import s3q


async def latencies(url: str, options: dict[str, object], calls: int) -> list[float]:
    q = await s3q.open_async(url, **options)
    try:
        out = []
        for i in range(calls):
            started = time.perf_counter()
            await q.enqueue(b"event %d" % i)
            out.append((time.perf_counter() - started) * 1000)
        return out
    finally:
        await q.close()


def pct(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100)[p - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()
    moto = local_s3.start("durability")
    print(f"python benchmarks/durability.py --calls {args.calls}\n")
    print("| store | durability | enqueue p50 ms | p99 ms | calls/s |")
    print("|---|---|---|---|---|")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for store in ("s3", "file"):
                for durability in ("durable", "buffered"):
                    if store == "s3":
                        url = f"s3://durability/{uuid.uuid4().hex[:8]}"
                        options: dict[str, object] = dict(moto.store_options())
                    else:
                        url, options = f"file://{tmp}/{uuid.uuid4().hex[:8]}", {}
                    options["durability"] = durability
                    ms = asyncio.run(latencies(url, options, args.calls))
                    print(
                        f"| {store} | {durability} | {pct(ms, 50):.3f} | {pct(ms, 99):.3f} | "
                        f"{len(ms) / (sum(ms) / 1000):,.0f} |",
                        flush=True,
                    )
    finally:
        moto.stop()


if __name__ == "__main__":
    main()
