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

A partitioned queue (``s3q.partitions``) has a log per partition, and an offset a position in
each: ``{"seq": n0, "partitions": [n1, n2, ...]}`` (partition 0's stays ``seq``: a queue of one
partition has the offsets it always had). Each partition is tailed as above, a
batch reading each one's range; ``maxObjectsPerBatch`` counts each partition's objects.

**Garbage collection** deletes log objects as the queue's ``history_retention`` allows, whether
or not a stream has read them: a stream that falls further behind than that finds objects of
its next batch gone. That is a
:class:`s3q.history.log_events.HistoryGap` naming the missing log objects
(``failOnDataLoss``, true by default, as Kafka's source has it); with ``failOnDataLoss`` false
the stream logs the gap and goes on past it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)

from ..errors import InvalidConfig
from ..history import log_events
from ..partitions import placement
from .history_read import (
    OBJECTS_PER_PARTITION,
    LogRange,
    Window,
    flag,
    partition_logs,
    queue_id_of,
    read_range,
)
from .options import Options, run

logger = logging.getLogger("s3q.spark")

Offset = dict[str, Any]


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
        # availableNow: each partition's newest log object when it began
        self._until: list[int] | None = None
        self._partitions: int | None = None
        self._queues: list[str] | None = None

    # -- Spark's calls -----------------------------------------------------------------------------

    def initialOffset(self) -> Offset:
        count = self._count()
        if count > 1 and self.start:
            raise InvalidConfig(
                "option startingOffsets: a log position names one log, and this queue has "
                f"{count} partitions (one each); read from 'earliest'"
            )
        return offset([self.start] * count)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable() if self.most is None else ReadMaxFiles(self.most)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = True  # the newest log objects are found by the first listing

    def latestOffset(self, start: Offset, limit: ReadLimit) -> Offset:
        firsts = positions(start, self._count())
        found = run(self._list(firsts))
        if self._available_now and self._until is None:
            newest = zip(firsts, found, strict=True)
            self._until = [seqs[-1] if seqs else first - 1 for first, seqs in newest]
        ends: list[int] = []
        for index, (first, seqs) in enumerate(zip(firsts, found, strict=True)):
            if self._until is not None:
                seqs = [s for s in seqs if s <= self._until[index]]
            if not seqs:
                ends.append(first)
                continue
            self._check(index, first, seqs[-1] + 1, seqs)
            if isinstance(limit, ReadMaxFiles):  # log objects, the source's "files"
                seqs = seqs[: limit.max_files]
            ends.append(seqs[-1] + 1)
        return offset(ends)

    def partitions(self, start: Offset, end: Offset) -> list[InputPartition]:
        count = self._count()
        firsts, stops = positions(start, count), positions(end, count)
        found = run(self._list(firsts, [stop - 1 for stop in stops]))
        queues = self._queue_ids()
        step, window = self.per_partition, Window()
        out: list[InputPartition] = []
        for index, (first, stop, seqs) in enumerate(zip(firsts, stops, found, strict=True)):
            self._check(index, first, stop, seqs)
            for i in range(0, len(seqs), step):
                out.append(
                    LogRange(
                        len(out), queues[index], seqs[i : i + step], window, self.strict, index
                    )
                )
        return out or [LogRange(0, queues[0], [], window, strict=self.strict)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, LogRange)
        if partition.seqs:
            store = self.options.open_store(partition.partition)
            yield from read_range(store, partition, self.payloads)

    def commit(self, end: Offset) -> None:
        """Nothing to do: the source holds nothing back (garbage collection is the queue's)."""

    # -- the logs ----------------------------------------------------------------------------------

    def _count(self) -> int:
        """How many partitions (logs) the queue has: found once, by listing."""
        if self._partitions is None:
            self._partitions = run(_partition_count(self.options))
        return self._partitions

    async def _list(self, firsts: list[int], lasts: list[int] | None = None) -> list[list[int]]:
        """The log objects of each partition from ``firsts[i]`` (to ``lasts[i]``)."""

        async def listed(index: int) -> list[int]:
            store = self.options.open_store(index)
            try:
                return await log_events.seqs(store, firsts[index], lasts[index] if lasts else None)
            finally:
                await store.close()

        return list(await asyncio.gather(*(listed(i) for i in range(len(firsts)))))

    def _check(self, index: int, first: int, stop: int, found: list[int]) -> None:
        """Raise :class:`HistoryGap` (log it, without ``failOnDataLoss``) if any log object
        of partition ``index`` from ``first`` to ``stop - 1`` is missing from ``found``, the
        objects listed there: the writer wrote each of them, in order, so the collector took
        it. From the earliest (``first`` 0), whatever the queue keeps is the history."""
        if first == 0:
            return
        for low, high in log_events.missing(first, stop, found):
            gap = log_events.gap(
                placement.url_of(self.options.url, index),
                low,
                high,
                "or set option failOnDataLoss to false to go on past the gap",
            )
            if self.strict:
                raise gap
            logger.warning("%s", gap)

    def _queue_ids(self) -> list[str]:
        if self._queues is None:
            self._queues = run(_queue_ids(self.options, self._count()))
        return self._queues


async def _partition_count(options: Options) -> int:
    """1 + the highest number of a partition with a log."""
    return 1 + max(await partition_logs(options))


async def _queue_ids(options: Options, count: int) -> list[str]:
    return list(await asyncio.gather(*(queue_id_of(options, i) for i in range(count))))


def offset(seqs: list[int]) -> Offset:
    """The offset of log positions ``seqs``, one per partition."""
    return {"seq": seqs[0]} if len(seqs) == 1 else {"seq": seqs[0], "partitions": seqs[1:]}


def positions(offset: Offset, count: int) -> list[int]:
    """The log position of each of ``count`` partitions an offset holds (Spark hands them back
    as parsed JSON); partitions it does not name start from the earliest."""
    seq = offset.get("seq") if isinstance(offset, dict) else None
    rest = offset.get("partitions", []) if isinstance(offset, dict) else None
    if (
        not isinstance(seq, int)
        or seq < 0
        or not isinstance(rest, list)
        or not all(isinstance(n, int) and n >= 0 for n in rest)
        or len(rest) >= count
    ):
        raise InvalidConfig(f"not an offset of the s3q history stream: {offset!r}")
    return [seq, *rest, *[0] * (count - 1 - len(rest))]


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
