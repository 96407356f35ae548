"""The time each log object is stamped with (its header's ``at``): never below the object
before it, so the stamps of a log are non-decreasing in its sequence numbers and a reader finds
the log objects of a time window by binary search over their headers (``s3q.history.timeline``).

A writer's clock may step back (NTP) or run behind the clock of the writer before it (another
host): each stamp is the clock, or the stamp before it if that is later. A new writer starts
from the last stamp its recovery read (the last log object replayed, else the checkpoint's
time). The operations of an object read the writer's clock as they join the batch that the
object is stamped when it stops filling, so with a clock that does not step back, every
event of object ``N`` lies between the stamps of objects ``N - 1`` and ``N``.

Writers that keep this rule say so in every header they write: their token ends with
:data:`MARK`. No format changes: the token is an opaque string to every reader, and a log
object written by an older build (no mark) is read without the guarantee.

:class:`StampClock` stamps a writer's objects; :class:`StampReader` reads them back and finds
the first object past a time by binary search (history's time windows, history retention).
"""

from __future__ import annotations

from collections.abc import Callable

from ..store import NotFound, Store
from . import segment, tables

MARK = ".t"  # the end of the token of a writer whose stamps never go back


def marked(writer: str) -> bool:
    """Whether the writer of a log object (its header's ``writer``) keeps the rule."""
    return writer.endswith(MARK)


class StampClock:
    """The stamps of one writer: ``clock()``, never below the stamp before."""

    def __init__(self, clock: Callable[[], float], floor: float = 0.0) -> None:
        self.clock = clock
        self.last = floor

    def after(self, at: float) -> None:
        """A log object stamped ``at`` precedes the next stamp (read while recovering)."""
        self.last = max(self.last, at)

    def __call__(self) -> float:
        self.last = max(self.last, self.clock())
        return self.last


class StampReader:
    """The stamps of a queue's log objects, read once each (``None``: gone meanwhile)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.read: dict[int, segment.Stamp | None] = {}

    async def of(self, seq: int) -> segment.Stamp | None:
        if seq not in self.read:
            try:
                self.read[seq] = segment.stamp(await tables.tail(self.store, seq), segment.key(seq))
            except NotFound:
                self.read[seq] = None
        return self.read[seq]

    async def first(self, seqs: list[int], test: Callable[[segment.Stamp], bool]) -> int:
        """Where in ``seqs`` (ascending) the first object whose stamp passes ``test`` lies,
        ``len(seqs)`` if none, for a ``test`` that once passed passes for every later object;
        an object gone meanwhile fails it (it was older)."""
        low, high = 0, len(seqs)
        while low < high:
            mid = (low + high) // 2
            found = await self.of(seqs[mid])
            if found is not None and test(found):
                high = mid
            else:
                low = mid + 1
        return low

    def forget_through(self, seq: int) -> None:
        """Drop what was read of the objects up to ``seq`` (no search will ask again)."""
        self.read = {s: stamp for s, stamp in self.read.items() if s > seq}
