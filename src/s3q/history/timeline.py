"""Which log objects hold the history of a time window, found from their stamps alone.

Every event of log object ``N`` happened at or before its stamp (its header's ``at``: the
operations read the writer's clock before the object was stamped), and, for objects of writers
that keep stamps in order (``s3q.log.stamps``), at or after the stamp of object ``N - 1``. So
over those objects the events at ``since``..``until`` lie in the objects from the first stamped
at or after ``since`` through the first stamped after ``until``, both found by binary search:
O(log N) headers read (one ranged GET each, mostly), none of the objects skipped.

Log objects of older builds (writers whose stamps carry no promise) come first in a log that
a newer build took over; they are all read (scanned, each event filtered by its time). Where
they end is found by binary search too.
"""

from __future__ import annotations

from collections.abc import Callable

from ..log import segment, stamps, tables
from ..store import NotFound, Store


class Stamps:
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


async def window(
    store: Store, seqs: list[int], since: float | None, until: float | None
) -> tuple[list[int], Stamps]:
    """The log objects among ``seqs`` (ascending) that may hold events at ``since`` to
    ``until`` (None: unbounded), and the stamps read to find them."""
    found = Stamps(store)
    if (since is None and until is None) or not seqs:
        return seqs, found
    start = await found.first(seqs, lambda s: stamps.marked(s.writer))
    old, ordered = seqs[:start], seqs[start:]
    low, high = 0, len(ordered)
    if since is not None:
        low = await found.first(ordered, lambda s: s.at >= since)
    if until is not None:
        high = await found.first(ordered, lambda s: s.at > until) + 1
    return old + ordered[low:high], found
