"""Executors' side of a write: payloads of Arrow batches into staged objects, rows checked.

Each task concatenates its payloads into objects of about ``stageBytes`` (one PUT each, not one
per row) and describes the messages in them (``s3q.log.staging.StagedObject``); the driver commits
them all at once. In a queue of several partitions (``s3q.partitions``) a task stages each row
under the partition it goes to (``routed``): its group's or dedup id's, else the task's own, so
the tasks of a job spread over the partitions. Bad rows fail the task with an error naming the
row, before anything is committed; a failing task deletes what it staged.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from .. import snapshot
from ..api import open_async
from ..config import QueueConfig
from ..errors import (
    InvalidArgument,
    InvalidPriority,
    MessageTooLarge,
    QueueFull,
    QueueLocked,
    S3QError,
)
from ..log.staging import StagedObject, job_prefix, object_key
from ..partitions.placement import key_of, placed, split_key
from ..store import Store, queue_name
from .options import Options

STAGE_BYTES = 64 * 1024 * 1024
COLUMNS = ("payload", "priority", "delay", "group", "dedup_id", "attributes", "tenant")
DEFAULT_MAX_SIZE = QueueConfig().max_message_size


@dataclass
class Staged(WriterCommitMessage):
    """What one task staged."""

    objects: list[StagedObject] = field(default_factory=list)


class Stager:
    """Stages the rows of one task for one partition of the queue: ``add`` batches, then
    ``flush`` and ``close`` (or ``discard``)."""

    def __init__(
        self, options: Options, job: str, origin: str, watch_abort: bool, partition: int = 0
    ) -> None:
        self.store: Store = options.open_store(partition)
        self.watch_abort = watch_abort
        self.job, self.origin, self.partition = job, origin, partition
        self._numbers: np.ndarray | None = None  # the rows of the batch being added, in the task
        self.limit = options.integer("stageBytes", STAGE_BYTES)
        self.max_size = options.integer("maxMessageSize", DEFAULT_MAX_SIZE)
        self.loop = asyncio.new_event_loop()
        self.staged: list[StagedObject] = []
        self.rows = 0  # rows seen by this task so far
        self._reset()

    def _reset(self) -> None:
        self._chunks: list[Any] = []
        self._size = 0
        self._first = self.rows
        self._task_rows: list[int] | None = None  # (rows not following on: see ``add``)
        self._columns: dict[str, list[Any]] = {c: [] for c in ("offsets", "sizes", *COLUMNS[1:])}
        self._present: set[str] = set()

    def add(self, batch: pa.RecordBatch, numbers: np.ndarray | None = None) -> None:
        """Check and append one batch (``numbers``: the task's number of each of its rows, if
        it is a part of the task's); stage an object whenever enough bytes gathered."""
        self._numbers = numbers
        if numbers is not None:
            if self._task_rows is None:
                self._task_rows = []
            self._task_rows.extend(numbers.tolist())
        names = set(batch.schema.names)
        if "payload" not in names:
            raise InvalidArgument(
                f"the DataFrame written to s3q needs a 'payload' column; it has {sorted(names)}"
            )
        unknown = names - set(COLUMNS)
        if unknown:
            raise InvalidArgument(
                f"unknown column(s) {sorted(unknown)} written to s3q: use {', '.join(COLUMNS)}"
            )
        n = batch.num_rows
        if n == 0:
            return
        data, starts, sizes = self._payloads(batch.column("payload"))
        columns = self._columns
        columns["offsets"].extend((starts + self._size).tolist())
        columns["sizes"].extend(sizes.tolist())
        if "priority" in names:
            columns["priority"].extend(self._priorities(batch.column("priority")))
            self._present.add("priority")
        else:
            columns["priority"].extend([0] * n)
        if "delay" in names:
            columns["delay"].extend(self._delays(batch.column("delay")))
            self._present.add("delay")
        else:
            columns["delay"].extend([0.0] * n)
        for name in ("group", "dedup_id", "tenant"):
            values = batch.column(name).to_pylist() if name in names else [None] * n
            columns[name].extend(values)
            self._present.update([name] if name in names else [])
        if "attributes" in names:
            raw = batch.column("attributes").to_pylist()
            columns["attributes"].extend(None if a is None else dict(a) for a in raw)
            self._present.add("attributes")
        else:
            columns["attributes"].extend([None] * n)
        self._chunks.append(data)
        self._size += len(data)
        self.rows += n
        if self._size >= self.limit:
            self._flush()

    def _row(self, index: int) -> str:
        number = self.rows + index if self._numbers is None else int(self._numbers[index])
        return f"row {number} of {self.origin}"

    def _payloads(self, column: pa.Array) -> tuple[pa.Buffer, np.ndarray, np.ndarray]:
        """The payload bytes of a binary or string column, back to back, with each one's start
        (relative to them) and size; no copy."""
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        kind = column.type
        if pa.types.is_string(kind):
            column = column.view(pa.binary())
        elif pa.types.is_large_string(kind):
            column = column.view(pa.large_binary())
        elif not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
            raise InvalidArgument(f"column payload must be binary or string, not {kind}")
        if column.null_count:
            first = column.is_null().to_numpy(zero_copy_only=False).argmax()
            raise InvalidArgument(f"{self._row(int(first))}: payload is null")
        width = np.int64 if pa.types.is_large_binary(column.type) else np.int32
        _, offsets_buffer, data_buffer = column.buffers()
        bounds = np.frombuffer(offsets_buffer, dtype=width)[
            column.offset : column.offset + len(column) + 1
        ].astype(np.int64)
        sizes = np.diff(bounds)
        too_big = np.flatnonzero(sizes > self.max_size)
        if too_big.size:
            i = int(too_big[0])
            raise MessageTooLarge(
                f"{self._row(i)}: payload of {int(sizes[i])} bytes exceeds max_message_size "
                f"({self.max_size} bytes)"
            )
        data = data_buffer.slice(int(bounds[0]), int(bounds[-1] - bounds[0]))
        return data, bounds[:-1] - bounds[0], sizes

    def _priorities(self, column: pa.Array) -> list[int]:
        if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
            raise InvalidPriority(f"column priority must hold integers, not {column.type}")
        values = column.to_numpy(zero_copy_only=False)
        nulls = np.asarray(column.is_null().to_numpy(zero_copy_only=False))
        values = np.where(nulls, 0, values)
        bad = np.flatnonzero((values < 0) | (values > 255) | (values != np.floor(values)))
        if bad.size:
            i = int(bad[0])
            value = values[i].item()
            raise InvalidPriority(
                f"{self._row(i)}: priority must be an integer from 0 to 255, got {value!r}"
            )
        return [int(v) for v in values.astype(np.int64).tolist()]

    def _delays(self, column: pa.Array) -> list[float]:
        if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
            raise InvalidArgument(f"column delay must hold numbers of seconds, not {column.type}")
        values = column.to_numpy(zero_copy_only=False).astype(np.float64)
        values = np.where(np.isnan(values), 0.0, values)  # nulls come as NaN: no delay
        bad = np.flatnonzero(~np.isfinite(values) | (values < 0))
        if bad.size:
            i = int(bad[0])
            value = float(values[i])
            raise InvalidArgument(
                f"{self._row(i)}: delay must be a finite number of seconds >= 0, got {value}"
            )
        return values.tolist()  # type: ignore[no-any-return]

    def _flush(self) -> None:
        if not self._columns["offsets"]:
            return
        key = object_key(self.job, self.origin.replace(" ", ""))
        body = b"".join(memoryview(c) for c in self._chunks)
        self.loop.run_until_complete(self._put_unless_aborted(key, body))
        columns, present = self._columns, self._present
        self.staged.append(
            StagedObject(
                key=key_of(self.partition, key),
                size=len(body),
                offsets=columns["offsets"],
                sizes=columns["sizes"],
                priorities=columns["priority"] if "priority" in present else None,
                delays=columns["delay"] if "delay" in present else None,
                groups=columns["group"] if "group" in present else None,
                dedup_ids=columns["dedup_id"] if "dedup_id" in present else None,
                attributes=columns["attributes"] if "attributes" in present else None,
                tenants=columns["tenant"] if "tenant" in present else None,
                origin=self.origin,
                first_row=self._task_rows[0] if self._task_rows else self._first,
                rows=self._task_rows,
            )
        )
        self._reset()

    async def _put_unless_aborted(self, key: str, body: bytes) -> None:
        """Stage ``key``, unless the job was aborted before or while it was written: a task
        still running when the driver aborts must not leave objects behind."""
        if self.watch_abort and await _aborted(self.store, self.job):
            raise JobAborted(f"s3q write job {self.job} was aborted")
        await self.store.put(key, body)
        if self.watch_abort and await _aborted(self.store, self.job):
            await self.store.delete(key)
            raise JobAborted(f"s3q write job {self.job} was aborted")

    def flush(self) -> None:
        """Stage what is left."""
        self._flush()

    def discard(self) -> None:
        """Delete what this task staged (it failed), and close."""

        async def delete_all() -> None:
            await asyncio.gather(*(self.store.delete(split_key(o.key)[1]) for o in self.staged))

        with contextlib.suppress(S3QError):
            self.loop.run_until_complete(delete_all())
        self.close()

    def close(self) -> None:
        if not self.loop.is_closed():
            self.loop.run_until_complete(self.store.close())
            self.loop.close()


def stage_all(
    options: Options,
    job: str,
    origin: str,
    batches: Iterable[pa.RecordBatch],
    watch_abort: bool = False,
    partitions: int = 1,
    turn: int = 0,
) -> Staged:
    """Stage every batch of one task (the ``turn``-th) for a queue of ``partitions``; on any
    failure delete what was staged, and re-raise. ``watch_abort``: stop (and delete) once the
    job's abort marker exists."""
    stagers: dict[int, Stager] = {}
    try:
        first = 0
        for batch in batches:
            for index, part, numbers in routed(batch, partitions, turn, first):
                if index not in stagers:
                    stagers[index] = Stager(options, job, origin, watch_abort, index)
                stagers[index].add(part, numbers)
            first += batch.num_rows
        for stager in stagers.values():
            stager.flush()
    except BaseException:
        for stager in stagers.values():
            stager.discard()
        raise
    for stager in stagers.values():
        stager.close()
    return Staged([obj for stager in stagers.values() for obj in stager.staged])


def routed(
    batch: pa.RecordBatch, partitions: int, turn: int, first: int
) -> Iterator[tuple[int, pa.RecordBatch, np.ndarray | None]]:
    """``batch`` (its rows numbered from ``first``) split by the partition each row goes to,
    with the rows' numbers (None: the batch whole): a row with a group or dedup id to that key's
    (``s3q.partitions.placement.placed``), the others to the ``turn``-th."""
    n, names = batch.num_rows, set(batch.schema.names)
    mine = turn % partitions
    if partitions == 1 or not names & {"group", "dedup_id"}:
        yield mine, batch, None  # (the rows follow on: the stager numbers them)
        return
    numbers = np.arange(first, first + n)
    groups = batch.column("group").to_pylist() if "group" in names else [None] * n
    dedups = batch.column("dedup_id").to_pylist() if "dedup_id" in names else [None] * n
    where = np.fromiter(
        (
            mine if (index := placed(group, dedup_id, partitions)) is None else index
            for group, dedup_id in zip(groups, dedups, strict=True)
        ),
        dtype=np.int64,
        count=n,
    )
    for index in np.unique(where).tolist():
        rows = np.flatnonzero(where == index)
        yield index, batch if rows.size == n else batch.take(pa.array(rows)), numbers[rows]


async def partition_count(options: Options) -> int:
    """How many partitions the queue has (1 for a queue not made yet): the driver asks once
    per job, for its tasks to stage each row where it goes."""
    broker = options.text("broker")
    if broker:
        from ..client import connect_async  # needs the client extra: only through a broker

        async with connect_async(broker, token=options.text("token")) as client:
            stats = await client.queue(queue_name(options.url)).stats()
        return max(1, len(stats.partitions))
    store = options.open_store()
    try:
        loaded = await snapshot.load(store)
    finally:
        await store.close()
    count = loaded.state.settings.get("partitions", 1)
    return count if isinstance(count, int) else 1


async def delete_staged(
    options: Options, job: str | None, extra: Iterable[str] = (), partitions: int = 1
) -> int:
    """Delete the ``extra`` staged objects (keys from the queue's URL) and, if ``job`` is
    given, every one of it in each of the queue's ``partitions``: after an abort."""
    store = options.open_store()
    try:
        keys = set(extra)
        if job:
            for index in range(partitions):
                keys.update(await store.keys(key_of(index, job_prefix(job))))
        await asyncio.gather(*(store.delete(k) for k in keys))
        return len(keys)
    finally:
        await store.close()


def staged_keys(messages: Iterable[WriterCommitMessage | None]) -> list[str]:
    """The staged objects the commit messages of a job name."""
    return [o.key for m in messages if isinstance(m, Staged) for o in m.objects]


MARKER = "commit-marker"
#: Errors after which a commit certainly did not happen (checked before anything was written).
NOT_COMMITTED = (InvalidArgument, QueueFull, QueueLocked)


async def commit_staged(
    options: Options, objects: list[StagedObject], token: str | None = None
) -> Sequence[str] | None:
    """Commit ``objects`` in one log object: through the queue's writer, opened for that
    moment, or through the broker that leads the queue (option ``broker``; the queue's name
    is the last part of its URL). None: ``token`` was committed before."""
    broker = options.text("broker")
    if broker:
        from ..client import connect_async  # needs the client extra: only through a broker

        name = queue_name(options.url)
        async with connect_async(broker, token=options.text("token")) as client:
            return await client.queue(name).enqueue_staged(objects, token)
    queue = await open_async(options.url, **options.store)
    try:
        return await queue.enqueue_staged(objects, token)
    finally:
        await queue.close()


async def mark_committing(options: Options, job: str) -> str:
    """Record that the driver is committing ``job``: from here on its outcome may be unknown
    (a commit whose answer was lost may have landed), so an abort must not delete its objects."""
    store = options.open_store()
    try:
        key = object_key(job, MARKER)
        await store.put(key, b"")
        return key
    finally:
        await store.close()


async def was_committing(options: Options, job: str) -> bool:
    """Whether a commit of ``job`` was attempted (see :func:`mark_committing`)."""
    store = options.open_store()
    try:
        return any(MARKER in key for key in await store.keys(job_prefix(job)))
    finally:
        await store.close()


ABORT_MARKER = "abort-marker"


class JobAborted(S3QError):
    """The write job was aborted while this task was staging."""


async def _aborted(store: Store, job: str) -> bool:
    return any(ABORT_MARKER in key for key in await store.keys(job_prefix(job)))


async def abort_job(options: Options, job: str, partitions: int = 1) -> int:
    """Abort ``job``: leave a marker its late tasks see (in the job's place in each of the
    queue's ``partitions``), then delete its staged objects."""
    store = options.open_store()
    try:
        places = [key_of(index, job_prefix(job)) for index in range(partitions)]
        await asyncio.gather(
            *(store.put(key_of(i, object_key(job, ABORT_MARKER)), b"") for i in range(partitions))
        )
        doomed = [
            key for place in places for key in await store.keys(place) if ABORT_MARKER not in key
        ]
        await asyncio.gather(*(store.delete(k) for k in doomed))
        return len(doomed)
    finally:
        await store.close()
