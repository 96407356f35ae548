"""The untouched messages: runs by the log object each lies in, and the tables they hold.

A run (``records.Run``) is a series of one Append's members of one priority and one tenant,
visible at once and in no group. Members leave from the front, to become records (``take``) or
a leased stretch (``lease``); a run far from the head of its priority may hold no table, read
back when it is needed (``fill``, ``untabled``).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..log import ids
from ..log.ops import Append
from .records import Record, Run
from .stretches import Stretch, Stretches


class RunIndex:
    """Runs by log object, with the counts the index reports and budgets by."""

    def __init__(self) -> None:
        self.by_seq: dict[int, list[Run]] = {}
        self.untouched = 0  # messages in runs
        self.count = 0  # runs
        self.tabled = 0  # members of runs that hold their tables

    def __contains__(self, seq: int) -> bool:
        """Whether untouched messages lie in log object ``seq``."""
        return seq in self.by_seq

    def __iter__(self) -> Iterator[Run]:
        for runs in self.by_seq.values():
            yield from runs

    def add(self, run: Run) -> None:
        """``run``'s members are untouched messages (it holds its table, or not)."""
        self.by_seq.setdefault(run.seq, []).append(run)
        self.count += 1
        count = len(run)
        self.untouched += count
        if run.table is not None:
            self.tabled += count

    def take(self, run: Run, count: int) -> list[Record]:
        """The first ``count`` members of ``run`` (at most all) leave it, as records."""
        recs = run.take(count)
        self.taken(run, len(recs))
        return recs

    def lease(self, run: Run, count: int, stretches: Stretches) -> Stretch:
        """The first ``count`` members of ``run`` (at most all) leave it, as a stretch
        chosen for a lease (``Stretches.take``)."""
        stretch = stretches.take(run, count)
        self.taken(run, stretch.count)
        return stretch

    def taken(self, run: Run, count: int) -> None:
        """``count`` members have left the front of ``run``."""
        self.untouched -= count
        if not len(run):
            self.tabled -= run.count
            self.count -= 1
            runs = self.by_seq[run.seq]
            runs.remove(run)
            if not runs:
                del self.by_seq[run.seq]

    def retire(self, run: Run) -> None:
        """Every member of ``run`` not taken yet leaves the index (past the queue's
        retention): the run is emptied where it stands, its table read back or not."""
        if run.table is not None:
            self.tabled -= run.count
        self.untouched -= len(run)
        self.count -= 1
        run.taken, run.bytes = run.count, 0
        runs = self.by_seq[run.seq]
        runs.remove(run)
        if not runs:
            del self.by_seq[run.seq]

    def find(self, mid: str, queue: str) -> tuple[Run, int] | None:
        """The run ``mid`` is an untaken member of, and its index there."""
        where = ids.where(mid, queue)
        if where is None:
            return None
        for run in self.by_seq.get(where[0], ()):
            k = run.index_of(where[1])
            if k is not None:
                return run, k
        return None

    def fill(self, seq: int, appends: list[Append]) -> None:
        """The Appends of log object ``seq`` (read back by ``tables``): its runs without
        their tables take them back."""
        for run in self.by_seq.get(seq, ()):
            if run.table is None:
                run.fill(appends)
                self.tabled += run.count

    def untabled(self) -> set[int]:
        """The log objects of every run without its table."""
        return {seq for seq, runs in self.by_seq.items() if any(r.table is None for r in runs)}

    def clear(self) -> None:
        self.by_seq.clear()
        self.untouched = self.count = self.tabled = 0
