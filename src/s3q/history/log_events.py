"""Queue history: what happened to each message, read from the log straight from the store.

Every log object a queue keeps (all of them for ``history_retention`` seconds:
``s3q.writer.history_retention``) is read as events, one per message per operation, each at its
log position (the object's sequence number and the operation's index in it). No writer is
involved, and nothing is written. Every log format is read (format 1 enqueued with one
operation per message).

Kinds, and the fields each fills beyond ``seq``, ``op``, ``at``, ``kind`` and ``id``:

- ``enqueued``: priority, tenant, group, visible_at (enqueue time plus delay), dedup_id, size,
  attributes; where its payload lies is told by :func:`places`
- ``leased``: visible_at (the lease's end), attempt (1: the first)
- ``retried``: a lease of a message leased before (a redelivery: attempt 2 or more), the same
  fields
- ``extended``: visible_at (the lease's new end; at or before ``at``: visible again)
- ``released``, ``completed``, ``redriven``, ``discarded``: nothing more
- ``failed``: a failure with a retry to come: error, visible_at (the retry's time), attempt
- ``dead``: a failure on the last attempt, or a lease run out on it (``Bury``): error, attempt
- ``purged``: every message not completed was removed: ``id`` is None
- ``retired``: removed because it outlived the queue's ``retention`` (whatever its state,
  dead letters too): nothing more

``attempt`` is ``Message.attempts`` at that delivery: the writer's own count, which the Lease,
Fail and Bury operations carry (``s3q.log.ops.Lease.attempts``), so a reader of any range of the
log (a Spark task, a window, a stream's batch) knows it from the operation alone. In logs of
builds before they carried it, a delivery in a stretch is a first attempt, and other attempts
are counted from the range read: known for messages whose enqueue lies in it, else None.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, NamedTuple

import msgspec

from ..errors import StoreError
from ..index import checkpoint
from ..index.payload_refs import blob_key
from ..log import ids, segment, tables
from ..log.ops import (
    Append,
    Bury,
    Complete,
    Discard,
    Enqueue,
    EnqueueStaged,
    Extend,
    Fail,
    Lease,
    Open,
    Purge,
    Redrive,
    Release,
    Retire,
)
from ..snapshot import fetch_in_order
from ..store import NotFound, Store

KINDS = (
    "enqueued",
    "leased",
    "retried",
    "extended",
    "released",
    "completed",
    "failed",
    "dead",
    "redriven",
    "purged",
    "discarded",
    "retired",
)


class Event(msgspec.Struct, frozen=True, omit_defaults=True):
    """One thing that happened to one message, at log position ``(seq, op)``."""

    seq: int
    op: int
    at: float
    kind: str
    id: str | None
    priority: int | None = None
    tenant: str | None = None
    group: str | None = None
    attempt: int | None = None
    visible_at: float | None = None
    error: str | None = None
    dedup_id: str | None = None
    size: int | None = None
    attributes: dict[str, str] | None = None


class HistoryGap(StoreError):
    """Log objects a reader of the history needed were collected before it read them."""


def gap(url: str, first: int, last: int, remedy: str = "") -> HistoryGap:
    """The error for log objects ``first`` to ``last`` of queue ``url`` found collected."""
    which = f"log object {first}" if first == last else f"log objects {first} to {last}"
    return HistoryGap(
        f"{which} of {url} were collected before this read reached them, so their events are "
        "lost to it: the queue keeps its log only for history_retention seconds (set it "
        "above the reader's lag)" + (f", {remedy}" if remedy else "")
    )


def missing(first: int, stop: int, found: list[int]) -> list[tuple[int, int]]:
    """The ranges ``(low, high)`` of log objects from ``first`` to ``stop - 1`` absent from
    ``found`` (ascending)."""
    gaps: list[tuple[int, int]] = []
    expected = first
    for seq in [*(s for s in found if first <= s < stop), stop]:
        if seq > expected:
            gaps.append((expected, seq - 1))
        expected = seq + 1
    return gaps


class Each(list[Any]):
    """A field of a :class:`Block` with a value of its own for each row (else one for all)."""


class Block(NamedTuple):
    """The events of one operation, column by column: ``n`` rows, each field (``kind``, ``at``
    and those of ``fields``, named as :class:`Event`'s) one value for every row or an
    :class:`Each` of ``n``. The ``ids`` of messages an enqueue or a stretch made are an
    ``ids.Ids`` over a range of places."""

    seq: int
    op: int
    n: int
    kind: str | Each
    at: float | Each
    ids: Sequence[str | None]
    fields: dict[str, Any]

    def events(self) -> Iterator[Event]:
        names = list(self.fields)
        columns = [_each(v, self.n) for v in self.fields.values()]
        kinds, ats = _each(self.kind, self.n), _each(self.at, self.n)
        for i, mid in enumerate(self.ids):
            extra = {name: column[i] for name, column in zip(names, columns, strict=True)}
            yield Event(self.seq, self.op, ats[i], kinds[i], mid, **extra)


def _each(value: Any, n: int) -> Sequence[Any]:
    return value if isinstance(value, Each) else [value] * n


def _or(values: list[Any] | None, default: object) -> object:
    """A field from a column an operation may leave out (None: ``default`` for every row)."""
    return default if values is None else Each(values)


class Reader:
    """Turns log objects, read in order, into events. Their attempts are those the operations
    carry; for operations of earlier builds, which carry none, it counts the attempts of the
    messages it saw enqueued: by ranges of places for those enqueued and leased in bulk (runs,
    stretches), by id for the others."""

    def __init__(self, queue: str) -> None:
        self.queue = queue  # the queue's id, which its message ids begin with
        self._attempts: dict[str, int] = {}
        # log object -> (first place, end place, deliveries) of the runs it enqueued, ascending
        self._runs: dict[int, list[tuple[int, int, int]]] = {}

    def events(self, header: segment.Header) -> Iterator[Event]:
        """The events of one log object, in log order."""
        for block in self.blocks(header):
            yield from block.events()

    def blocks(self, header: segment.Header) -> Iterator[Block]:
        """The events of one log object, in log order: a block per operation."""
        seq = header.seq
        for index, op in enumerate(header.ops):
            at = getattr(op, "at", 0.0) or header.at
            if isinstance(op, Open) and op.queue and not self.queue:
                self.queue = op.queue
            elif isinstance(op, Append):
                yield self._appended(seq, index, op)
            elif isinstance(op, Enqueue | EnqueueStaged):
                yield self._enqueued(seq, index, op)
            elif isinstance(op, Lease):
                yield self._leased(seq, index, at, op)
            elif isinstance(op, Extend):
                yield Block(seq, index, 1, "extended", at, [op.id], {"visible_at": op.until})
            elif isinstance(op, Release):
                for mid in op.ids:  # the delivery given back is not counted (as the queue)
                    known = self._attempt(mid)
                    if known:
                        self._attempts[mid] = known - 1
                yield Block(seq, index, len(op.ids), "released", at, op.ids, {})
            elif isinstance(op, Complete):
                for mid in op.ids:
                    self._attempts.pop(mid, None)
                yield Block(seq, index, len(op.ids), "completed", at, op.ids, {})
            elif isinstance(op, Fail):
                kind = "dead" if op.retry_at is None else "failed"
                attempt = op.attempt or self._attempt(op.id) or None
                if kind == "dead":
                    self._attempts.pop(op.id, None)
                elif op.attempt:
                    self._attempts[op.id] = op.attempt
                fields: dict[str, Any] = {
                    "attempt": attempt,
                    "visible_at": op.retry_at,
                    "error": op.error,
                }
                yield Block(seq, index, 1, kind, at, [op.id], fields)
            elif isinstance(op, Bury):
                carried = op.attempts or [0] * len(op.ids)
                attempts = Each(
                    a or self._attempt(mid) or None for mid, a in zip(op.ids, carried, strict=True)
                )
                for mid in op.ids:
                    self._attempts.pop(mid, None)
                yield Block(
                    seq, index, len(op.ids), "dead", at, op.ids,
                    {"attempt": attempts, "error": op.error},
                )  # fmt: skip
            elif isinstance(op, Redrive):
                for mid in op.ids:
                    self._attempts[mid] = 0
                yield Block(seq, index, len(op.ids), "redriven", at, op.ids, {})
            elif isinstance(op, Discard):
                yield Block(seq, index, len(op.ids), "discarded", at, op.ids, {})
            elif isinstance(op, Purge):
                self._attempts.clear()
                self._runs.clear()
                yield Block(seq, index, 1, "purged", at, [None], {})
            elif isinstance(op, Retire):
                yield self._retired(seq, index, at, op)

    def _retired(self, seq: int, index: int, at: float, op: Retire) -> Block:
        """A message's ids, then the places of runs and stretches, each a range of ids."""
        for mid in op.ids:
            self._attempts.pop(mid, None)
        ranges = op.ranges or []
        retired: Sequence[str] = op.ids
        if not op.ids and len(ranges) == 1:  # the common case: one run
            s, place, count = ranges[0]
            retired = ids.Ids(self.queue, s, range(place, place + count))
        elif ranges:
            retired = [*op.ids]
            for s, place, count in ranges:
                retired += ids.Ids(self.queue, s, range(place, place + count))
        return Block(seq, index, len(retired), "retired", at, retired, {})

    def _appended(self, seq: int, index: int, op: Append) -> Block:
        n = len(op.sizes)
        self._runs.setdefault(seq, []).append((op.first, op.first + n, 0))
        at, delays, attributes = op.enqueued_at, op.delays, op.attributes
        fields: dict[str, Any] = {
            "priority": _or(op.priorities, 0),
            "tenant": _or(op.tenants, None),
            "group": _or(op.groups, None),
            "visible_at": at if delays is None else Each(at + d for d in delays),
            "dedup_id": _or(op.dedup_ids, None),
            "size": Each(op.sizes),
            "attributes": None if attributes is None else Each(a or None for a in attributes),
        }
        made = ids.Ids(self.queue, seq, range(op.first, op.first + n))
        return Block(seq, index, n, "enqueued", at, made, fields)

    def _enqueued(self, seq: int, index: int, op: Enqueue | EnqueueStaged) -> Block:
        messages = op.messages if isinstance(op, EnqueueStaged) else [op]
        for e in messages:
            self._attempts[e.id] = 0
        fields = {
            name: Each(getattr(e, name) for e in messages)
            for name in ("priority", "group", "visible_at", "dedup_id", "size", "attributes")
        }
        at = Each(e.enqueued_at for e in messages)
        return Block(seq, index, len(messages), "enqueued", at, [e.id for e in messages], fields)

    def _leased(self, seq: int, index: int, at: float, op: Lease) -> Block:
        made: list[str] = []
        attempts: list[int | None] = []
        until: list[float] = []
        carried = op.attempts or [0] * len(op.leases)
        for (mid, _, end), given in zip(op.leases, carried, strict=True):
            known = self._attempt(mid) if not given else given - 1
            attempt = None if known is None else known + 1
            if attempt is not None:
                self._attempts[mid] = attempt
            made.append(mid)
            attempts.append(attempt)
            until.append(end)
        stretches = op.stretches or []
        for s, place, count, _, end in stretches:
            self._stretch(s, place, place + count)
            attempts += [1] * count  # (a stretch takes untouched members: ``Lease``)
            until += [end] * count
            made += ids.Ids(self.queue, s, range(place, place + count))
        leased: Sequence[str] = made
        if not op.leases and len(stretches) == 1:  # the common case: one range of places
            s, place, count, _, _ = stretches[0]
            leased = ids.Ids(self.queue, s, range(place, place + count))
        kind: str | Each = "leased"
        if any(a is not None and a > 1 for a in attempts):
            kind = Each("retried" if (a or 0) > 1 else "leased" for a in attempts)
        counted: Each | int = Each(attempts) if op.leases else 1  # (stretches alone: 1 each)
        fields: dict[str, Any] = {"attempt": counted, "visible_at": Each(until)}
        return Block(seq, index, len(attempts), kind, at, leased, fields)

    def _attempt(self, mid: str) -> int | None:
        """Deliveries of ``mid`` so far, if its enqueue was read."""
        known = self._attempts.get(mid)
        if known is not None:
            return known
        where = ids.where(mid, self.queue)
        if where is None:
            return None
        seq, place = where
        for first, end, count in self._runs.get(seq, ()):
            if first <= place < end:
                return count
        return None

    def _stretch(self, seq: int, low: int, high: int) -> None:
        """Count a delivery of places ``low`` to ``high - 1`` of log object ``seq``'s runs
        (those whose enqueue was read), for the operations that carry no attempts."""
        runs = self._runs.get(seq)
        if not runs:
            return
        kept: list[tuple[int, int, int]] = []
        for first, end, count in runs:
            if end <= low or first >= high:
                kept.append((first, end, count))
                continue
            if first < low:
                kept.append((first, low, count))
            kept.append((max(first, low), min(end, high), count + 1))
            if end > high:
                kept.append((high, end, count))
        self._runs[seq] = kept


def places(header: segment.Header, queue: str) -> Iterator[tuple[str, str, int, int]]:
    """Where the payload of each message log object ``header`` enqueued lies, in the order of
    its ``enqueued`` events: ``(id, object key, offset, size)``."""
    here = segment.key(header.seq)
    for op in header.ops:
        if isinstance(op, Append):
            offset = op.offset
            blobs = op.blobs or {}
            for i, size in enumerate(op.sizes):
                mid = ids.make(queue, header.seq, op.first + i)
                if i in blobs:
                    yield mid, blobs[i], 0, size
                elif op.key is not None and op.offsets is not None:
                    yield mid, op.key, op.offsets[i], size
                else:
                    yield mid, here, offset, size
                    offset += size
        elif isinstance(op, Enqueue):
            yield op.id, blob_key(op.id) if op.offset < 0 else here, max(op.offset, 0), op.size
        elif isinstance(op, EnqueueStaged):
            for e in op.messages:
                yield e.id, op.key, e.offset, e.size


async def payloads(
    store: Store, header: segment.Header, queue: str, data: bytes, wanted: set[str]
) -> dict[str, bytes]:
    """The payloads of the messages ``wanted`` that log object ``header`` (whose bytes are
    ``data``) enqueued, by id; those in other objects (staged, blobs) read with a ranged GET
    each; a payload collected meanwhile is left out."""
    here = segment.key(header.seq)
    found: dict[str, bytes] = {}
    elsewhere: list[tuple[str, str, int, int]] = []
    for mid, key, offset, size in places(header, queue):
        if mid in wanted:
            if key == here:
                found[mid] = data[offset : offset + size]
            else:
                elsewhere.append((mid, key, offset, size))

    async def one(mid: str, key: str, offset: int, size: int) -> None:
        with contextlib.suppress(NotFound):
            found[mid] = await store.get_range(key, offset, offset + size) if size else b""

    await asyncio.gather(*(one(*place) for place in elsewhere))
    return found


async def queue_id(store: Store) -> str:
    """The queue's id (what its message ids begin with): from its first log object if it is
    still there, else from its newest checkpoint; "" for a queue with neither."""
    try:
        first = await tables.header(store, 1)  # its end only: not the payloads it may hold
    except NotFound:
        pass
    else:
        for op in first.ops:
            if isinstance(op, Open) and op.queue:
                return op.queue
    keys = await store.keys(checkpoint.PREFIX)
    for seq in sorted((s for s in map(checkpoint.seq_of, keys) if s is not None), reverse=True):
        try:
            found = checkpoint.decode(await store.get(checkpoint.key(seq)), checkpoint.key(seq))
        except NotFound:
            continue
        return found.snapshot.queue
    return ""


async def seqs(store: Store, first: int = 0, last: int | None = None) -> list[int]:
    """The log objects the store holds from ``first`` to ``last`` (None: the newest)."""
    after = segment.key(first - 1) if first > 1 else None
    found = (segment.seq_of(k) for k in await store.keys(segment.PREFIX, after=after))
    return [s for s in found if s is not None and s >= first and (last is None or s <= last)]


async def read(
    store: Store, first: int = 0, last: int | None = None, queue: str | None = None
) -> AsyncIterator[Event]:
    """The events of log objects ``first`` to ``last`` (None: the newest), in log order. Objects
    collected meanwhile are skipped."""
    reader = Reader(await queue_id(store) if queue is None else queue)
    wanted = await seqs(store, first, last)
    async for seq, data in objects(store, wanted, whole=False):
        for event in reader.events(segment.decode(data, segment.key(seq))):
            yield event


#: what ends a message's life in its history: nothing more can happen to it (a dead letter
#: may yet be redriven)
ENDS = frozenset({"completed", "discarded", "purged", "retired"})
#: how many log objects :func:`life` reads from the one that enqueued the message, at most
SCAN = 10_000


async def life(store: Store, mid: str, scan: int = SCAN) -> list[Event]:
    """The events of message ``mid``, read from the log object its id names (``s3q.log.ids``) on,
    until its life ends (:data:`ENDS`), the log ends, or ``scan`` log objects were read: the
    log objects of its life and a few more, however long the log (:func:`onward`); none for
    an id that names no log object of this queue."""
    first = ids.enqueued_by(mid)
    queue = mid[: ids.QUEUE_DIGITS]
    found: list[Event] = []
    if not first or queue != await queue_id(store):  # another queue's id, or an older format's
        return found
    reader = Reader(queue)
    async for seq, data in onward(store, first, first + scan):
        for e in reader.events(segment.decode(data, segment.key(seq))):
            if e.id == mid or (e.kind == "purged" and found):
                found.append(e)
                if e.kind in ENDS:
                    return found
    return found


async def onward(store: Store, first: int, stop: int) -> AsyncIterator[tuple[int, bytes]]:
    """The ends (headers) of log objects ``first`` to ``stop - 1`` that the store holds, in
    order, read 1, 2, 4, ... at a time (up to ``tables.CONCURRENCY``), so a reader that stops
    early has read at most about twice what it used. Log objects are numbered consecutively,
    so none is listed: a missing one is the log's end, unless collection took it out of the
    middle, which one listing from there tells (and names the rest)."""
    listed: list[int] | None = None  # the objects left, once a missing one made us list them
    seq, ahead = first, 1
    while True:
        if listed is None:
            chunk = list(range(seq, min(seq + ahead, stop)))
        else:
            chunk, listed = listed[:ahead], listed[ahead:]
        if not chunk:
            return
        tails = await asyncio.gather(*(_tail(store, s) for s in chunk))
        for s, data in zip(chunk, tails, strict=True):
            if data is not None:
                yield s, data
            elif listed is None:  # the log's end, or a hole: from here on, what is listed
                listed = await seqs(store, s, stop - 1)
                break
        seq, ahead = chunk[-1] + 1, min(2 * ahead, tables.CONCURRENCY)


async def _tail(store: Store, seq: int) -> bytes | None:
    """The end of log object ``seq`` that holds its header; None if there is none."""
    try:
        return await tables.tail(store, seq)
    except NotFound:
        return None


async def objects(
    store: Store, wanted: list[int], *, whole: bool, concurrency: int = 32, strict: bool = False
) -> AsyncIterator[tuple[int, bytes]]:
    """The log objects ``wanted``, in order, skipping any gone since they were listed (with
    ``strict``, raising :class:`HistoryGap` instead): all of each (``whole``), or only the end
    that holds its header (``s3q.log.tables.tail``)."""

    async def tail(key: str) -> bytes:
        return await tables.tail(store, segment.seq_of(key) or 0)

    get = None if whole else tail
    while wanted:
        try:
            keys = list(map(segment.key, wanted))
            async for seq, data in fetch_in_order(store, keys, wanted, concurrency, get):
                wanted = wanted[1:]
                yield seq, data
        except NotFound:
            if strict:
                raise gap(store.url, wanted[0], wanted[0]) from None
            wanted = wanted[1:]  # the first one not yet yielded was collected
