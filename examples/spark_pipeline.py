"""A data pipeline on s3q and Spark, end to end, in one command:

    python examples/spark_pipeline.py                    # 20,000 orders in a temporary directory
    python examples/spark_pipeline.py --orders 100000 --dir ./pipeline-data

1. Spark bulk-loads a dataset of orders (JSON, a few malformed) into the queue ``orders``:
   one atomic commit, express orders at a higher priority.
2. s3q workers price each order and enqueue the result into the queue ``totals``; a malformed
   order fails, is retried once, and ends as a dead letter.
3. A Spark Structured Streaming job consumes ``totals`` into Parquet.
4. Spark reports revenue from the Parquet files, and the dead letters of ``orders`` from a
   snapshot read (no writer needed).

Needs ``pip install 's3q[spark]'`` and Java 17+.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import s3q
import s3q.spark
from s3q.worker import Completed, Dead, Event, Worker


def load_orders(spark: SparkSession, orders: str, count: int) -> None:
    """Stage 1: a dataset of orders, every 500th malformed, bulk-enqueued in one commit."""
    i = F.col("id")
    good = F.to_json(
        F.struct(
            i.alias("order"),
            (i % 7 + 1).alias("quantity"),
            F.round(F.lit(2.5) + i % 40, 2).alias("price"),
            F.when(i % 10 == 0, "express").otherwise("standard").alias("shipping"),
        )
    )
    dataset = spark.range(0, count, numPartitions=2).select(
        F.when(i % 500 == 499, F.concat(F.lit("{broken order "), i.cast("string")))
        .otherwise(good)
        .alias("payload"),
        F.when(i % 10 == 0, 9).otherwise(0).alias("priority"),
        F.create_map(F.lit("source"), F.lit("example")).alias("attributes"),
    )
    started = time.perf_counter()
    dataset.write.format("s3q").mode("append").save(orders)
    print(f"1. loaded {count:,} orders in {time.perf_counter() - started:.1f} s")


async def price_orders(orders: str, totals: str, count: int) -> None:
    """Stage 2: workers price each order; the totals go to another queue."""
    async with await s3q.open_async(totals) as out:

        async def price(msg: s3q.Message) -> None:
            order = json.loads(msg.payload)  # a malformed order raises: retried, then dead
            total = round(order["quantity"] * order["price"], 2)
            result = {"order": order["order"], "total": total, "shipping": order["shipping"]}
            await out.enqueue(json.dumps(result).encode())

        finished = asyncio.Event()
        seen = {"completed": 0, "dead": 0}

        def on_event(event: Event) -> None:
            if isinstance(event, Completed | Dead):
                seen["completed" if isinstance(event, Completed) else "dead"] += 1
                if seen["completed"] + seen["dead"] == count:
                    finished.set()

        async with await s3q.open_async(orders, max_attempts=2, retry_delay=0.05) as q:
            worker = Worker(q, price, concurrency=16, on_event=on_event)
            serving = asyncio.create_task(worker.serve())
            started = time.perf_counter()
            await finished.wait()
            worker.stop()
            await serving
    print(
        f"2. workers priced {seen['completed']:,} orders, {seen['dead']} dead letters, "
        f"in {time.perf_counter() - started:.1f} s"
    )


def stream_totals(spark: SparkSession, totals: str, parquet: Path, checkpoint: Path) -> None:
    """Stage 3: a streaming job consumes the totals into Parquet: every total in the queue when
    it starts, in batches, then it stops (availableNow: a scheduled job, run again later for
    what came since)."""
    schema = "order long, total double, shipping string"
    query = (
        spark.readStream.format("s3q")
        .option("maxMessagesPerBatch", 50_000)
        .load(totals)
        .select(F.from_json(F.col("payload").cast("string"), schema).alias("t"))
        .select("t.*")
        .writeStream.format("parquet")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(parquet))
    )
    started = time.perf_counter()
    query.awaitTermination()
    print(f"3. streamed the totals into {parquet} in {time.perf_counter() - started:.1f} s")


def report(spark: SparkSession, orders: str, parquet: Path) -> None:
    """Stage 4: revenue from Parquet; dead letters from a snapshot of the queue."""
    print("4. revenue by shipping:")
    spark.read.parquet(str(parquet)).groupBy("shipping").agg(
        F.count("*").alias("orders"), F.round(F.sum("total"), 2).alias("revenue")
    ).orderBy("shipping").show()
    dead = spark.read.format("s3q").option("status", "dead").load(orders)
    print(f"   dead letters in {orders}: {dead.count()}")
    dead.select(F.col("payload").cast("string").alias("payload"), "attempts", "last_error").show(
        5, truncate=60
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=20_000)
    parser.add_argument("--dir", type=Path, default=None, help="where queues and results go")
    args = parser.parse_args()
    logging.getLogger("s3q.worker").setLevel(logging.CRITICAL)  # failures are reported at the end
    base = (args.dir or Path(tempfile.mkdtemp(prefix="s3q-pipeline-"))).absolute()
    orders, totals = (base / "orders").as_uri(), (base / "totals").as_uri()
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("s3q-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    s3q.spark.register(spark)
    try:
        load_orders(spark, orders, args.orders)
        asyncio.run(price_orders(orders, totals, args.orders))
        stream_totals(spark, totals, base / "totals.parquet", base / "checkpoint")
        report(spark, orders, base / "totals.parquet")
    finally:
        spark.stop()
    print(f"everything is under {base}")


if __name__ == "__main__":
    main()
