"""Read-only snapshots of a queue: its index rebuilt from storage, with no writer involved.

The newest readable checkpoint plus the log objects after it give the index as of the last log
object. The writer recovers this way on open; readers (the Spark source, a backup, a dashboard)
use it to see a consistent snapshot while the writer carries on. Garbage collection keeps every
object such a reader needs for ``gc_grace`` seconds after a newer checkpoint exists, so a reader
that finishes within that time never misses one; one that does gets :class:`SnapshotExpired`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

import msgspec

from .errors import StoreError, UnsupportedFormat
from .index import checkpoint
from .index.records import Record
from .index.state import QueueState, blob_key
from .log import segment, tables
from .message import Message
from .store import NotFound, Store

logger = logging.getLogger("s3q")

T = TypeVar("T")

REPLAY_CONCURRENCY = 32  # log objects being fetched at once while replaying


class SnapshotExpired(StoreError):
    """An object the snapshot needs was collected: the read took longer than ``gc_grace``."""


@dataclass
class Loaded:
    """The index as of log object ``seq``, and the checkpoints seen on the way."""

    state: QueueState
    seq: int
    checkpoints: dict[int, float] = field(default_factory=dict)
    replayed: int = 0  # log objects folded in after the checkpoint
    first_at: float | None = None  # when the first of them was written
    last_at: float = 0.0  # when the last of them was written (else the checkpoint was)
    #: the log object after ``seq``, torn by an OS crash before it was durable (so never
    #: acknowledged: ``Store.tears``), which the writer removes before it writes there
    torn: int | None = None


class Location(NamedTuple):
    """Where a payload lies: an object key, an offset and a size."""

    key: str
    offset: int
    size: int


class Located(msgspec.Struct, frozen=True):
    """A message (its payload left out) and where its payload lies."""

    message: Message
    location: Location


def location(rec: Record) -> Location:
    """Where the payload of ``rec`` lies now."""
    if rec.stage is not None:
        return Location(rec.stage, rec.offset, rec.size)
    if rec.offset < 0:
        return Location(blob_key(rec.id), 0, rec.size)
    return Location(segment.key(rec.payload_seq), rec.offset, rec.size)


async def load(store: Store, *, retries: int = 0, since: Loaded | None = None) -> Loaded:
    """The index from the newest readable checkpoint and the log after it.

    A reader racing the collector may find a log object gone (a newer checkpoint became stable
    meanwhile): it starts over from that checkpoint up to ``retries`` times, then raises
    :class:`SnapshotExpired`. With ``retries=0`` (the writer's recovery) a gap is a StoreError.

    ``since``: an index loaded earlier from the same log (and not used since), read on with
    the log objects written after it instead of starting from a checkpoint again: a broker
    reads a queue while its leader's lease runs out, then only what that leader wrote meanwhile.
    Unless another checkpoint was written meanwhile: then from the newest, as without it.
    """
    for attempt in range(retries + 1):
        try:
            return await _load_once(store, since if attempt == 0 else None)
        except (NotFound, _Gap) as exc:
            if attempt < retries:
                continue
            if retries:
                raise SnapshotExpired(
                    f"the log of {store.url} changed under the snapshot {retries + 1} times "
                    f"({exc}): is a collector with a tiny gc_grace running?"
                ) from exc
            if isinstance(exc, _Gap):
                raise StoreError(str(exc)) from None
            raise
    raise AssertionError("unreachable")  # pragma: no cover


class _Gap(Exception):
    """The log after the checkpoint is not contiguous."""


async def _load_once(store: Store, since: Loaded | None = None) -> Loaded:
    checkpoints = await store.keys(checkpoint.PREFIX)
    if since is not None and await _still_newest(store, since, checkpoints):
        loaded = since
    else:
        loaded = await _load_checkpoint(store, checkpoints)
    base = loaded.seq
    keys = await store.keys(segment.PREFIX, after=segment.key(base) if base else None)
    seqs = sorted(s for s in map(segment.seq_of, keys) if s is not None and s > base)
    expected = list(range(base + 1, base + 1 + len(seqs)))
    if seqs != expected:
        missing = sorted(set(range(base + 1, (seqs or [base])[-1] + 1)) - set(seqs))[:5]
        raise _Gap(
            f"log of {store.url} is missing object(s) {missing} after "
            f"{'checkpoint ' + str(base) if base else 'its start'}"
        )
    tears = store.base.tears
    async for seq, data in fetch_in_order(store, [segment.key(s) for s in seqs], seqs):
        if tears and seq == seqs[-1] and segment.torn(data):
            loaded.torn = seq
            break
        at = await replay(store, loaded.state, seq, data)
        if loaded.first_at is None:
            loaded.first_at = at
        loaded.seq, loaded.last_at = seq, at
        loaded.replayed += 1
    return loaded


async def fetch_in_order(
    store: Store,
    keys: list[str],
    tags: list[T],
    concurrency: int = REPLAY_CONCURRENCY,
    get: Callable[[str], Awaitable[bytes]] | None = None,
) -> AsyncIterator[tuple[T, bytes]]:
    """The objects at ``keys`` in order, each with its tag, with up to ``concurrency`` GETs
    in flight: a slow object holds back only what follows it, never a whole window.
    ``get`` reads one (by default ``store.get``: all of it)."""
    get = get or store.get
    pending: deque[tuple[T, asyncio.Task[bytes]]] = deque()
    upcoming = iter(zip(tags, keys, strict=True))
    try:
        for tag, key in itertools.islice(upcoming, concurrency):
            pending.append((tag, asyncio.ensure_future(get(key))))
        while pending:
            tag, task = pending.popleft()
            data = await task
            for next_tag, key in itertools.islice(upcoming, 1):
                pending.append((next_tag, asyncio.ensure_future(get(key))))
            yield tag, data
    finally:
        for _, task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*(task for _, task in pending), return_exceptions=True)


async def _still_newest(store: Store, since: Loaded, keys: list[str]) -> bool:
    """Whether ``since`` may be read on from: the newest of the store's checkpoints (``keys``)
    is the one it was read from, the same object (its first bytes name the same ``seq`` and
    time, so the queue was not deleted and made again meanwhile). Then no log object after
    ``since`` was collected: that takes a newer checkpoint, ``gc_grace`` old."""
    if not since.checkpoints:
        return False  # (a queue with no checkpoint yet: little to read again)
    seq = max(since.checkpoints)
    if max((s for s in map(checkpoint.seq_of, keys) if s is not None), default=0) != seq:
        return False
    try:
        data = await store.get_range(checkpoint.key(seq), 0, checkpoint.HEAD_BYTES)
    except NotFound:
        return False
    return checkpoint.head(data) == (seq, since.checkpoints[seq])


async def _load_checkpoint(store: Store, keys: list[str]) -> Loaded:
    """Start from the newest readable checkpoint of ``keys`` (the store's checkpoint keys; an
    empty index if there is none)."""
    for seq in sorted((s for s in map(checkpoint.seq_of, keys) if s is not None), reverse=True):
        try:
            ck = checkpoint.decode(await store.get(checkpoint.key(seq)), checkpoint.key(seq))
        except UnsupportedFormat:
            raise  # a newer s3q wrote it: an older checkpoint may miss what it collected
        except (StoreError, msgspec.DecodeError, NotFound) as exc:
            logger.warning("skipping unreadable checkpoint %s of %s: %s", seq, store.url, exc)
            continue
        return Loaded(checkpoint.restore(ck.snapshot), seq, {seq: ck.at}, last_at=ck.at)
    return Loaded(QueueState(), 0)


async def replay(store: Store, state: QueueState, seq: int, data: bytes) -> float:
    """Fold log object ``seq`` (its bytes) into ``state``, reading back the run tables its
    leases need; when the object was written."""
    header = segment.decode(data, segment.key(seq))
    for op in header.ops:
        wanted = state.wanted_by(op)
        if wanted:
            await fill_tables(store, state, wanted)
        state.apply(op, seq)
    return header.at


async def read_spans(store: Store, key: str, spans: list[tuple[str, int, int]]) -> dict[str, bytes]:
    """Payloads by id, given ``(id, offset, size)`` in object ``key``, in one ranged read.

    Raises :class:`SnapshotExpired` if the object is gone (collected after ``gc_grace``).
    """
    start = min(offset for _, offset, _ in spans)
    end = max(offset + size for _, offset, size in spans)
    try:
        data = await store.get_range(key, start, end)
    except NotFound:
        raise SnapshotExpired(
            f"{key} of {store.url} was collected while it was being read: the read took "
            "longer than the queue's gc_grace"
        ) from None
    return {mid: data[offset - start : offset - start + size] for mid, offset, size in spans}


async def fill_tables(store: Store, state: QueueState, seqs: Iterable[int]) -> None:
    """Give the runs in log objects ``seqs`` their tables back."""
    wanted = sorted(set(seqs))
    limit = asyncio.Semaphore(tables.CONCURRENCY)

    async def one(seq: int) -> None:
        async with limit:
            found = await tables.appends(store, seq)
        state.fill(seq, found)

    await asyncio.gather(*(one(seq) for seq in wanted))
