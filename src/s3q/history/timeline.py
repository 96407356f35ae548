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

from ..log import stamps
from ..log.stamps import StampReader
from ..store import Store


async def window(
    store: Store, seqs: list[int], since: float | None, until: float | None
) -> tuple[list[int], StampReader]:
    """The log objects among ``seqs`` (ascending) that may hold events at ``since`` to
    ``until`` (None: unbounded), and the stamps read to find them."""
    found = StampReader(store)
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
