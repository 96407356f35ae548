"""Completed messages, kept compactly for ``completed_retention``.

A completed message whose id names its place (``s3q.log.ids``) needs no record: ``status`` must
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
from collections.abc import Iterable, Iterator

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


def array_header(n: int) -> bytes:
    """The msgpack header of an array of ``n`` items, in the shortest form (as msgspec writes)."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


class Completed:
    """Completed messages by log object, oldest completion first.

    Held as columns (one entry per chunk in arrays, the ranges of all chunks in one array), not
    an object per chunk: a single call's completion costs about 150 bytes of memory, not the
    kilobyte a chunk object, its array and its object's deque took, so an hour of retention
    at hundreds of single completions a second stays in tens of megabytes."""

    def __init__(self) -> None:
        self.count = 0
        # chunk i (absolute: counted from the first ever added) is at position i - _base
        self._seqs: array[int] = array("Q")
        self._ats: array[float] = array("d")
        self._counts: array[int] = array("I")
        self._range_ends: array[int] = array("Q")  # where each chunk's ranges end in _ranges
        self._ranges: array[int] = array("I")  # start, end, start, end, ...: per chunk sorted
        self._by_seq: dict[int, int | list[int]] = {}  # seq -> its chunks, oldest first
        self._base = 0  # the absolute index of position 0
        self._first = 0  # the position of the oldest chunk held (those before were pruned)
        self._encoded = bytearray()  # each chunk as a ChunkSnap, encoded, in order
        self._ends: array[int] = array("Q")  # where each encoding ends in _encoded

    def __len__(self) -> int:
        """Chunks held (what a checkpoint's size follows)."""
        return len(self._seqs) - self._first

    def add(self, at: float, places: dict[int, list[int]]) -> None:
        """Messages completed at ``at``: their places, by the log object that enqueued them."""
        for seq, found in places.items():
            self._add(Chunk.of(seq, at, found))

    def _add(self, chunk: Chunk) -> None:
        index = self._base + len(self._seqs)
        self._seqs.append(chunk.seq)
        self._ats.append(chunk.at)
        self._counts.append(chunk.count)
        self._ranges.extend(chunk.ranges)
        self._range_ends.append(len(self._ranges))
        same = self._by_seq.get(chunk.seq)
        if same is None:
            self._by_seq[chunk.seq] = index
        elif isinstance(same, int):
            self._by_seq[chunk.seq] = [same, index]
        else:
            same.append(index)
        self.count += chunk.count
        snap = ChunkSnap(chunk.seq, chunk.at, chunk.ranges.tobytes(), chunk.count)
        _encoder.encode_into(snap, self._encoded, -1)
        self._ends.append(len(self._encoded))

    def chunks(self) -> Iterator[Chunk]:
        """The chunks held, oldest first."""
        for pos in range(self._first, len(self._seqs)):
            lo = self._range_ends[pos - 1] if pos else 0
            ranges = self._ranges[lo : self._range_ends[pos]]
            yield Chunk(self._seqs[pos], self._ats[pos], ranges, self._counts[pos])

    def finished_at(self, seq: int, place: int) -> float | None:
        """When the message at ``place`` of log object ``seq`` was completed, if it was."""
        same = self._by_seq.get(seq)
        if same is None:
            return None
        ranges, ends = self._ranges, self._range_ends
        for index in (same,) if isinstance(same, int) else same:
            pos = index - self._base
            lo = ends[pos - 1] if pos else 0
            # inside [start, end): after a start, before its end
            if (bisect.bisect_right(ranges, place, lo, ends[pos]) - lo) % 2 == 1:
                return self._ats[pos]
        return None

    def count_since(self, since: float) -> int:
        """How many were completed after ``since``."""
        count, ats, counts = self.count, self._ats, self._counts
        for pos in range(self._first, len(ats)):
            if ats[pos] > since:
                break
            count -= counts[pos]
        return count

    def prunable(self, before: float) -> bool:
        return len(self) > 0 and self._ats[self._first] <= before

    def prune(self, before: float) -> int:
        """Forget completions at or before ``before``; how many messages that forgot."""
        pruned, pos = 0, self._first
        ats, seqs, counts, by_seq = self._ats, self._seqs, self._counts, self._by_seq
        while pos < len(ats) and ats[pos] <= before:
            seq = seqs[pos]
            same = by_seq[seq]  # the oldest of its object is this one: both in completion order
            if isinstance(same, int):
                del by_seq[seq]
            elif len(same) == 2:
                by_seq[seq] = same[1]
            else:
                del same[0]
            pruned += counts[pos]
            pos += 1
        self._first = pos
        self.count -= pruned
        if pos >= _COMPACT_AFTER and 2 * pos >= len(ats):
            self._compact()
        return pruned

    def _compact(self) -> None:
        """Drop the columns and encodings of pruned chunks."""
        first = self._first
        start = self._ends[first - 1]
        del self._encoded[:start]
        self._ends = array("Q", [end - start for end in self._ends[first:]])
        cut = self._range_ends[first - 1]
        del self._ranges[:cut]
        self._range_ends = array("Q", [end - cut for end in self._range_ends[first:]])
        del self._seqs[:first], self._ats[:first], self._counts[:first]
        self._base += first
        self._first = 0

    def to_snap(self) -> list[ChunkSnap]:
        return _decoder.decode(self.to_raw())

    def to_raw(self) -> msgspec.Raw:
        """The chunks as a checkpoint holds them (a list of ChunkSnap), already encoded."""
        start = self._ends[self._first - 1] if self._first else 0
        with memoryview(self._encoded) as encoded:  # (released: the buffer grows later)
            return msgspec.Raw(array_header(len(self)) + encoded[start:])

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
