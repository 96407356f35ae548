"""The garbage list: objects no live message, reader or recovery needs any more, each stamped
with the log object at which it became garbage (``payload_refs``), oldest first.

A queue of single calls turns a log object into garbage at nearly every commit, and keeps it
listed for ``gc_grace``: hundreds of thousands of entries on a busy local directory. So the
list is kept as its checkpoint encoding (a list of ``(stamp, key)``), a few dozen bytes per
entry, appended to as objects become garbage: a checkpoint copies those bytes instead of
encoding every entry again, and the bytes are those a list of tuples encodes to.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, KeysView

import msgspec

from ..log import segment
from .completed import array_header

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(list[tuple[int, str]])

#: entries forgotten from the front are dropped from the buffer once this many are
_COMPACT_AFTER = 4096


class Garbage:
    """``(stamp, key)`` entries in the order they became garbage, held encoded."""

    def __init__(self, entries: Iterable[tuple[int, str]] = ()) -> None:
        self._encoded = bytearray()
        self._ends: array[int] = array("Q")  # where each entry's encoding ends in _encoded
        self._first = 0  # the index of the oldest entry held (those before were forgotten)
        self._others: dict[str, int] = {}  # garbage that is not a log object: key -> entries
        for stamp, key in entries:
            self.add(stamp, key)

    @classmethod
    def from_raw(cls, raw: msgspec.Raw) -> Garbage:
        """The list a checkpoint holds (``to_raw``'s bytes, or an older build's list)."""
        return cls(_decoder.decode(raw))

    def __len__(self) -> int:
        return len(self._ends) - self._first

    def add(self, stamp: int, key: str) -> None:
        """``key`` became garbage at log object ``stamp``."""
        _encoder.encode_into((stamp, key), self._encoded, -1)
        self._ends.append(len(self._encoded))
        if not key.startswith(segment.PREFIX):
            self._others[key] = self._others.get(key, 0) + 1

    def entries(self) -> list[tuple[int, str]]:
        """Every entry, oldest first."""
        return _decoder.decode(self.to_raw())

    def doomed(self, stable: int) -> list[tuple[int, str]]:
        """The entries stamped at or before log object ``stable``."""
        return [(stamp, key) for stamp, key in self.entries() if stamp <= stable]

    def others(self) -> KeysView[str]:
        """The garbage that is not a log object (staged objects, large payloads' objects)."""
        return self._others.keys()

    def forget(self, gone: set[str]) -> None:
        """Objects ``gone`` were deleted: every entry of theirs leaves the list."""
        if not gone:
            return
        entries = self.entries()
        leaving = sum(1 for _, key in entries if key in gone)
        if not leaving:
            return
        for _, key in entries:
            if key in gone and key in self._others:
                if self._others[key] == 1:
                    del self._others[key]
                else:
                    self._others[key] -= 1
        if all(key in gone for _, key in entries[:leaving]):  # the oldest went: the usual case
            self._first += leaving
            if self._first >= _COMPACT_AFTER and 2 * self._first >= len(self._ends):
                start = self._ends[self._first - 1]
                del self._encoded[:start]
                self._ends = array("Q", [end - start for end in self._ends[self._first :]])
                self._first = 0
            return
        kept = [(stamp, key) for stamp, key in entries if key not in gone]
        self._encoded, self._ends, self._first, self._others = bytearray(), array("Q"), 0, {}
        for stamp, key in kept:
            self.add(stamp, key)

    def to_raw(self) -> msgspec.Raw:
        """The list as a checkpoint holds it, already encoded."""
        start = self._ends[self._first - 1] if self._first else 0
        with memoryview(self._encoded) as encoded:  # (released: the buffer grows later)
            return msgspec.Raw(array_header(len(self)) + encoded[start:])
