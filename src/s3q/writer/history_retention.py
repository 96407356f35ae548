"""History retention: the garbage that the last ``history_retention`` seconds of history holds.

With ``history_retention`` set, garbage collection keeps every log object younger than it (and
the payload objects those refer to), so that period's history stays readable (``s3q.history``).
An object's time is the ``at`` of its header; log objects are written in time order, so the
*horizon*, the newest garbage log object written at or before ``now - history_retention``,
splits the garbage in two: at or before it, past retention; after it, held. The horizon is found
by binary search over the garbage log objects (``s3q.log.stamps.StampReader``), reading the
stamp of those whose time is not known yet (a ranged GET each, remembered), and only when
``history_retention`` is set.

A payload object is held as long as the log object it goes with: a blob as long as the log
object that enqueued it, a staged object as long as the one that made it garbage.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..index import payload_refs
from ..log import ids, segment
from ..log.stamps import StampReader
from ..store import Store


def governing_seq(stamp: int, key: str) -> int:
    """The log object whose age says when history retention lets garbage ``key`` (stamped
    ``stamp``) go."""
    seq = segment.seq_of(key)
    if seq is not None:
        return seq
    if key.startswith(payload_refs.blob_key("")):
        return ids.enqueued_by(key[len(payload_refs.blob_key("")) :]) or stamp
    return stamp


class Horizon:
    """How far history retention lets collection go, and what it holds back."""

    def __init__(self) -> None:
        self.seq = 0  # every log object at or before it is past retention
        self.held = 0  # garbage objects the last pass kept for history alone
        self._stamps: StampReader | None = None  # of the objects after ``seq``, as read

    async def advance(self, store: Store, garbage: Iterable[int], cutoff: float) -> int:
        """Move past the garbage log objects ``garbage`` written at or before ``cutoff``; the
        horizon."""
        if self._stamps is None or self._stamps.store is not store:
            self._stamps = StampReader(store)
        candidates = sorted(s for s in set(garbage) if s > self.seq)
        young = await self._stamps.first(candidates, lambda stamp: stamp.at > cutoff)
        if young:
            self.seq = candidates[young - 1]
            self._stamps.forget_through(self.seq)
        return self.seq
