"""Queue history: what happened to each message, read from the log straight from the store.

Every log object a queue keeps (all of them for ``history_retention`` seconds: ``s3q.horizon``)
is read as events, one per message per operation, each at its log position (the object's
sequence number and the operation's index in it). No writer is involved, and nothing is
written. Every log format is read (format 1 enqueued with one operation per message).

Kinds, and the fields each fills beyond ``seq``, ``op``, ``at``, ``kind`` and ``id``:

- ``enqueued``: priority, tenant, group, visible_at (enqueue time plus delay), dedup_id, size,
  attributes; where its payload lies is told by :func:`places`
- ``leased``: visible_at (the lease's end), attempt (where the enqueue was read: 1 first)
- ``retried``: a lease of a message leased before (a redelivery), the same fields
- ``extended``: visible_at (the lease's new end; at or before ``at``: visible again)
- ``released``, ``completed``, ``redriven``, ``discarded``: nothing more
- ``failed``: a failure with a retry to come: error, visible_at (the retry's time), attempt
- ``dead``: a failure on the last attempt, or a lease run out on it (``Bury``): error, attempt
- ``purged``: every message not completed was removed: ``id`` is None

``attempt`` is known for messages whose enqueue lies in the range read, else None.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import TypeVar

import msgspec

from . import checkpoint, ids, log, tables
from .ops import (
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
)
from .payload_refs import blob_key
from .snapshot import fetch_in_order
from .store import NotFound, Store

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


T = TypeVar("T")


def _column(values: list[T] | None, i: int, default: T) -> T:
    return default if values is None else values[i]


class Reader:
    """Turns log objects, read in order, into events; counts the attempts of the messages it
    saw enqueued."""

    def __init__(self, queue: str) -> None:
        self.queue = queue  # the queue's id, which its message ids begin with
        self._attempts: dict[str, int] = {}

    def events(self, header: log.Header) -> Iterator[Event]:
        """The events of one log object, in log order."""
        seq = header.seq
        for index, op in enumerate(header.ops):
            at = getattr(op, "at", 0.0) or header.at
            if isinstance(op, Open) and op.queue and not self.queue:
                self.queue = op.queue
            elif isinstance(op, Append):
                yield from self._appended(seq, index, op)
            elif isinstance(op, Enqueue | EnqueueStaged):
                for e in op.messages if isinstance(op, EnqueueStaged) else [op]:
                    self._attempts[e.id] = 0
                    yield Event(
                        seq,
                        index,
                        e.enqueued_at,
                        "enqueued",
                        e.id,
                        priority=e.priority,
                        group=e.group,
                        visible_at=e.visible_at,
                        dedup_id=e.dedup_id,
                        size=e.size,
                        attributes=e.attributes,
                    )
            elif isinstance(op, Lease):
                yield from self._leased(seq, index, at, op)
            elif isinstance(op, Extend):
                yield Event(seq, index, at, "extended", op.id, visible_at=op.until)
            elif isinstance(op, Release):
                for mid in op.ids:
                    yield Event(seq, index, at, "released", mid)
            elif isinstance(op, Complete):
                for mid in op.ids:
                    self._attempts.pop(mid, None)
                    yield Event(seq, index, at, "completed", mid)
            elif isinstance(op, Fail):
                kind = "dead" if op.retry_at is None else "failed"
                attempt = self._attempts.get(op.id) or None
                if kind == "dead":
                    self._attempts.pop(op.id, None)
                yield Event(
                    seq, index, at, kind, op.id, attempt=attempt, visible_at=op.retry_at,
                    error=op.error,
                )  # fmt: skip
            elif isinstance(op, Bury):
                for mid in op.ids:
                    attempt = self._attempts.pop(mid, None) or None
                    yield Event(seq, index, at, "dead", mid, attempt=attempt, error=op.error)
            elif isinstance(op, Redrive):
                for mid in op.ids:
                    self._attempts[mid] = 0
                    yield Event(seq, index, at, "redriven", mid)
            elif isinstance(op, Discard):
                for mid in op.ids:
                    yield Event(seq, index, at, "discarded", mid)
            elif isinstance(op, Purge):
                self._attempts.clear()
                yield Event(seq, index, at, "purged", None)

    def _appended(self, seq: int, index: int, op: Append) -> Iterator[Event]:
        for i, size in enumerate(op.sizes):
            mid = ids.make(self.queue, seq, op.first + i)
            self._attempts[mid] = 0
            yield Event(
                seq,
                index,
                op.enqueued_at,
                "enqueued",
                mid,
                priority=_column(op.priorities, i, 0),
                tenant=_column(op.tenants, i, None),
                group=_column(op.groups, i, None),
                visible_at=op.enqueued_at + _column(op.delays, i, 0.0),
                dedup_id=_column(op.dedup_ids, i, None),
                size=size,
                attributes=_column(op.attributes, i, None) or None,
            )

    def _leased(self, seq: int, index: int, at: float, op: Lease) -> Iterator[Event]:
        leases = [(mid, until) for mid, _, until in op.leases]
        for s, place, count, _, until in op.stretches or ():
            leases += [(mid, until) for mid in ids.Ids(self.queue, s, range(place, place + count))]
        for mid, until in leases:
            known = self._attempts.get(mid)
            attempt = None if known is None else known + 1
            if attempt is not None:
                self._attempts[mid] = attempt
            kind = "retried" if (attempt or 0) > 1 else "leased"
            yield Event(seq, index, at, kind, mid, attempt=attempt, visible_at=until)


def places(header: log.Header, queue: str) -> Iterator[tuple[str, str, int, int]]:
    """Where the payload of each message log object ``header`` enqueued lies, in the order of
    its ``enqueued`` events: ``(id, object key, offset, size)``."""
    here = log.key(header.seq)
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
    store: Store, header: log.Header, queue: str, data: bytes, wanted: set[str]
) -> dict[str, bytes]:
    """The payloads of the messages ``wanted`` that log object ``header`` (whose bytes are
    ``data``) enqueued, by id; those in other objects (staged, blobs) read with a ranged GET
    each; a payload collected meanwhile is left out."""
    here = log.key(header.seq)
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
        first = log.decode(await store.get(log.key(1)), log.key(1))
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
    after = log.key(first - 1) if first > 1 else None
    found = (log.seq_of(k) for k in await store.keys(log.PREFIX, after=after))
    return [s for s in found if s is not None and s >= first and (last is None or s <= last)]


async def read(
    store: Store, first: int = 0, last: int | None = None, queue: str | None = None
) -> AsyncIterator[Event]:
    """The events of log objects ``first`` to ``last`` (None: the newest), in log order. Objects
    collected meanwhile are skipped."""
    reader = Reader(await queue_id(store) if queue is None else queue)
    wanted = await seqs(store, first, last)
    async for seq, data in objects(store, wanted, whole=False):
        for event in reader.events(log.decode(data, log.key(seq))):
            yield event


async def objects(
    store: Store, wanted: list[int], *, whole: bool, concurrency: int = 32
) -> AsyncIterator[tuple[int, bytes]]:
    """The log objects ``wanted``, in order, skipping any gone since they were listed: all of
    each (``whole``), or only the end that holds its header (``s3q.tables.tail``)."""

    async def tail(key: str) -> bytes:
        return await tables.tail(store, log.seq_of(key) or 0)

    get = None if whole else tail
    while wanted:
        try:
            keys = list(map(log.key, wanted))
            async for seq, data in fetch_in_order(store, keys, wanted, concurrency, get):
                wanted = wanted[1:]
                yield seq, data
        except NotFound:
            wanted = wanted[1:]  # the first one not yet yielded was collected
