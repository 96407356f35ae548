"""History as a stream: ``spark.readStream.format("s3q").option("history", "true")``.

Tails a queue's log: each micro-batch is the events (``s3q.history``) of a range of log objects,
read by the executors straight from the store as in the batch read (``history_read``). No
writer is involved and nothing is written: the source keeps no state of its own.

**Offsets** are log positions: ``{"seq": n}``, the next log object to read. A batch from
``{"seq": a}`` to ``{"seq": b}`` is the events of log objects ``a`` to ``b - 1``, so consecutive
batches meet exactly, and a batch Spark re-runs after a restart (from its offset log) reads the
same objects, hence the same events. With a sink that writes exactly once (the file sink,
Delta, ...) every event lands once. The first offset is ``{"seq": 0}`` (option
``startingOffsets``, by default ``earliest``: whatever log the queue keeps) or the log position
given. ``latestOffset`` is one past the newest log object (the writer writes one log object at
a time, in order, so every object before a listed one was written), at most
``maxObjectsPerBatch`` objects on. Under ``trigger(availableNow=True)`` the query reads up to
the newest log object when it started, then stops.

**Garbage collection** deletes log objects as the queue's ``history_retention`` allows, whether
or not a stream has read them: a stream that falls further behind than that finds objects of
its next batch gone. That is a :class:`s3q.history.HistoryGap` naming the missing log objects
(``failOnDataLoss``, true by default, as Kafka's source has it); with ``failOnDataLoss`` false
the stream logs the gap and goes on past it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)

from .. import history
from ..errors import InvalidConfig
from ..store import Store
from .history_read import OBJECTS_PER_PARTITION, LogRange, Window, flag, read_range
from .options import Options, run

logger = logging.getLogger("s3q.spark")

Offset = dict[str, int]


class HistoryStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The events of each new range of log objects, one micro-batch per range."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.payloads = flag(options, "payloads")
        self.strict = flag(options, "failOnDataLoss", default=True)
        self.per_partition = options.integer("objectsPerPartition", OBJECTS_PER_PARTITION)
        most = options.text("maxObjectsPerBatch")
        self.most = None if most is None else options.integer("maxObjectsPerBatch", 0)
        self.start = starting(options)
        self._available_now = False
        self._until: int | None = None  # availableNow: the newest log object when it began
        self._queue: str | None = None

    # -- Spark's calls -----------------------------------------------------------------------------

    def initialOffset(self) -> Offset:
        return {"seq": self.start}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable() if self.most is None else ReadMaxFiles(self.most)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = True  # the newest log object is found by the first listing

    def latestOffset(self, start: Offset, limit: ReadLimit) -> Offset:
        first = position(start)
        found = run(self._list(first))
        if self._available_now:
            if self._until is None:
                self._until = found[-1] if found else first - 1
            found = [s for s in found if s <= self._until]
        if not found:
            return start
        self._check(first, found[-1] + 1, found)
        if isinstance(limit, ReadMaxFiles):  # log objects, the source's "files"
            found = found[: limit.max_files]
        return {"seq": found[-1] + 1}

    def partitions(self, start: Offset, end: Offset) -> list[InputPartition]:
        first, stop = position(start), position(end)
        found = run(self._list(first, stop - 1))
        self._check(first, stop, found)
        queue = self._queue_id()
        step, window = self.per_partition, Window()
        ranges = [found[i : i + step] for i in range(0, len(found), step)] or [[]]
        return [LogRange(i, queue, r, window, strict=self.strict) for i, r in enumerate(ranges)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, LogRange)
        if partition.seqs:
            yield from read_range(self.options.open_store(), partition, self.payloads)

    def commit(self, end: Offset) -> None:
        """Nothing to do: the source holds nothing back (garbage collection is the queue's)."""

    # -- the log -----------------------------------------------------------------------------------

    async def _list(self, first: int, last: int | None = None) -> list[int]:
        store = self.options.open_store()
        try:
            return await history.seqs(store, first, last)
        finally:
            await store.close()

    def _check(self, first: int, stop: int, found: list[int]) -> None:
        """Raise :class:`HistoryGap` (log it, without ``failOnDataLoss``) if any log object
        from ``first`` to ``stop - 1`` is missing from ``found``, the objects listed there:
        the writer wrote each of them, in order, so the collector took it. From the earliest
        (``first`` 0), whatever the queue keeps is the history."""
        if first == 0:
            return
        for low, high in history.missing(first, stop, found):
            gap = self._gap(low, high)
            if self.strict:
                raise gap
            logger.warning("%s", gap)

    def _gap(self, first: int, last: int) -> history.HistoryGap:
        return history.gap(
            self.options.url,
            first,
            last,
            "or set option failOnDataLoss to false to go on past the gap",
        )

    def _queue_id(self) -> str:
        if self._queue is None:
            self._queue = run(_queue_id(self.options.open_store()))
        return self._queue


async def _queue_id(store: Store) -> str:
    try:
        return await history.queue_id(store)
    finally:
        await store.close()


def position(offset: Offset) -> int:
    """The log position an offset holds (Spark hands them back as parsed JSON)."""
    seq = offset.get("seq") if isinstance(offset, dict) else None
    if not isinstance(seq, int) or seq < 0:
        raise InvalidConfig(f"not an offset of the s3q history stream: {offset!r}")
    return seq


def starting(options: Options) -> int:
    """The first log position to read (option ``startingOffsets``): 0 for the earliest kept."""
    raw = (options.text("startingOffsets") or "earliest").strip().lower()
    if raw == "earliest":
        return 0
    try:
        seq = int(raw)
    except ValueError:
        seq = 0
    if seq < 1:
        raise InvalidConfig(
            "option startingOffsets must be 'earliest' or a log position (an integer from 1; "
            f"stats().log_seq + 1 starts after the log written so far), got {raw!r}"
        )
    return seq
