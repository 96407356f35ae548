"""Benchmarks of the Spark data source: bulk write, snapshot read, streaming consumption.

    python benchmarks/spark_bench.py                 # 1,000,000 rows of 1 KiB, local[2]
    python benchmarks/spark_bench.py --rows 200000   # quicker
    python benchmarks/spark_bench.py --store s3      # against a moto S3 server it starts
    python benchmarks/spark_bench.py --rows 10000000 --size 100 --driver-memory 1g

Besides the rates it prints how far this process (the Python driver) grew during each phase,
its highest RSS over its RSS once the rows were cached, and the highest RSS of any one Python
worker Spark started (they plan the read and commit the write), both sampled every 20 ms.

Prints one line per figure, and the command that produced them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import s3q
import s3q.spark

TARGETS = {"bulk write": 200_000, "snapshot read": 300_000, "streaming consumption": 50_000}


def session(driver_memory: str) -> SparkSession:
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("s3q-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", driver_memory)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    s3q.spark.register(spark)
    return spark


def rss(pid: int | str = "self") -> int:
    """A process's resident set now, in bytes (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (FileNotFoundError, ProcessLookupError):
        return 0


def python_workers() -> list[int]:
    """The Python processes Spark's JVM started below this one: they plan the reads, commit
    the writes and run the tasks of a Python data source."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
    mine, found = {os.getpid()}, True
    while found:
        found = False
        for pid, parent in parents.items():
            if parent in mine and pid not in mine:
                mine.add(pid)
                found = True
    workers = []
    for pid in mine - {os.getpid()}:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if b"python" in cmdline.read().split(b"\0", 1)[0]:
                    workers.append(pid)
        except (FileNotFoundError, ProcessLookupError):
            continue
    return workers


class Peak(threading.Thread):
    """The highest RSS of this process, and of any one of Spark's Python workers, seen since
    the last ``reset``, sampled every 20 ms."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.reset()

    def reset(self) -> None:
        self.driver, self.worker = rss(), 0

    def run(self) -> None:
        while True:
            self.driver = max(self.driver, rss())
            self.worker = max([self.worker, *map(rss, python_workers())])
            time.sleep(0.02)  # a sampling period, not a synchronisation


PEAK = Peak()


def report(name: str, rows: int, seconds: float, base: int) -> None:
    rate = rows / seconds
    verdict = "meets" if rate >= TARGETS[name] else "MISSES"
    grew, worker = max(PEAK.driver - base, 0) / 2**20, PEAK.worker / 2**20
    PEAK.reset()
    print(
        f"{name:<22} {rows:>10,} msgs in {seconds:6.2f} s = {rate:>10,.0f} msg/s "
        f"({verdict} the target of {TARGETS[name]:,}); Python driver peak +{grew:,.1f} MiB, "
        f"largest Python worker {worker:,.1f} MiB",
        flush=True,
    )


def open_when_released(url: str, options: dict[str, Any]) -> s3q.Queue:
    """Open the queue once the stopped query's source has let go of it: Spark stops a Python
    source when its runner's socket closes, a moment after ``query.stop()`` returns."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return s3q.open(url, **options)
        except s3q.QueueLocked:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)  # another process's lock: no event to wait on


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024, help="payload bytes")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--store", choices=["file", "s3"], default="file")
    parser.add_argument("--driver-memory", default="4g", help="the JVM driver's heap")
    parser.add_argument("--no-stream", action="store_true", help="skip the streaming phase")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="s3q-spark-bench-"))
    options: dict[str, Any] = {}
    moto = None
    if args.store == "file":
        url = (work / "queue").as_uri()
    else:
        import local_s3

        moto = local_s3.start("bench")
        options = moto.store_options()
        url = "s3://bench/queue"
    spark = session(args.driver_memory)
    try:
        print(
            f"s3q Spark data source, local[2], {args.rows:,} rows of {args.size} B, "
            f"{args.store} store, driver heap {args.driver_memory}, pyspark {spark.version}",
            flush=True,
        )
        filler = "x" * (args.size - 12)
        df = (
            spark.range(0, args.rows, numPartitions=args.partitions)
            .select(
                F.concat(F.lpad(F.col("id").cast("string"), 12, "0"), F.lit(filler))
                .cast("binary")
                .alias("payload")
            )
            .cache()
        )
        df.count()  # generate and cache the rows first: the write is measured alone
        base = rss()
        PEAK.reset()
        PEAK.start()

        def opts(rw: Any) -> Any:
            for k, v in options.items():
                rw = rw.option(k, str(v).lower() if isinstance(v, bool) else v)
            return rw

        start = time.perf_counter()
        opts(df.write.format("s3q").mode("append")).save(url)
        report("bulk write", args.rows, time.perf_counter() - start, base)
        df.unpersist()

        start = time.perf_counter()
        opts(spark.read.format("s3q")).load(url).write.format("noop").mode("overwrite").save()
        report("snapshot read", args.rows, time.perf_counter() - start, base)
        if not args.no_stream:
            start = time.perf_counter()
            query = (
                opts(spark.readStream.format("s3q"))
                .option("maxMessagesPerBatch", 100_000)
                .option("visibilityTimeout", 600)
                .load(url)
                .writeStream.format("noop")
                .option("checkpointLocation", str(work / "checkpoint"))
                .start()
            )
            query.processAllAvailable()
            elapsed = time.perf_counter() - start
            query.stop()
            report("streaming consumption", args.rows, elapsed, base)
            with open_when_released(url, options) as q:
                st = q.stats()
                assert st.completed == args.rows and st.pending == 0, st
    finally:
        spark.stop()
        if moto is not None:
            moto.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("command: python benchmarks/spark_bench.py " + " ".join(sys.argv[1:]), flush=True)


if __name__ == "__main__":
    main()
