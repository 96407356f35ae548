"""Single-call enqueues of one queue as its partitions grow, on S3 with S3's latency.

moto S3 behind the fault proxy with no faults and S3 standard's latency
(``s3q.faults.schedule.S3_LATENCY``: 20-60 ms a request, p99 ~150 ms). For each number of
partitions and of callers, a fresh queue; each caller enqueues one message at a time, awaiting
each (durable), for ``--seconds``. Printed: messages a second, commits (log PUTs) a second,
the calls' p50/p95/p99, the p99 in PUT latencies (a PUT timed alone through the same proxy), and
the S3 server's own time per request (moto's, apart from the latency the proxy adds).

    python benchmarks/partitions.py --partitions 1 --partitions 4 --callers 8 --callers 64
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import statistics
import sys
import time
import uuid

import local_s3

import s3q
from s3q.faults.proxy import FaultProxy
from s3q.faults.schedule import S3_LATENCY
from s3q.store import open_store

BUCKET = "partitions-bench"
WINDOW: float | None = None  # the writers' commit window (None: the store's default)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def put_latency(url: str, options: dict[str, object], count: int = 200) -> list[float]:
    """Seconds each of ``count`` PUTs of 1 KiB took, one after another."""
    store = open_store(url, options)
    took = []
    try:
        for i in range(count):
            started = time.perf_counter()
            await store.put(f"probe/{i}", b"x" * 1024)
            took.append(time.perf_counter() - started)
    finally:
        await store.close()
    return took


async def run(
    url: str,
    options: dict[str, object],
    partitions: int,
    callers: int,
    seconds: float,
    proxy: FaultProxy,
) -> dict[str, float]:
    q = await s3q.open_async(url, partitions=partitions, commit_window=WINDOW, **options)
    latencies: list[float] = []
    stop = time.monotonic() + seconds

    async def caller(n: int) -> None:
        i = 0
        while time.monotonic() < stop:
            started = time.perf_counter()
            await q.enqueue(b"m-%d-%d" % (n, i))
            latencies.append(time.perf_counter() - started)
            i += 1

    try:
        before = (await q.stats()).commits
        proxy.upstream_seconds.clear()
        started = time.monotonic()
        await asyncio.gather(*(caller(n) for n in range(callers)))
        took = time.monotonic() - started
        commits = (await q.stats()).commits - before
        upstream = list(proxy.upstream_seconds)
    finally:
        await q.close()
    return {
        "store_p50": _quantile(upstream, 0.50),
        "store_p99": _quantile(upstream, 0.99),
        "msgs": len(latencies) / took,
        "commits": commits / took,
        "p50": _quantile(latencies, 0.50),
        "p95": _quantile(latencies, 0.95),
        "p99": _quantile(latencies, 0.99),
    }


async def main(args: argparse.Namespace) -> None:
    server = local_s3.start(BUCKET)
    try:
        with FaultProxy(server.endpoint, S3_LATENCY, seed=args.seed) as proxy:
            options = {**server.store_options(), "endpoint_url": proxy.endpoint}
            puts = await put_latency(f"s3://{BUCKET}/probe-{uuid.uuid4().hex[:8]}", options)
            put = statistics.median(puts)
            print(
                f"PUT of 1 KiB through the proxy: p50 {put * 1e3:.1f} ms, "
                f"p99 {_quantile(puts, 0.99) * 1e3:.1f} ms"
            )
            print(
                "| partitions | callers | msg/s | commits/s | p50 ms | p95 ms | p99 ms "
                "| p99 in PUTs | moto's own p50 / p99 ms |"
            )
            print("|---|---|---|---|---|---|---|---|---|")
            for callers in args.callers:
                for partitions in args.partitions:
                    url = f"s3://{BUCKET}/q-{uuid.uuid4().hex[:8]}"
                    got = await run(url, options, partitions, callers, args.seconds, proxy)
                    print(
                        f"| {partitions} | {callers} | {got['msgs']:,.0f} | "
                        f"{got['commits']:,.1f} | {got['p50'] * 1e3:.0f} | "
                        f"{got['p95'] * 1e3:.0f} | {got['p99'] * 1e3:.0f} | "
                        f"{got['p99'] / put:.1f} | {got['store_p50'] * 1e3:.1f} / "
                        f"{got['store_p99'] * 1e3:.1f} |",
                        flush=True,
                    )
    finally:
        server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, action="append")
    parser.add_argument("--callers", type=int, action="append")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--commit-window", type=float, help="seconds (default: the store's)")
    args = parser.parse_args()
    WINDOW = args.commit_window
    args.partitions = args.partitions or [1, 2, 4]
    args.callers = args.callers or [8]
    print("$ python " + shlex.join(["benchmarks/partitions.py", *sys.argv[1:]]))
    asyncio.run(main(args))
