"""Child process: the ``s3q`` data source under Spark Connect, batch and streaming.

Usage: child_spark_connect.py URL ROWS BATCH

Starts a local Spark Connect server (``SparkSession.builder.remote("local[2]")``, as on
Databricks serverless the client holds no SparkContext), bulk-enqueues ROWS messages with a
DataFrame write, reads them back as a snapshot, then drains the queue with
``trigger(availableNow=True)`` in batches of BATCH into a memory sink, then reads its history
(events, and each message's life). Prints one JSON line
with what it saw; the test asserts on it and on the queue. Its own process, because a Connect
server cannot share a JVM with the test process's classic session.
"""

from __future__ import annotations

import json
import os
import sys

os.environ["PYSPARK_PYTHON"] = sys.executable

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import s3q.spark


def main() -> None:
    url, rows, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    spark = (
        SparkSession.builder.remote("local[2]")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    is_connect = type(spark).__module__.startswith("pyspark.sql.connect")
    s3q.spark.register(spark)

    written = spark.range(0, rows, numPartitions=2).select(
        F.concat(F.lit("m"), F.col("id").cast("string")).cast("binary").alias("payload")
    )
    written.write.format("s3q").mode("append").save(url)
    snapshot = spark.read.format("s3q").load(url).select("payload", "status").collect()

    query = (
        spark.readStream.format("s3q")
        .option("maxMessagesPerBatch", batch)
        .load(url)
        .select("payload")
        .writeStream.format("memory")
        .queryName("drained")
        .trigger(availableNow=True)
        .start()
    )
    stopped = query.awaitTermination(240)
    failure = query.exception()
    sink = spark.sql("SELECT payload FROM drained").collect()
    drained = [bytes(r.payload).decode() for r in sink]
    batches = [p.numInputRows for p in query.recentProgress]
    events = spark.read.format("s3q").option("history", "true").load(url)
    enqueued = events.where(F.col("kind") == "enqueued").count()
    lives = s3q.spark.lives(events).groupBy("status").count().collect()
    print(
        json.dumps(
            {
                "connect": is_connect,
                "snapshot": sorted(bytes(r.payload).decode() for r in snapshot),
                "snapshot_status": sorted({r.status for r in snapshot}),
                "stopped": bool(stopped),
                "failure": None if failure is None else str(failure),
                "drained": drained,
                "batches": batches,
                "history_enqueued": enqueued,
                "lives": {r["status"]: r["count"] for r in lives},
            }
        ),
        flush=True,
    )
    spark.stop()


if __name__ == "__main__":
    main()
