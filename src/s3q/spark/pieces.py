"""Messages located in storage, planned into input partitions and read into Arrow batches.

The driver knows, for every message it hands to Spark with a record of its own, where its
payload lies (an object key, an offset, a size). It groups messages by object into *pieces*
sorted by offset, and pieces into partitions. Untouched messages (runs) it hands over as
*run pieces*: a stretch of one run, whose sizes, offsets, dedup ids and attributes the executor
reads from the run's log object (``s3q.log.tables``), so the driver holds nothing per message.
An executor reads each piece with one ranged GET and turns it into a ``pyarrow.RecordBatch``,
the payload column straight from the bytes read when the payloads lie back to back, as they
do in log and staged objects.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
from collections.abc import Callable, Iterable, Iterator
from operator import itemgetter
from typing import Any, Protocol

import msgspec
import numpy as np
import pyarrow as pa

from ..index.state import QueueState
from ..log import ids, segment, tables
from ..log.ops import Append
from ..partitions import placement
from ..snapshot import SnapshotExpired
from ..store import NotFound, Store

PIECE_BYTES = 32 * 1024 * 1024  # payload bytes read by one GET, at most (one object or range)
JOIN_GAP = 1024 * 1024  # bytes of other payloads one GET may read past to join two pieces
PARTITION_BYTES = 64 * 1024 * 1024  # payload bytes of one input partition, about
PARTITION_ROWS = 200_000
READ_CONCURRENCY = 8

#: The columns of a read, in Spark's DDL.
SCHEMA = (
    "id string, payload binary, priority int, status string, attempts int, "
    "enqueued_at timestamp, `group` string, dedup_id string, attributes map<string,string>, "
    "last_error string, tenant string"
)
ARROW_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("payload", pa.binary()),
        ("priority", pa.int32()),
        ("status", pa.string()),
        ("attempts", pa.int32()),
        ("enqueued_at", pa.timestamp("us", tz="UTC")),
        ("group", pa.string()),
        ("dedup_id", pa.string()),
        ("attributes", pa.map_(pa.string(), pa.string())),
        ("last_error", pa.string()),
        ("tenant", pa.string()),
    ]
)


class Fields(Protocol):
    """What a row needs of a message: ``Record`` (a snapshot) and ``Message`` (a lease) fit."""

    @property
    def id(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def attempts(self) -> int: ...
    @property
    def enqueued_at(self) -> float: ...
    @property
    def group(self) -> str | None: ...
    @property
    def dedup_id(self) -> str | None: ...
    @property
    def attributes(self) -> dict[str, str] | None: ...
    @property
    def last_error(self) -> str | None: ...
    @property
    def tenant(self) -> str | None: ...


# (object key, offset, size, the message, its status)
Entry = tuple[str, int, int, Fields, str]


class Piece(msgspec.Struct, array_like=True):
    """Messages whose payloads lie in one object, by offset, as columns: one ranged GET."""

    key: str
    offsets: list[int]
    sizes: list[int]
    ids: list[str]
    priorities: list[int]
    statuses: list[str]
    attempts: list[int]
    enqueued_at: list[float]
    groups: list[str | None]
    dedup_ids: list[str | None]
    attributes: list[dict[str, str] | None]
    errors: list[str | None]
    tenants: list[str | None]

    def span(self) -> tuple[int, int]:
        """The bytes of the object its payloads lie in: from, to."""
        return self.offsets[0], max(o + s for o, s in zip(self.offsets, self.sizes, strict=True))

    @classmethod
    def join(cls, pieces: list[Piece]) -> Piece:
        """One piece of ``pieces`` (of one object)."""
        if len(pieces) == 1:
            return pieces[0]
        columns = zip(*(msgspec.structs.astuple(p)[1:] for p in pieces), strict=True)
        return cls(pieces[0].key, *(list(itertools.chain.from_iterable(c)) for c in columns))

    @classmethod
    def of(cls, key: str, entries: list[Entry]) -> Piece:
        messages = [e[3] for e in entries]
        return cls(
            key,
            [e[1] for e in entries],
            [e[2] for e in entries],
            [m.id for m in messages],
            [m.priority for m in messages],
            [e[4] for e in entries],
            [m.attempts for m in messages],
            [m.enqueued_at for m in messages],
            [m.group for m in messages],
            [m.dedup_id for m in messages],
            [m.attributes or None for m in messages],
            [m.last_error for m in messages],
            [m.tenant for m in messages],
        )


class RunPiece(msgspec.Struct, array_like=True):
    """Members ``first`` to ``first + count`` of a run in log object ``seq`` (see
    ``records.Run``), pending: ``offset`` is where the payload of the run's member at place
    ``front`` lies (when the payloads are in the log object, back to back)."""

    queue: str
    seq: int
    first: int
    count: int
    front: int
    offset: int
    stage: str | None
    priority: int
    enqueued_at: float
    size: int  # payload bytes, about (for planning)
    tenant: str | None = None
    partition: int = 0  # the queue's partition whose log holds them (``s3q.partitions``)

    def resolve(self, table: RunTable) -> Piece:
        """The piece these members make, from the table of the Append that holds them."""
        op = table.op
        start = self.first - op.first
        end = start + self.count
        if op.offsets is not None:
            offsets = op.offsets[start:end]
        else:  # back to back from the front's payload
            prefix = table.prefix()
            front = int(prefix[self.front - op.first])
            offsets = (prefix[start:end] - front + self.offset).tolist()
        n = len(offsets)
        none: list[Any] = [None] * n
        return Piece(
            placement.key_of(self.partition, self.stage or segment.key(self.seq)),
            offsets,
            op.sizes[start:end],
            ids.make_many(self.queue, self.seq, self.first, n),
            [self.priority] * n,
            ["pending"] * n,
            [0] * n,
            [self.enqueued_at] * n,
            none,
            op.dedup_ids[start:end] if op.dedup_ids else none,
            [a or None for a in op.attributes[start:end]] if op.attributes else none,
            none,
            [self.tenant] * n,
        )


class RunTable:
    """The Append of a log object that holds some run pieces, with its payloads' prefix sums
    made once however many pieces share it."""

    def __init__(self, op: Append) -> None:
        self.op = op
        self._prefix: np.ndarray[Any, np.dtype[np.int64]] | None = None

    def prefix(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Where each member's payload lies, counted from the first member's."""
        if self._prefix is None:
            sizes = np.asarray(self.op.sizes, dtype=np.int64)
            self._prefix = np.concatenate(([0], np.cumsum(sizes)))
        return self._prefix


class RunTables:
    """The tables of the log objects some run pieces lie in, by log object."""

    def __init__(self, appends: dict[int, list[Append]], url: str) -> None:
        self._tables = {seq: [RunTable(op) for op in ops] for seq, ops in appends.items()}
        self._firsts = {seq: [op.first for op in ops] for seq, ops in appends.items()}
        self._url = url

    @classmethod
    async def read(cls, store: Store, seqs: Iterable[int]) -> RunTables:
        """The tables of log objects ``seqs``, each read once, a few at a time."""
        limit = asyncio.Semaphore(READ_CONCURRENCY)

        async def one(seq: int) -> list[Append]:
            async with limit:
                try:
                    return await tables.appends(store, seq)
                except NotFound:
                    raise SnapshotExpired(
                        f"log object {seq} of {store.url} was collected before it was read: "
                        "the read took longer than the queue's gc_grace"
                    ) from None

        wanted = sorted(set(seqs))
        found = await asyncio.gather(*(one(seq) for seq in wanted))
        return cls(dict(zip(wanted, found, strict=True)), store.url)

    def of(self, piece: RunPiece) -> RunTable:
        """The table of the Append ``piece``'s members came in."""
        firsts = self._firsts[piece.seq]
        i = bisect.bisect_right(firsts, piece.first) - 1
        if i < 0 or piece.first - firsts[i] + piece.count > len(
            self._tables[piece.seq][i].op.sizes
        ):
            raise SnapshotExpired(f"log object {piece.seq} of {self._url} holds no such run")
        return self._tables[piece.seq][i]


def run_pieces(state: QueueState, partition: int = 0) -> Iterator[RunPiece]:
    """The untouched messages of ``state`` (the queue's partition ``partition``), as run
    pieces of at most PARTITION_ROWS."""
    for run in state.runs:
        front, left = run.front_place(), len(run)
        each = run.bytes / left if left else 0
        for first in range(front, front + left, PARTITION_ROWS):
            count = min(PARTITION_ROWS, front + left - first)
            yield RunPiece(
                state.queue,
                run.seq,
                first,
                count,
                front,
                run.offset,
                run.stage,
                run.priority,
                run.enqueued_at,
                round(each * count),
                run.tenant,
                partition,
            )


def plan(entries: Iterable[Entry], runs: Iterable[RunPiece] = ()) -> list[list[Piece | RunPiece]]:
    """Pieces (per object, split in ranges of at most PIECE_BYTES) and run pieces, packed into
    partitions."""
    by_key: dict[str, list[Entry]] = {}
    for entry in entries:
        group = by_key.get(entry[0])
        if group is None:
            group = by_key[entry[0]] = []
        group.append(entry)
    pieces: list[Piece] = []
    for key in sorted(by_key):
        group = sorted(by_key[key], key=itemgetter(1))
        first = size = 0
        for i, entry in enumerate(group):
            if i > first and (size + entry[2] > PIECE_BYTES or i - first >= PARTITION_ROWS):
                pieces.append(Piece.of(key, group[first:i]))
                first, size = i, 0
            size += entry[2]
        pieces.append(Piece.of(key, group[first:]))
    partitions: list[list[Piece | RunPiece]] = []
    current: list[Piece | RunPiece] = []
    size = rows = 0
    every: Iterable[Piece | RunPiece] = itertools.chain(pieces, runs)
    for piece in every:
        if current and (size >= PARTITION_BYTES or rows >= PARTITION_ROWS):
            partitions.append(current)
            current, size, rows = [], 0, 0
        current.append(piece)
        if isinstance(piece, RunPiece):
            size += piece.size
            rows += piece.count
        else:
            size += sum(piece.sizes)
            rows += len(piece.ids)
    if current:
        partitions.append(current)
    return partitions


def read(
    stores: Callable[[int], Store], pieces: list[Piece | RunPiece]
) -> Iterator[pa.RecordBatch]:
    """The record batches of ``pieces``, read a few GETs at a time from the queue's store
    (``stores(0)``; the tables of run pieces from their partition's, ``stores(i)``)."""
    fetched = _loop().run_until_complete(_fetch(stores, pieces))
    for piece, data, base in fetched:
        yield record_batch(piece, data, base)


_loops: list[asyncio.AbstractEventLoop] = []


def _loop() -> asyncio.AbstractEventLoop:
    """One event loop per Python worker, kept across tasks (Spark reuses workers)."""
    if not _loops:
        _loops.append(asyncio.new_event_loop())
    return _loops[0]


async def _fetch(
    stores: Callable[[int], Store], pieces: list[Piece | RunPiece]
) -> list[tuple[Piece, bytes, int]]:
    """Run pieces resolved (each log object's table read once), pieces near one another in
    an object joined, and each read with one GET."""
    limit = asyncio.Semaphore(READ_CONCURRENCY)

    async def get(piece: Piece) -> tuple[Piece, bytes, int]:
        start, end = piece.span()
        async with limit:
            try:
                return piece, await store.get_range(piece.key, start, end), start
            except NotFound:
                raise SnapshotExpired(
                    f"{piece.key} of {store.url} was collected before it was read: the read "
                    "took longer than the queue's gc_grace"
                ) from None

    store = stores(0)
    try:
        runs: dict[int, RunTables] = {}
        for index in sorted({p.partition for p in pieces if isinstance(p, RunPiece)}):
            seqs = [p.seq for p in pieces if isinstance(p, RunPiece) and p.partition == index]
            at = store if index == 0 else stores(index)
            try:
                runs[index] = await RunTables.read(at, seqs)
            finally:
                if at is not store:
                    await at.close()
        resolved = [
            p.resolve(runs[p.partition].of(p)) if isinstance(p, RunPiece) else p for p in pieces
        ]
        return await asyncio.gather(*(get(p) for p in join_near(resolved)))
    finally:
        await store.close()


def join_near(pieces: Iterable[Piece]) -> list[Piece]:
    """``pieces`` of one object whose payloads lie within JOIN_GAP of one another joined
    (at most PIECE_BYTES apart end to end), so many small stretches cost one GET."""
    by_key: dict[str, list[Piece]] = {}
    for piece in pieces:
        if piece.ids:
            by_key.setdefault(piece.key, []).append(piece)
    joined: list[Piece] = []
    for key in sorted(by_key):
        spans = sorted((p.span(), i) for i, p in enumerate(by_key[key]))
        group: list[Piece] = []
        start = end = 0
        for (s, e), i in spans:
            if group and (s > end + JOIN_GAP or max(end, e) - start > PIECE_BYTES):
                joined.append(Piece.join(group))
                group = []
            if not group:
                start, end = s, e
            group.append(by_key[key][i])
            end = max(end, e)
        joined.append(Piece.join(group))
    return joined


def record_batch(piece: Piece, data: bytes, base: int) -> pa.RecordBatch:
    """One Arrow batch of ``piece``, whose object's bytes from ``base`` on are ``data``."""
    offsets = np.asarray(piece.offsets, dtype=np.int64) - base
    sizes = np.asarray(piece.sizes, dtype=np.int64)
    n = len(sizes)
    ends = offsets + sizes
    if n and bool(np.all(offsets[1:] == ends[:-1])):  # back to back: no copy
        bounds = np.append(offsets, ends[-1]).astype(np.int32)
        payload = pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(bounds), pa.py_buffer(data)]
        )
    else:
        view = memoryview(data)
        payload = pa.array([view[o:e] for o, e in zip(offsets, ends, strict=True)], pa.binary())
    micros = (np.asarray(piece.enqueued_at, dtype=np.float64) * 1e6).astype(np.int64)
    columns = [
        pa.array(piece.ids, pa.string()),
        payload,
        pa.array(piece.priorities, pa.int32()),
        pa.array(piece.statuses, pa.string()),
        pa.array(piece.attempts, pa.int32()),
        pa.array(micros, ARROW_SCHEMA.field("enqueued_at").type),
        _optional(piece.groups, pa.string()),
        _optional(piece.dedup_ids, pa.string()),
        _optional(
            [None if a is None else list(a.items()) for a in piece.attributes]
            if any(a is not None for a in piece.attributes)
            else piece.attributes,
            ARROW_SCHEMA.field("attributes").type,
        ),
        _optional(piece.errors, pa.string()),
        _optional(piece.tenants, pa.string()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def _optional(values: list[Any], kind: pa.DataType) -> pa.Array:
    """A column that is often all null: built without looking at each value when it is."""
    if values.count(None) == len(values):
        return pa.nulls(len(values), kind)
    return pa.array(values, kind)
