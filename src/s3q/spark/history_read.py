"""Batch read of a queue's history: ``spark.read.format("s3q").option("history", "true")``.

One row per event (``s3q.history``), read straight from the log objects by the executors (no
writer, no snapshot). The driver lists the log objects and plans input partitions of
consecutive ones (ranges of log sequence numbers). Filters Spark pushes down narrow the read:

- on ``at`` (``>``, ``>=``, ``<``, ``<=``, ``=``): the driver keeps only the log objects that may
  hold events of that window, found by binary search over their stamps (``s3q.timeline``),
  and executors drop the events outside it; Spark evaluates these filters again.
- on ``kind`` (``=``, ``IN``): executors emit only those kinds, and read no payload bytes
  when no ``enqueued`` event is wanted.

Without ``payloads`` an executor reads only the end of each log object, where its header
lies; with it, whole log objects (and the staged or blob objects that hold other payloads).
"""

from __future__ import annotations

import datetime
from collections.abc import AsyncGenerator, Iterable, Iterator
from typing import Any

import pyarrow as pa
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

from .. import history, log, timeline
from ..errors import InvalidConfig
from ..history import Event
from ..store import Store
from .options import Options, run
from .pieces import _loop, _optional

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
]
PAYLOAD = ("payload", pa.binary(), "binary")


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

    def admits(self, e: Event) -> bool:
        if self.kinds is not None and e.kind not in self.kinds:
            return False
        if self.low is None and self.high is None:
            return True
        at = _micros(e.at)
        return (self.low is None or at >= self.low) and (self.high is None or at <= self.high)

    def payload_bytes(self) -> bool:
        """Whether any event wanted carries a payload."""
        return self.kinds is None or "enqueued" in self.kinds


class LogRange(InputPartition):
    """Consecutive log objects for one task to read."""

    def __init__(self, index: int, queue: str, seqs: list[int], window: Window) -> None:
        super().__init__(index)
        self.queue, self.seqs, self.window = queue, seqs, window


class HistoryReader(DataSourceReader):
    """The events of the log objects a queue keeps, one row each."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.payloads = flag(options, "payloads")
        self.per_partition = options.integer("objectsPerPartition", OBJECTS_PER_PARTITION)
        self.window = Window()
        self.planned: list[int] = []  # the log objects planned, for tests and explain

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        for f in filters:
            if self.window.kind(f):
                continue  # applied exactly on the executors
            self.window.time(f)
            yield f  # Spark checks the time bounds again (and whatever else there is)

    def partitions(self) -> list[InputPartition]:
        queue, seqs = run(_plan(self.options, self.window))
        self.planned = seqs
        step = self.per_partition
        ranges = [seqs[i : i + step] for i in range(0, len(seqs), step)]
        return [LogRange(i, queue, r, self.window) for i, r in enumerate(ranges)] or [
            LogRange(0, queue, [], self.window)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, LogRange)
        if partition.seqs:
            yield from read_range(self.options.open_store(), partition, self.payloads)


def wanted(options: Options) -> bool:
    """Whether the read is of the history (option ``history``), not a snapshot."""
    if (options.text("history") or "").lower() == "lives":
        raise InvalidConfig(
            "option history: each message's life is a query over the events, not a read: "
            "s3q.spark.lives(spark.read.format('s3q').option('history', 'true').load(url))"
        )
    return flag(options, "history")


def flag(options: Options, name: str) -> bool:
    raw = (options.text(name) or "false").lower()
    if raw not in ("true", "false"):
        raise InvalidConfig(f"option {name} must be true or false, got {raw!r}")
    return raw == "true"


async def _plan(options: Options, window: Window) -> tuple[str, list[int]]:
    """The queue's id and the log objects that may hold the events wanted."""
    store = options.open_store()
    try:
        queue = await history.queue_id(store)
        seqs = await history.seqs(store)
        since, until = window.seconds()
        chosen, _ = await timeline.window(store, seqs, since, until)
        return queue, chosen
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
    reader = history.Reader(part.queue)
    window = part.window
    whole = payloads and window.payload_bytes()
    rows = Rows(payloads)
    async for seq, data in history.objects(
        store, part.seqs, whole=whole, concurrency=READ_CONCURRENCY
    ):
        header = log.decode(data, log.key(seq))
        wanted = [e for e in reader.events(header) if window.admits(e)]
        if payloads:
            rows.payloads.update(await _payloads(store, header, part.queue, data, wanted, whole))
        rows.add(wanted)
        if len(rows) >= ROWS_PER_BATCH:
            yield rows.batch()
    if len(rows):
        yield rows.batch()


async def _payloads(
    store: Store, header: log.Header, queue: str, data: bytes, events: list[Event], whole: bool
) -> dict[str, bytes]:
    """The payloads of the messages ``events`` enqueued, by id (missing: collected)."""
    enqueued = {e.id for e in events if e.kind == "enqueued" and e.id}
    if not enqueued or not whole:
        return {}
    return await history.payloads(store, header, queue, data, enqueued)


class Rows:
    """Events gathered into the columns of one record batch."""

    def __init__(self, payloads: bool) -> None:
        self.with_payloads = payloads
        self.events: list[Event] = []
        self.payloads: dict[str, bytes] = {}

    def __len__(self) -> int:
        return len(self.events)

    def add(self, events: list[Event]) -> None:
        self.events.extend(events)

    def batch(self) -> pa.RecordBatch:
        events, self.events = self.events, []
        payloads, self.payloads = self.payloads, {}
        columns = [
            pa.array([e.seq for e in events], pa.int64()),
            pa.array([e.op for e in events], pa.int32()),
            pa.array([_micros(e.at) for e in events], TIME),
            pa.array([e.kind for e in events], pa.string()),
            _optional([e.id for e in events], pa.string()),
            _optional([e.priority for e in events], pa.int32()),
            _optional([e.tenant for e in events], pa.string()),
            _optional([e.group for e in events], pa.string()),
            _optional([e.attempt for e in events], pa.int32()),
            _optional(
                [None if e.visible_at is None else _micros(e.visible_at) for e in events], TIME
            ),
            _optional([e.error for e in events], pa.string()),
            _optional([e.dedup_id for e in events], pa.string()),
            _optional([e.size for e in events], pa.int64()),
            _optional(
                [None if e.attributes is None else list(e.attributes.items()) for e in events],
                COLUMNS[-1][1],
            ),
        ]
        if self.with_payloads:
            columns.append(
                _optional(
                    [payloads.get(e.id) if e.kind == "enqueued" and e.id else None for e in events],
                    pa.binary(),
                )
            )
        return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(self.with_payloads))
