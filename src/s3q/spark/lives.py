"""Each message's life in one row: a query over the history's events (``history_read``).

The same measures as ``s3q history --since`` (``s3q.history.lives``): *dwell* is enqueue to first
lease, *processing* last lease to completion, *latency* enqueue to completion or death. Each
is null unless both its ends lie in the events given. Plain DataFrame operations: it runs
under Spark Connect too.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ..history.lives import LEASES, STATUS_AFTER


def _seconds(later: Column, earlier: Column) -> Column:
    return (F.unix_micros(later) - F.unix_micros(earlier)) / F.lit(1e6)


def lives(events: DataFrame) -> DataFrame:
    """One row per message of ``events`` (a history read, or any subset of its rows with
    columns ``seq``, ``op``, ``at``, ``kind``, ``id``, ``priority``, ``tenant``, ``error``):
    ``id, tenant, priority, enqueued_at, first_leased_at, completed_at, dead_at, attempts,
    status, last_error, dwell, processing, latency`` (seconds)."""
    kind, at = F.col("kind"), F.col("at")
    leased = kind.isin(*sorted(LEASES))
    position = F.struct("seq", "op")
    status = F.create_map(*[F.lit(x) for pair in sorted(STATUS_AFTER.items()) for x in pair])
    grouped = (
        events.where(F.col("id").isNotNull())
        .groupBy("id")
        .agg(
            F.max(F.when(kind == "enqueued", F.col("tenant"))).alias("tenant"),
            F.max(F.when(kind == "enqueued", F.col("priority"))).alias("priority"),
            F.min(F.when(kind == "enqueued", at)).alias("enqueued_at"),
            F.min(F.when(leased, at)).alias("first_leased_at"),
            F.max(F.when(leased, at)).alias("last_leased_at"),
            F.max(F.when(kind == "completed", at)).alias("completed_at"),
            F.max(F.when(kind == "dead", at)).alias("dead_at"),
            F.count(F.when(leased, 1)).cast("int").alias("attempts"),
            F.max_by(kind, position).alias("last_kind"),
            F.max_by(F.col("error"), F.when(F.col("error").isNotNull(), position)).alias(
                "last_error"
            ),
        )
    )
    return grouped.select(
        "id",
        "tenant",
        "priority",
        "enqueued_at",
        "first_leased_at",
        "completed_at",
        "dead_at",
        "attempts",
        status[F.col("last_kind")].alias("status"),
        "last_error",
        _seconds(F.col("first_leased_at"), F.col("enqueued_at")).alias("dwell"),
        _seconds(F.col("completed_at"), F.col("last_leased_at")).alias("processing"),
        _seconds(F.coalesce(F.col("completed_at"), F.col("dead_at")), F.col("enqueued_at")).alias(
            "latency"
        ),
    )
