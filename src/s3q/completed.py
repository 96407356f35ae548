"""Completed messages, kept compactly for ``completed_retention``.

A completed message whose id names its place (``s3q.ids``) needs no record: ``status`` must
answer COMPLETED for it, and stats count it, until its retention passes, and nothing else is
asked of it. Each completion keeps, for every log object its messages were enqueued by, the
places it finished as sorted ranges, a few bytes for a stretch of messages completed together.

Each chunk is encoded for checkpoints once, when it is added (``to_raw``): a checkpoint copies
those bytes instead of encoding every chunk again, so single calls (a chunk each, kept for the
retention) do not make every checkpoint cost more than the last.
"""

from __future__ import annotations

import bisect
from array import array
from collections import deque
from collections.abc import Iterable

import msgspec


class Chunk:
    """The places of log object ``seq`` one completion at ``at`` finished."""

    __slots__ = ("at", "count", "ranges", "seq")

    def __init__(self, seq: int, at: float, ranges: array[int], count: int) -> None:
        self.seq, self.at, self.count = seq, at, count
        self.ranges = ranges  # start, end, start, end, ...: sorted, disjoint, end exclusive

    def __contains__(self, place: int) -> bool:
        ranges = self.ranges
        i = bisect.bisect_right(ranges, place)
        return i % 2 == 1  # inside [start, end): after a start, before its end

    @classmethod
    def of(cls, seq: int, at: float, places: Iterable[int]) -> Chunk:
        ranges: array[int] = array("I")
        count = 0
        for place in sorted(places):
            if ranges and ranges[-1] == place:
                ranges[-1] = place + 1
            elif not ranges or ranges[-1] < place:
                ranges.extend((place, place + 1))
            else:
                continue  # the same place twice
            count += 1
        return cls(seq, at, ranges, count)


class ChunkSnap(msgspec.Struct, array_like=True):
    """A chunk in a checkpoint."""

    seq: int
    at: float
    ranges: bytes  # uint32 each
    count: int


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(list[ChunkSnap])

#: pruned encodings are dropped from the front once this many are
_COMPACT_AFTER = 4096


def _array_header(n: int) -> bytes:
    """The msgpack header of an array of ``n`` items, in the shortest form (as msgspec writes)."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


class Completed:
    """Completed messages by log object, oldest completion first."""

    def __init__(self) -> None:
        self.count = 0
        self._order: deque[Chunk] = deque()
        self._by_seq: dict[int, deque[Chunk]] = {}
        self._encoded = bytearray()  # each chunk as a ChunkSnap, encoded, in _order's order
        self._ends: array[int] = array("Q")  # where each encoding ends in _encoded
        self._first = 0  # the index in _ends of _order[0]'s (those before it were pruned)

    def __len__(self) -> int:
        """Chunks held (what a checkpoint's size follows)."""
        return len(self._order)

    def add(self, at: float, places: dict[int, list[int]]) -> None:
        """Messages completed at ``at``: their places, by the log object that enqueued them."""
        for seq, found in places.items():
            self._add(Chunk.of(seq, at, found))

    def _add(self, chunk: Chunk) -> None:
        self._order.append(chunk)
        self._by_seq.setdefault(chunk.seq, deque()).append(chunk)
        self.count += chunk.count
        snap = ChunkSnap(chunk.seq, chunk.at, chunk.ranges.tobytes(), chunk.count)
        _encoder.encode_into(snap, self._encoded, -1)
        self._ends.append(len(self._encoded))

    def finished_at(self, seq: int, place: int) -> float | None:
        """When the message at ``place`` of log object ``seq`` was completed, if it was."""
        for chunk in self._by_seq.get(seq, ()):
            if place in chunk:
                return chunk.at
        return None

    def count_since(self, since: float) -> int:
        """How many were completed after ``since``."""
        count = self.count
        for chunk in self._order:
            if chunk.at > since:
                break
            count -= chunk.count
        return count

    def prunable(self, before: float) -> bool:
        return bool(self._order) and self._order[0].at <= before

    def prune(self, before: float) -> int:
        """Forget completions at or before ``before``; how many messages that forgot."""
        pruned = 0
        order, by_seq = self._order, self._by_seq
        while order and order[0].at <= before:
            chunk = order.popleft()
            same = by_seq[chunk.seq]
            same.popleft()  # the oldest of its object too: both are in completion order
            if not same:
                del by_seq[chunk.seq]
            pruned += chunk.count
            self._first += 1
        self.count -= pruned
        if self._first >= _COMPACT_AFTER and 2 * self._first >= len(self._ends):
            start = self._ends[self._first - 1]
            del self._encoded[:start]
            self._ends = array("Q", [end - start for end in self._ends[self._first :]])
            self._first = 0
        return pruned

    def to_snap(self) -> list[ChunkSnap]:
        return _decoder.decode(self.to_raw())

    def to_raw(self) -> msgspec.Raw:
        """The chunks as a checkpoint holds them (a list of ChunkSnap), already encoded."""
        start = self._ends[self._first - 1] if self._first else 0
        return msgspec.Raw(_array_header(len(self._order)) + self._encoded[start:])

    @classmethod
    def from_raw(cls, raw: msgspec.Raw) -> Completed:
        """``from_snap`` of the chunks ``to_raw`` encoded."""
        return cls.from_snap(_decoder.decode(raw))

    @classmethod
    def from_snap(cls, snaps: list[ChunkSnap]) -> Completed:
        completed = cls()
        for snap in snaps:
            ranges: array[int] = array("I")
            ranges.frombytes(snap.ranges)
            completed._add(Chunk(snap.seq, snap.at, ranges, snap.count))
        return completed
