"""Reading messages' payloads, and the Message answers made of a record and its payload.

A payload lies in a log object (``payload_seq`` at ``offset``), in an object of its own
(``offset`` -1), or in a staged object (``stage``). It is read from the batch still in flight
that carries it, else from the cache of recent log objects, else from the store: one ranged
read per object, however many payloads it holds.
"""

from __future__ import annotations

import asyncio

from .. import snapshot
from ..errors import S3QError
from ..index.records import Record
from ..index.state import blob_key
from ..index.stretches import Stretch
from ..log import segment
from ..message import Message
from ..wire.pages import members
from .core import Core

Span = tuple[str, int, int]  # a payload: message id, offset, size


class Payloads:
    """Reads the payloads of one writer's messages."""

    def __init__(self, core: Core) -> None:
        self.core = core

    async def of(self, recs: list[Record]) -> list[bytes]:
        """The payloads of ``recs``: from the batches in flight, the cache, or the store."""
        commit, cache = self.core.commit, self.core.cache
        found: dict[str, bytes] = {}
        logged: dict[int, list[Span]] = {}
        wanted: dict[int, list[Span]] = {}
        staged: dict[str, list[Span]] = {}
        for rec in recs:
            span = (rec.id, rec.offset, rec.size)
            if rec.stage is not None:
                staged.setdefault(rec.stage, []).append(span)
            else:  # where it lies now: garbage collection may move it while we read
                logged.setdefault(rec.payload_seq if rec.offset >= 0 else -1, []).append(span)
        for seq, spans in logged.items():
            held = commit.held(seq) if seq >= 0 else None
            data = cache.get(seq) if seq >= 0 else None
            if held is not None and all(mid in held for mid, _, _ in spans):
                found.update((mid, held[mid]) for mid, _, _ in spans)
            elif data is not None:
                found.update((mid, data[at : at + size]) for mid, at, size in spans)
            else:
                wanted[seq] = spans
        if wanted:
            parts = await asyncio.gather(*(self.read(s, sp) for s, sp in wanted.items()))
            for part in parts:
                found.update(part)
        if staged:
            parts = await asyncio.gather(
                *(snapshot.read_spans(self.core.store, key, sp) for key, sp in staged.items())
            )
            for part in parts:
                found.update(part)
        return [found[rec.id] for rec in recs]

    async def of_stretch(self, stretch: Stretch) -> list[bytes]:
        """The payloads of every member of ``stretch``, first to last: in one ranged read at
        most (members of a run lie side by side)."""
        offsets, sizes = stretch.offsets, stretch.sizes()
        if stretch.stage is not None:
            spans = list(zip(stretch.ids(), offsets, sizes, strict=True))
            found = await snapshot.read_spans(self.core.store, stretch.stage, spans)
            return [found[mid] for mid, _, _ in spans]
        seq = stretch.seq
        held = self.core.commit.held(seq)
        if held is not None:
            mids = stretch.ids()
            if all(mid in held for mid in mids):
                return [held[mid] for mid in mids]
        data, base = self.core.cache.get(seq), 0
        if data is None:
            base = offsets[0]
            data = await self.core.store.get_range(segment.key(seq), base, offsets[-1] + sizes[-1])
        return [data[at - base : at - base + size] for at, size in zip(offsets, sizes, strict=True)]

    async def block_of(self, stretch: Stretch) -> bytes | memoryview | None:
        """The payloads of every member of ``stretch``, back to back, as one block (a view of
        the cached object if it is cached); None if they do not lie side by side or are not
        in the log (then ``of_stretch`` reads them)."""
        offsets, sizes = stretch.offsets, stretch.sizes()
        start, end = offsets[0], offsets[-1] + sizes[-1]
        if stretch.stage is not None or end - start != sum(sizes):
            return None
        seq = stretch.seq
        writing = self.core.commit.writing(seq)
        if writing is not None:  # (a lease rides a later batch: the answer waits for it anyway)
            try:
                await self.core.commit.durable_after(writing)
            except S3QError:
                return None
        data = self.core.cache.get(seq)
        if data is None:
            return await self.core.store.get_range(segment.key(seq), start, end)
        return memoryview(data)[start:end]

    async def read(self, seq: int, spans: list[Span]) -> dict[str, bytes]:
        """Payloads by id, given ``(id, offset, size)`` in log object ``seq``, in one ranged
        read (``seq`` -1: each in an object of its own)."""
        store = self.core.store
        if seq < 0:
            blobs = await asyncio.gather(*(store.get(blob_key(mid)) for mid, _, _ in spans))
            return {mid: data for (mid, _, _), data in zip(spans, blobs, strict=True)}
        start = min(offset for _, offset, _ in spans)
        end = max(offset + size for _, offset, size in spans)
        data = await store.get_range(segment.key(seq), start, end)
        return {mid: data[offset - start : offset - start + size] for mid, offset, size in spans}


def message(rec: Record, payload: bytes, receipt: bool = True) -> Message:
    """The answer that hands out ``rec`` with its ``payload`` (and its receipt, if
    ``receipt``)."""
    return Message(  # (positional: the fields in Message's order, cheaper than keywords)
        rec.id,
        payload,
        rec.priority,
        rec.attempts,
        rec.enqueued_at,
        rec.receipt if receipt else None,
        rec.group,
        rec.dedup_id,
        dict(rec.attributes) if rec.attributes else {},
        rec.last_error,
        rec.first_leased_at or None,
        rec.tenant,
    )


def stretch_messages(stretch: Stretch, payloads: list[bytes]) -> list[Message]:
    """The answers that hand out the members of ``stretch`` still leased in it, with their
    ``payloads`` (one per member) and receipts."""
    return members(
        stretch.ids(),
        stretch.receipts(),
        payloads,
        stretch.dedup_ids(),
        stretch.attributes(),
        (stretch.priority, stretch.enqueued_at, stretch.at or None, stretch.tenant),
        stretch.held,
    )
