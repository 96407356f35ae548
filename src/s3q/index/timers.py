"""Timers: when each record or leased stretch next changes (a delay or a backoff ends, a lease
runs out, a group's head stops waiting).

Two heaps by time. A record's entry is (time, arrival, version, id), stale once the record
changed (its version moved on); a stretch's is (until, arrival, token), stale once the stretch
holds no member. Stale entries are skipped when they come up. A timer that fires hands what it
held to the ready structures (``ready``, through the hook the delivery index owning both gives)
or, a lease run out with no attempt left, back to be buried.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from .records import LEASED, Record
from .stretches import Stretch

T = TypeVar("T", bound=tuple[Any, ...])


def _due(heap: list[T], now: float) -> Iterator[T]:
    """The entries of timer ``heap`` (each a tuple starting with its time) due by ``now``, in
    no order: the heap walked from its root, never below an entry not due."""
    stack = [0] if heap else []
    while stack:
        i = stack.pop()
        if i < len(heap) and heap[i][0] <= now:
            stack += (2 * i + 1, 2 * i + 2)
            yield heap[i]


class Timers:
    """The timers of records and of leased stretches; ``records`` are the index's records by
    id, ``stretches`` its leased stretches by token (read, never written, here).

    The owner's hooks, for what fired timers make deliverable: ``ready`` takes a record (with
    its arrival number) into the ready structures, ``waits`` says whether a record waits
    behind an earlier message of its group (it is scheduled when it heads it), and ``lapsed``
    makes records of the members of a stretch whose lease ran out."""

    __slots__ = (
        "_lapsed",
        "_ready",
        "_records",
        "_stretches",
        "_waits",
        "of_records",
        "of_stretches",
    )

    def __init__(
        self,
        records: Mapping[str, Record],
        stretches: Mapping[str, Stretch],
        ready: Callable[[Record, int], None],
        waits: Callable[[Record], bool],
        lapsed: Callable[[Stretch], list[Record]] | None,
    ) -> None:
        self._records, self._stretches = records, stretches
        self._ready, self._waits, self._lapsed = ready, waits, lapsed
        self.of_records: list[tuple[float, int, int, str]] = []  # (time, arrival, version, id)
        self.of_stretches: list[tuple[float, int, str]] = []  # (until, arrival, token)

    # -- setting -----------------------------------------------------------------------------------

    def delay(self, rec: Record) -> None:
        """``rec``, new, becomes deliverable when its delay ends."""
        heapq.heappush(self.of_records, (rec.visible_at, rec.arrival, 0, rec.id))

    def push(self, rec: Record) -> None:
        """``rec``, just changed, next changes when its lease runs out (leased) or it becomes
        visible (queued)."""
        when = rec.lease_until if rec.state == LEASED else rec.visible_at
        heapq.heappush(self.of_records, (when, rec.arrival, rec.version, rec.id))

    def hold(self, rec: Record, until: float) -> None:
        """``rec``, out of the ready structures, is looked at again at ``until``."""
        heapq.heappush(self.of_records, (until, rec.arrival, rec.version, rec.id))

    def leased(self, recs: list[Record], stretches: list[Stretch]) -> None:
        """``recs`` and ``stretches`` were leased: what is held of the records elsewhere goes
        stale (their versions move on), and each record runs out on a timer, each stretch on
        one for all its members."""
        timers, push = self.of_records, heapq.heappush
        for rec in recs:
            rec.version += 1
            push(timers, (rec.lease_until, rec.arrival, rec.version, rec.id))
        timers_of_stretches = self.of_stretches
        for stretch in stretches:
            push(timers_of_stretches, (stretch.until, stretch.arrival, stretch.token))

    def restore(self, recs: Iterable[Record]) -> None:
        """Timers for ``recs`` (versions 0, as a snapshot holds them), in one heapify."""
        timers = self.of_records
        for rec in recs:
            when = rec.lease_until if rec.state == LEASED else rec.visible_at
            timers.append((when, rec.arrival, 0, rec.id))
        heapq.heapify(timers)

    def clear(self) -> None:
        self.of_records.clear()
        self.of_stretches.clear()

    def fork(
        self,
        records: Mapping[str, Record],
        ready: Callable[[Record, int], None],
        waits: Callable[[Record], bool],
        lapsed: Callable[[Stretch], list[Record]] | None,
    ) -> Timers:
        """Timers of their own with the same entries, to try deliveries on (``records`` and the
        hooks: the trial's)."""
        forked = Timers(records, self._stretches, ready, waits, lapsed)
        forked.of_records = list(self.of_records)
        forked.of_stretches = list(self.of_stretches)
        return forked

    # -- firing ------------------------------------------------------------------------------------

    def fire(self, now: float, max_attempts: int) -> list[Record]:
        """Take out the timers due by ``now``: each record they held becomes deliverable
        (``ready``), but for a group's later message (``waits``) and for leases run out with no
        attempt left, which are returned, to be buried. A stretch whose lease ran out gives its
        members as records (``lapsed``), each deliverable again or to be buried alike."""
        bury: list[Record] = []
        timers, records, ready, waits = self.of_records, self._records, self._ready, self._waits
        while timers and timers[0][0] <= now:
            _, n, version, mid = heapq.heappop(timers)
            rec = records.get(mid)
            if rec is None or rec.version != version:
                continue
            if rec.state == LEASED and rec.attempts >= max_attempts:
                bury.append(rec)
            elif not waits(rec):
                ready(rec, n)
        timers_of_stretches, stretches = self.of_stretches, self._stretches
        while timers_of_stretches and timers_of_stretches[0][0] <= now:
            stretch = stretches.get(heapq.heappop(timers_of_stretches)[2])
            if stretch is None or not stretch.left:
                continue
            assert self._lapsed is not None
            for rec in self._lapsed(stretch):  # (in no group)
                if rec.attempts >= max_attempts:
                    bury.append(rec)
                else:
                    ready(rec, rec.arrival)
        return bury

    # -- reads -------------------------------------------------------------------------------------

    def best_priority(self, now: float, best: int | None, max_attempts: int) -> int | None:
        """The highest priority above ``best`` of a message the timers due by ``now`` would
        make deliverable (as ``fire`` would), or ``best``; the timers are left as they are."""
        records, waits = self._records, self._waits
        for _, _, version, mid in _due(self.of_records, now):
            rec = records.get(mid)
            if rec is None or rec.version != version or (best is not None and rec.priority <= best):
                continue
            if not (rec.state == LEASED and rec.attempts >= max_attempts) and not waits(rec):
                best = rec.priority
        if max_attempts > 1:  # (a stretch's members have had one attempt)
            for _, _, token in _due(self.of_stretches, now):
                stretch = self._stretches.get(token)
                if (
                    stretch is not None
                    and stretch.left
                    and (best is None or stretch.priority > best)
                ):
                    best = stretch.priority
        return best

    def next_change(self) -> float | None:
        """The earliest time a timer fires (a delay ends, a lease expires), if any, dropping
        stale entries at the front."""
        timers, when = self.of_records, None
        while timers:
            _, _, version, mid = timers[0]
            rec = self._records.get(mid)
            if rec is not None and rec.version == version:
                when = timers[0][0]
                break
            heapq.heappop(timers)
        timers_of_stretches = self.of_stretches
        while timers_of_stretches:
            stretch = self._stretches.get(timers_of_stretches[0][2])
            if stretch is not None and stretch.left:
                until = timers_of_stretches[0][0]
                return until if when is None else min(when, until)
            heapq.heappop(timers_of_stretches)
        return when
