"""History retention: the garbage that the last ``history_retention`` seconds of history holds.

With ``history_retention`` set, garbage collection keeps every log object younger than it (and
the payload objects those refer to), so that period's history stays readable (``s3q.history``).
An object's time is the ``at`` of its header; log objects are written in time order, so the
*horizon*, the newest garbage log object written at or before ``now - history_retention``,
splits the garbage in two: at or before it, past retention; after it, held. The horizon is found
by binary search over the garbage log objects, reading the header of those whose time is not
known yet (one or two ranged GETs each, remembered), and only when ``history_retention`` is set.

A payload object is held as long as the log object it goes with: a blob as long as the log
object that enqueued it, a staged object as long as the one that made it garbage.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..index import payload_refs
from ..log import ids, segment, tables
from ..store import NotFound, Store


def governing_seq(stamp: int, key: str) -> int:
    """The log object whose age says when history retention lets garbage ``key`` (stamped
    ``stamp``) go."""
    seq = segment.seq_of(key)
    if seq is not None:
        return seq
    if key.startswith(payload_refs.blob_key("")):
        return ids.enqueued_by(key[len(payload_refs.blob_key("")) :]) or stamp
    return stamp


async def written_at(store: Store, seq: int) -> float | None:
    """When log object ``seq`` was written (its header's ``at``); None if it is gone."""
    try:
        return (await tables.header(store, seq)).at
    except NotFound:
        return None


async def first_after(store: Store, seqs: list[int], cutoff: float, times: dict[int, float]) -> int:
    """Where in ``seqs`` (log objects, ascending) the first written after ``cutoff`` lies
    (``len(seqs)`` if none): a binary search reading the times not in ``times`` (which keeps
    them). An object gone meanwhile counts as written before."""
    low, high = 0, len(seqs)
    while low < high:
        mid = (low + high) // 2
        seq = seqs[mid]
        if seq not in times and (at := await written_at(store, seq)) is not None:
            times[seq] = at
        if seq not in times or times[seq] <= cutoff:
            low = mid + 1
        else:
            high = mid
    return low


class Horizon:
    """How far history retention lets collection go, and what it holds back."""

    def __init__(self) -> None:
        self.seq = 0  # every log object at or before it is past retention
        self.held = 0  # garbage objects the last pass kept for history alone
        self._times: dict[int, float] = {}  # log seq -> written at, of objects after ``seq``

    async def advance(self, store: Store, garbage: Iterable[int], cutoff: float) -> int:
        """Move past the garbage log objects ``garbage`` written at or before ``cutoff``; the
        horizon."""
        candidates = sorted(s for s in set(garbage) if s > self.seq)
        young = await first_after(store, candidates, cutoff, self._times)
        if young:
            self.seq = candidates[young - 1]
            self._times = {s: t for s, t in self._times.items() if s > self.seq}
        return self.seq
