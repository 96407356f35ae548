"""The PySpark data source ``s3q``: queues as DataFrames, batch and streaming.

``import s3q.spark; s3q.spark.register(spark)``, then::

    spark.read.format("s3q").load("s3://bucket/queues/jobs")          # a snapshot
    spark.read.format("s3q").option("history", "true").load(url)      # every event kept
    df.write.format("s3q").mode("append").save("s3://bucket/queues/jobs")  # bulk enqueue
    spark.readStream.format("s3q").load(url)                          # consume
    df.writeStream.format("s3q").option("checkpointLocation", ...).start(url)

See docs/spark.md for the options.
"""

from __future__ import annotations

from typing import Any

from .lives import lives
from .source import S3QDataSource

__all__ = ["S3QDataSource", "lives", "register"]

#: Spark refuses a Python source that can take filters unless this is on
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any) -> None:
    """Register format ``s3q`` with a SparkSession, and let Python data sources take the
    filters Spark pushes down (the history read does: ``PUSHDOWN``)."""
    spark.dataSource.register(S3QDataSource)
    spark.conf.set(PUSHDOWN, "true")
