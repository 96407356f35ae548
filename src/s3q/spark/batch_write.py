"""Batch write: bulk enqueue of a DataFrame, all rows or none.

Executors stage the payloads (``stage``); the driver then commits every staged object in one
log object through the queue's writer, which it opens for that moment, or through the broker
that leads the queue. A job that fails or is
aborted deletes what it staged and enqueues nothing.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Iterator

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from .options import Options, run
from .stage import (
    NOT_COMMITTED,
    Staged,
    abort_job,
    commit_staged,
    delete_staged,
    mark_committing,
    partition_count,
    stage_all,
    staged_keys,
    was_committing,
)

logger = logging.getLogger("s3q.spark")


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("s3q").save(url)``: every row a message, in one commit."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.job = f"{int(time.time())}-{secrets.token_hex(6)}"  # shared by every task
        self.partitions = run(partition_count(options))  # the queue's, where tasks stage

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Staged:
        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        origin = f"partition {partition}"
        return stage_all(
            self.options, self.job, origin, iterator, True, self.partitions, turn=partition
        )

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        objects = [o for m in messages if isinstance(m, Staged) for o in m.objects]
        marker = run(mark_committing(self.options, self.job))
        try:
            run(commit_staged(self.options, objects))
        except NOT_COMMITTED:  # certain: tidy up now (Spark's abort will find nothing)
            run(delete_staged(self.options, self.job, staged_keys(messages), self.partitions))
            raise
        # Any other failure leaves the outcome unknown: the marker stays, abort deletes
        # nothing, and the collector deletes whatever no commit refers to, later.
        run(delete_staged(self.options, None, [marker]))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if run(was_committing(self.options, self.job)):
            logger.warning(
                "s3q write job %s: its commit failed with an unknown outcome; its staged "
                "objects are left to the queue's collector",
                self.job,
            )
            return
        deleted = run(abort_job(self.options, self.job, self.partitions))
        logger.info("s3q write job %s aborted: %d staged object(s) deleted", self.job, deleted)
