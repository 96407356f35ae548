"""Child process: consume a queue with Structured Streaming into a Parquet sink.

Usage: child_spark_consume.py URL OUT CHECKPOINT EXPECTED

Runs the query until the sink holds EXPECTED rows (or is killed: the test kills it mid-stream
and starts it again from CHECKPOINT). Prints ``done`` and exits 0 when finished.
"""

from __future__ import annotations

import os
import sys
import time

os.environ["PYSPARK_PYTHON"] = sys.executable

from pyspark.sql import SparkSession

import s3q.spark


def main() -> None:
    url, out, checkpoint, expected = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    s3q.spark.register(spark)
    query = (
        spark.readStream.format("s3q")
        .option("maxMessagesPerBatch", 200)
        .option("visibilityTimeout", 8)
        .load(url)
        .select("id", "payload", "attempts")
        .writeStream.format("parquet")
        .option("checkpointLocation", checkpoint)
        .start(out)
    )
    print("started", flush=True)
    deadline = time.monotonic() + 240
    while True:
        query.processAllAvailable()  # returns after a trigger that found nothing new
        metadata = os.path.join(out, "_spark_metadata")
        if os.path.exists(metadata) and spark.read.parquet(out).count() >= expected:
            break
        if time.monotonic() > deadline:
            raise SystemExit("the sink never received every message")
    query.stop()
    spark.stop()
    print("done", flush=True)


if __name__ == "__main__":
    main()
