"""Streaming write: each micro-batch enqueued once, however often Spark replays it.

Executors stage payloads as a batch write does. The driver commits them with the token
``<sinkId>:<batchId>`` in the same log object; the queue remembers recent tokens (in its log
and checkpoints), so a batch Spark replays after a restart enqueues nothing twice, whatever
the dedup window. ``sinkId`` defaults to the query's checkpoint location.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from ..errors import InvalidConfig
from .options import Options, run
from .stage import (
    NOT_COMMITTED,
    Staged,
    commit_staged,
    delete_staged,
    mark_committing,
    partition_count,
    stage_all,
    staged_keys,
    was_committing,
)

logger = logging.getLogger("s3q.spark")

BATCH_ID = "streaming.sql.batchId"  # the local property Spark sets on a micro-batch's tasks


class StreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("s3q")``: each micro-batch in one commit, exactly once."""

    def __init__(self, options: Options) -> None:
        self.options = options
        sink = options.text("sinkId") or options.text("checkpointLocation")
        if not sink:
            raise InvalidConfig(
                "streaming writes to s3q need option sinkId (or a checkpointLocation): "
                "it names the query, so a replayed batch is recognised"
            )
        self.sink = sink
        self.tag = hashlib.sha256(sink.encode()).hexdigest()[:16]
        self.partitions = run(partition_count(options))  # the queue's, where tasks stage

    def _job(self, batch_id: int | str) -> str:
        return f"stream-{self.tag}-{batch_id}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Staged:
        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        batch_id = (context.getLocalProperty(BATCH_ID) if context is not None else None) or "x"
        origin = f"partition {partition} of batch {batch_id}"
        return stage_all(
            self.options, self._job(batch_id), origin, iterator, False, self.partitions, partition
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        objects = [o for m in messages if isinstance(m, Staged) for o in m.objects]
        job = self._job(batchId)
        marker = run(mark_committing(self.options, job))
        try:
            ids = run(commit_staged(self.options, objects, f"{self.sink}:{batchId}"))
            committed = ids is not None
        except NOT_COMMITTED:  # certain: tidy up now
            run(delete_staged(self.options, None, [*staged_keys(messages), marker]))
            raise
        if not committed:  # a replay: what this run staged is not needed
            logger.info("s3q sink %s: batch %d was committed before", self.sink, batchId)
        keys = [] if committed else [o.key for o in objects]
        run(delete_staged(self.options, None, [*keys, marker]))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if run(was_committing(self.options, self._job(batchId))):
            logger.warning(
                "s3q sink %s: the commit of batch %d failed with an unknown outcome; its "
                "staged objects are left to the queue's collector",
                self.sink,
                batchId,
            )
            return
        # Only what this run's tasks reported: an earlier, committed run of the same batch
        # staged under the same prefix. (A failed task deletes its own objects.)
        run(delete_staged(self.options, None, staged_keys(messages)))
