"""History read on Spark local[2] from file://: events per second, and what a time filter skips.

    python benchmarks/history_read.py [--events 10000000] [--batch 10000]

Loads a queue (history_retention on) with enqueues, leases and completions in batches of
``--batch`` (three events per message), then reads its history with Spark: all of it
(``count()``), and a window of about 5 % of the time. Prints events per second, the log objects
the window planned against all of them, and the bytes it reads (headers of the planned
objects, plus the headers its binary search read) against a full read's.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

import s3q
from s3q import history, timeline
from s3q.store import open_store


def load(url: str, events: int, batch: int) -> float:
    """The queue, loaded; seconds it took. The fake clock moves one second per batch."""
    now = [1_700_000_000.0]
    started = time.perf_counter()
    with s3q.open(url, history_retention=1e9, clock=lambda: now[0]) as q:
        for _ in range(max(1, events // (3 * batch))):
            q.enqueue_batch([b"x" * 100] * batch)
            q.complete_batch(q.dequeue(max_messages=batch))
            now[0] += 1.0
    return time.perf_counter() - started


async def window_plan(url: str, since: float, until: float) -> tuple[int, int, int, int]:
    """Objects planned, all objects, bytes the window reads, bytes a full read reads."""
    store = open_store(url)
    try:
        seqs = await history.seqs(store)
        chosen, stamps = await timeline.window(store, seqs, since, until)
    finally:
        await store.close()
    root = Path(url.removeprefix("file://"))

    def tail_bytes(seq: int) -> int:  # what an executor reads of an object: its end
        return min((root / "log" / f"{seq:020d}").stat().st_size, 64 * 1024)

    probed = sum(tail_bytes(s) for s in stamps.read)
    return (
        len(chosen),
        len(seqs),
        probed + sum(map(tail_bytes, chosen)),
        sum(map(tail_bytes, seqs)),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    args = parser.parse_args()
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import s3q.spark

    url = Path(tempfile.mkdtemp(prefix="s3q-history-")).as_uri() + "/q"
    seconds = load(url, args.events, args.batch)
    spark = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    s3q.spark.register(spark)
    events = spark.read.format("s3q").option("history", "true").load(url)
    events.count()  # warm up the Python workers
    started = time.perf_counter()
    total = events.count()
    full = time.perf_counter() - started
    span = max(1, args.events // (3 * args.batch))
    since = 1_700_000_000.0 + span * 0.50
    until = since + max(1.0, span * 0.05)
    low = datetime.datetime.fromtimestamp(since, datetime.UTC)
    high = datetime.datetime.fromtimestamp(until, datetime.UTC)
    started = time.perf_counter()
    inside = events.where((F.col("at") >= F.lit(low)) & (F.col("at") <= F.lit(high))).count()
    windowed = time.perf_counter() - started
    planned, objects, read, every = asyncio.run(window_plan(url, since, until))
    print(f"command: python benchmarks/history_read.py --events {args.events} --batch {args.batch}")
    print(f"loaded {total:,} events in {objects:,} log objects in {seconds:.1f} s")
    print(f"full read: {total / full:,.0f} events/s ({full:.2f} s)")
    print(f"window: {inside:,} events in {windowed:.2f} s")
    print(
        f"window planned {planned:,} of {objects:,} log objects "
        f"({100 * (1 - planned / objects):.1f} % skipped), read {read:,} of {every:,} bytes "
        f"({100 * read / every:.1f} %)"
    )
    spark.stop()


if __name__ == "__main__":
    main()
