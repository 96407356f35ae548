"""The PySpark data source ``s3q``: queues as DataFrames, batch and streaming.

``import s3q.spark; s3q.spark.register(spark)``, then::

    spark.read.format("s3q").load("s3://bucket/queues/jobs")          # a snapshot
    df.write.format("s3q").mode("append").save("s3://bucket/queues/jobs")  # bulk enqueue
    spark.readStream.format("s3q").load(url)                          # consume
    df.writeStream.format("s3q").option("checkpointLocation", ...).start(url)

See docs/spark.md for the options.
"""

from __future__ import annotations

from typing import Any

from .source import S3QDataSource

__all__ = ["S3QDataSource", "register"]


def register(spark: Any) -> None:
    """Register format ``s3q`` with a SparkSession."""
    spark.dataSource.register(S3QDataSource)
