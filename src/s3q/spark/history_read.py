"""Batch read of a queue's history: ``spark.read.format("s3q").option("history", "true")``.

One row per event (``s3q.history``), read straight from the log objects by the executors (no
writer, no snapshot). The driver lists the log objects (of every partition of a partitioned
queue, ``s3q.partitions``) and plans input partitions of consecutive ones (ranges of log
sequence numbers of one partition). Filters Spark pushes down narrow the read:

- on ``at`` (``>``, ``>=``, ``<``, ``<=``, ``=``): the driver keeps only the log objects that may
  hold events of that window, found by binary search over their stamps (``s3q.history.timeline``),
  and executors drop the events outside it; Spark evaluates these filters again.
- on ``kind`` (``=``, ``IN``): executors emit only those kinds, and read no payload bytes
  when no ``enqueued`` event is wanted.

Without ``payloads`` an executor reads only the end of each log object, where its header
lies; with it, whole log objects (and the staged or blob objects that hold other payloads).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import AsyncGenerator, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from ..errors import InvalidConfig
from ..history import log_events, timeline
from ..history.log_events import Block, Each
from ..log import ids, segment
from ..partitions import placement
from ..store import Store
from ..store.base import PARTITIONS
from .options import Options, run
from .pieces import _loop

#: log objects one input partition reads, by default (option ``objectsPerPartition``)
OBJECTS_PER_PARTITION = 64
ROWS_PER_BATCH = 65_536
READ_CONCURRENCY = 8

TIME = pa.timestamp("us", tz="UTC")
COLUMNS: list[tuple[str, pa.DataType, str]] = [
    ("seq", pa.int64(), "bigint"),
    ("op", pa.int32(), "int"),
    ("at", TIME, "timestamp"),
    ("kind", pa.string(), "string"),
    ("id", pa.string(), "string"),
    ("priority", pa.int32(), "int"),
    ("tenant", pa.string(), "string"),
    ("group", pa.string(), "string"),
    ("attempt", pa.int32(), "int"),
    ("visible_at", TIME, "timestamp"),
    ("error", pa.string(), "string"),
    ("dedup_id", pa.string(), "string"),
    ("size", pa.int64(), "bigint"),
    ("attributes", pa.map_(pa.string(), pa.string()), "map<string,string>"),
    ("partition", pa.int32(), "int"),  # the queue's partition whose log holds the event
]
PAYLOAD = ("payload", pa.binary(), "binary")

logger = logging.getLogger("s3q.spark")


def schema(payloads: bool) -> str:
    """The columns of a history read, in Spark's DDL."""
    return ", ".join(f"`{n}` {ddl}" for n, _, ddl in [*COLUMNS, *([PAYLOAD] if payloads else [])])


def arrow_schema(payloads: bool) -> pa.Schema:
    return pa.schema([(n, t) for n, t, _ in [*COLUMNS, *([PAYLOAD] if payloads else [])]])


def micros(moment: Any) -> int:
    """A pushed-down timestamp (a datetime, UTC when naive) as microseconds since the epoch."""
    if not isinstance(moment, datetime.datetime):
        raise TypeError(moment)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return int((moment - epoch) // datetime.timedelta(microseconds=1))


def _micros(at: float) -> int:
    return int(at * 1e6)  # as the ``at`` column holds it (truncated)


class Window:
    """The events wanted: a time window (microseconds, both ends inclusive) and kinds."""

    def __init__(self) -> None:
        self.low: int | None = None
        self.high: int | None = None
        self.kinds: set[str] | None = None

    def time(self, f: Filter) -> bool:
        """Narrow the window by ``f`` if it bounds ``at``; whether it did."""
        if getattr(f, "attribute", None) != ("at",) or not isinstance(
            f, GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual | EqualTo
        ):
            return False
        try:
            value = micros(f.value)
        except TypeError:
            return False
        if isinstance(f, GreaterThan | GreaterThanOrEqual | EqualTo):
            low = value + 1 if isinstance(f, GreaterThan) else value
            self.low = low if self.low is None else max(self.low, low)
        if isinstance(f, LessThan | LessThanOrEqual | EqualTo):
            high = value - 1 if isinstance(f, LessThan) else value
            self.high = high if self.high is None else min(self.high, high)
        return True

    def kind(self, f: Filter) -> bool:
        """Narrow the kinds by ``f`` if it names them; whether it did (exactly)."""
        if getattr(f, "attribute", None) != ("kind",):
            return False
        if isinstance(f, EqualTo):
            wanted = {f.value}
        elif isinstance(f, In):
            wanted = set(f.value)
        else:
            return False
        self.kinds = wanted if self.kinds is None else self.kinds & wanted
        return True

    def seconds(self) -> tuple[float | None, float | None]:
        """The window's ends in seconds, widened to whole microseconds."""
        return (
            None if self.low is None else (self.low - 1) / 1e6,
            None if self.high is None else (self.high + 1) / 1e6,
        )

    def may_admit(self, block: Block) -> bool:
        """Whether any event of ``block`` may be wanted (told row by row by :meth:`mask`)."""
        if self.kinds is not None and isinstance(block.kind, str) and block.kind not in self.kinds:
            return False
        if isinstance(block.at, Each):
            return True
        at = _micros(block.at)
        return (self.low is None or at >= self.low) and (self.high is None or at <= self.high)

    def mask(self, batch: pa.RecordBatch) -> pa.Array | None:
        """Which rows of ``batch`` are wanted; None: all of them."""
        tests = []
        if self.kinds is not None:
            tests.append(pc.is_in(batch.column("kind"), pa.array(sorted(self.kinds), pa.string())))
        at = batch.column("at").cast(pa.int64())
        if self.low is not None:
            tests.append(pc.greater_equal(at, self.low))
        if self.high is not None:
            tests.append(pc.less_equal(at, self.high))
        if not tests:
            return None
        wanted = tests[0]
        for test in tests[1:]:
            wanted = pc.and_(wanted, test)
        return wanted

    def payload_bytes(self) -> bool:
        """Whether any event wanted carries a payload."""
        return self.kinds is None or "enqueued" in self.kinds


class LogRange(InputPartition):
    """Consecutive log objects of the queue's partition ``partition`` for one task to read;
    ``strict``: one collected before it is read is a :class:`s3q.history.log_events.HistoryGap`, not
    skipped."""

    def __init__(
        self,
        index: int,
        queue: str,
        seqs: list[int],
        window: Window,
        strict: bool = False,
        partition: int = 0,
    ) -> None:
        super().__init__(index)
        self.queue, self.seqs, self.window, self.strict = queue, seqs, window, strict
        self.partition = partition


class HistoryReader(DataSourceReader):
    """The events of the log objects a queue keeps, one row each."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.payloads = flag(options, "payloads")
        self.per_partition = options.integer("objectsPerPartition", OBJECTS_PER_PARTITION)
        self.window = Window()
        self.strict = flag(options, "failOnDataLoss", default=True)
        self.planned: list[int] = []  # the log objects planned, for tests and explain

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        for f in filters:
            if self.window.kind(f):
                continue  # applied exactly on the executors
            self.window.time(f)
            yield f  # Spark checks the time bounds again (and whatever else there is)

    def partitions(self) -> list[InputPartition]:
        plan = run(_plan(self.options, self.window))
        self._check(plan)
        self.planned = [seq for _, _, seqs, _ in plan for seq in seqs]
        step = self.per_partition
        ranges = [
            (index, queue, seqs[i : i + step])
            for index, queue, seqs, _ in plan
            for i in range(0, len(seqs), step)
        ]
        return [
            LogRange(i, queue, r, self.window, self.strict, partition=index)
            for i, (index, queue, r) in enumerate(ranges)
        ] or [LogRange(0, plan[0][1], [], self.window)]

    def _check(self, plan: list[Planned]) -> None:
        """Raise :class:`HistoryGap` (log it, without ``failOnDataLoss``) if log objects among
        those the read covers were collected: the events left would tell wrong lives (an
        enqueue kept for its payload, the leases after it gone, reads as a message never
        delivered). History begins where the queue's log does: objects before the first one
        kept are no gap."""
        for index, _, _, holes in plan:
            for low, high in holes:
                gap = log_events.gap(
                    placement.url_of(self.options.url, index),
                    low,
                    high,
                    "or read a window after them (a filter on at), or set option "
                    "failOnDataLoss to false to read what is left",
                )
                if self.strict:
                    raise gap
                logger.warning("%s", gap)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, LogRange)
        if partition.seqs:
            store = self.options.open_store(partition.partition)
            yield from read_range(store, partition, self.payloads)


def wanted(options: Options) -> bool:
    """Whether the read is of the history (option ``history``), not a snapshot."""
    if (options.text("history") or "").lower() == "lives":
        raise InvalidConfig(
            "option history: each message's life is a query over the events, not a read: "
            "s3q.spark.lives(spark.read.format('s3q').option('history', 'true').load(url))"
        )
    return flag(options, "history")


def flag(options: Options, name: str, default: bool = False) -> bool:
    raw = (options.text(name) or str(default)).lower()
    if raw not in ("true", "false"):
        raise InvalidConfig(f"option {name} must be true or false, got {raw!r}")
    return raw == "true"


Planned = tuple[int, str, list[int], list[tuple[int, int]]]


async def _plan(options: Options, window: Window) -> list[Planned]:
    """For each partition of the queue with a log (partition 0 alone, for most queues): its
    number, its queue id, the log objects that may hold the events wanted, and the log
    objects between the first and the last of those that were collected (ranges)."""
    since, until = window.seconds()

    async def planned(index: int, seqs: list[int]) -> Planned:
        store = options.open_store(index)
        try:
            chosen, _ = await timeline.window(store, seqs, since, until)
            holes = log_events.missing(chosen[0], chosen[-1] + 1, seqs) if chosen else []
            return index, await log_events.queue_id(store), chosen, holes
        finally:
            await store.close()

    logs = await partition_logs(options)
    return list(await asyncio.gather(*(planned(i, seqs) for i, seqs in sorted(logs.items()))))


async def partition_logs(options: Options) -> dict[int, list[int]]:
    """The log objects of each partition of the queue with a log (partition 0 alone, for most
    queues; ``s3q.partitions``), in order, listed from the queue's prefix."""
    root = options.open_store()
    try:
        found = {0: await log_events.seqs(root)}
        for key in await root.keys(f"{PARTITIONS}/"):
            index, inner = placement.split_key(key)
            if index and (seq := segment.seq_of(inner)) is not None:
                found.setdefault(index, []).append(seq)
    finally:
        await root.close()
    return {index: sorted(seqs) for index, seqs in found.items()}


async def queue_id_of(options: Options, index: int) -> str:
    """What the message ids of the queue's partition ``index`` begin with."""
    store = options.open_store(index)
    try:
        return await log_events.queue_id(store)
    finally:
        await store.close()


def read_range(store: Store, part: LogRange, payloads: bool) -> Iterator[pa.RecordBatch]:
    """The record batches of the events of ``part``'s log objects."""
    loop = _loop()
    batches = _batches(store, part, payloads)
    try:
        while True:
            try:
                yield loop.run_until_complete(anext(batches))
            except StopAsyncIteration:
                return
    finally:
        loop.run_until_complete(batches.aclose())
        loop.run_until_complete(store.close())


async def _batches(
    store: Store, part: LogRange, payloads: bool
) -> AsyncGenerator[pa.RecordBatch, None]:
    reader = log_events.Reader(part.queue)
    window = part.window
    whole = payloads and window.payload_bytes()
    rows = Rows(payloads, window, part.partition)
    async for seq, data in log_events.objects(
        store, part.seqs, whole=whole, concurrency=READ_CONCURRENCY, strict=part.strict
    ):
        header = segment.decode(data, segment.key(seq))
        blocks = [b for b in reader.blocks(header) if window.may_admit(b)]
        if payloads:
            rows.payloads.update(await _payloads(store, header, part.queue, data, blocks, whole))
        for block in blocks:
            rows.add(block)
        if len(rows) >= ROWS_PER_BATCH:
            yield rows.batch()
    if len(rows):
        yield rows.batch()


async def _payloads(
    store: Store, header: segment.Header, queue: str, data: bytes, blocks: list[Block], whole: bool
) -> dict[str, bytes]:
    """The payloads of the messages ``blocks`` enqueued, by id (missing: collected)."""
    enqueued = {mid for b in blocks if b.kind == "enqueued" for mid in b.ids if mid}
    if not enqueued or not whole:
        return {}
    return await log_events.payloads(store, header, queue, data, enqueued)


#: a value repeated this many times or more is made by Arrow, not gathered in a list
REPEATED = 256
_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)


class Column:
    """One column of the record batch being built, from the fields of blocks (``s3q.history``):
    values of their own gathered in a list, long repeats and ranges of ids made by Arrow.
    ``seconds``: a time column, its values seconds since the epoch."""

    def __init__(self, kind: pa.DataType, seconds: bool = False) -> None:
        self.type, self.seconds = kind, seconds
        self.chunks: list[pa.Array] = []
        self.values: list[Any] = []

    def add(self, value: Any, n: int) -> None:
        """``value`` for the next ``n`` rows (an ``Each``: a value each)."""
        if isinstance(value, Each):
            self.values += value
        elif n < REPEATED:
            self.values += [value] * n
        else:
            self.put(self._repeat(value, n))

    def add_ids(self, made: Sequence[str | None]) -> None:
        span = made.span() if isinstance(made, ids.Ids) else None
        if span is None or len(made) < REPEATED:
            self.values += made
        else:
            self.put(_id_array(*span))

    def put(self, array: pa.Array) -> None:
        self._gather()
        self.chunks.append(array)

    def finish(self) -> pa.Array:
        self._gather()
        chunks, self.chunks = self.chunks, []
        if len(chunks) == 1:
            return chunks[0]
        return pa.concat_arrays(chunks) if chunks else pa.array([], self.type)

    def _gather(self) -> None:
        if self.values:
            values, self.values = self.values, []
            if self.seconds:
                self.chunks.append(_times(pa.array(values, pa.float64())))
            elif values.count(None) == len(values):
                self.chunks.append(pa.nulls(len(values), self.type))
            else:
                self.chunks.append(pa.array(values, self.type))

    def _repeat(self, value: Any, n: int) -> pa.Array:
        if value is None:
            return pa.nulls(n, self.type)
        if self.seconds:
            return pa.repeat(pa.scalar(_micros(value), pa.int64()), n).cast(TIME)
        return pa.repeat(pa.scalar(value, self.type), n)


def _times(seconds: pa.Array) -> pa.Array:
    """Seconds since the epoch (float64) as the ``at`` column holds them (truncated)."""
    return pc.cast(pc.multiply(seconds, 1e6), pa.int64(), safe=False).cast(TIME)


def _id_array(prefix: str, places: range) -> pa.Array:
    """The ids ``prefix`` followed by each place in 8 hexadecimal digits (``ids.make``), made
    as Arrow's buffers: fixed-width strings."""
    head = np.frombuffer(prefix.encode(), np.uint8)
    n, width = len(places), len(head) + ids.PLACE_DIGITS
    chars = np.empty((n, width), np.uint8)
    chars[:, : len(head)] = head
    numbers = np.arange(places.start, places.stop, dtype=np.int64)
    for digit in range(ids.PLACE_DIGITS):
        chars[:, width - 1 - digit] = _HEX[(numbers >> (4 * digit)) & 15]
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(chars))


class Rows:
    """Blocks of events gathered into the columns of one record batch, those outside the
    window dropped."""

    def __init__(self, payloads: bool, window: Window, partition: int = 0) -> None:
        self.with_payloads, self.window, self.partition = payloads, window, partition
        self.payloads: dict[str, bytes] = {}
        self.count = 0
        self.columns = {
            name: Column(kind, seconds=kind == TIME)
            for name, kind, _ in [*COLUMNS, *([PAYLOAD] if payloads else [])]
        }
        self.fields = [name for name, _, _ in COLUMNS[5:] if name != "partition"]

    def __len__(self) -> int:
        return self.count

    def add(self, block: Block) -> None:
        n, columns = block.n, self.columns
        self.count += n
        columns["seq"].add(block.seq, n)
        columns["op"].add(block.op, n)
        columns["at"].add(block.at, n)
        columns["kind"].add(block.kind, n)
        columns["id"].add_ids(block.ids)
        columns["partition"].add(self.partition, n)
        fields = block.fields
        for name in self.fields:
            columns[name].add(fields.get(name), n)
        if self.with_payloads:
            found = self.payloads
            if block.kind == "enqueued":
                columns["payload"].add(
                    Each(found.get(mid) if mid else None for mid in block.ids), n
                )
            else:
                columns["payload"].add(None, n)

    def batch(self) -> pa.RecordBatch:
        self.count, self.payloads = 0, {}
        arrays = [column.finish() for column in self.columns.values()]
        batch = pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(self.with_payloads))
        wanted = self.window.mask(batch)
        return batch if wanted is None else batch.filter(wanted)
