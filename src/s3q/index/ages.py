"""Ages: when the queue's live messages were enqueued, oldest first, so that those past the
queue's ``retention`` are found without a pass over the index (``removal.retiring``).

Kept only once the writer asks (``watch``: a queue whose retention is on); until then, and on
every reader of the queue, the index pays a check of one flag where messages are added. Two
heaps: the runs, by the log object that enqueued them and their enqueue time (a run's members,
and the members of the stretches leased from it, share both: one entry however many), and the
records, by id. An entry stays when its messages finish: it is skipped when it comes up, and
a heap that an entry would take over twice the index's entries of its kind (and ``SLACK``
more) is rebuilt from the index, so it never grows past twice the largest the index was.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping

from .records import DONE, Record, Run
from .runs import RunIndex
from .stretches import Stretches

#: entries a heap may hold beyond twice the index's before it is rebuilt
SLACK = 1024


class Ages:
    """The enqueue times of the runs (by log object) and records (by id) of an index, oldest
    first, while ``watching``; ``messages``, ``runs`` and ``stretches`` are the index's (read,
    never written, here)."""

    __slots__ = ("_messages", "_records", "_runs", "_seqs", "_stretches", "watching")

    def __init__(
        self, messages: Mapping[str, Record], runs: RunIndex, stretches: Stretches
    ) -> None:
        self._messages, self._runs, self._stretches = messages, runs, stretches
        self.watching = False
        self._seqs: list[tuple[float, int]] = []  # (enqueue time, log object) of runs
        self._records: list[tuple[float, str]] = []  # (enqueue time, id) of records

    # -- what the index tells, while watching ------------------------------------------------------

    def run(self, run: Run) -> None:
        """``run`` was added."""
        if self.watching:
            heapq.heappush(self._seqs, (run.enqueued_at, run.seq))
            if len(self._seqs) > 2 * (self._runs.count + len(self._stretches)) + SLACK:
                self._rebuild_runs()

    def record(self, rec: Record) -> None:
        """``rec`` became a record of the index."""
        if self.watching:
            heapq.heappush(self._records, (rec.enqueued_at, rec.id))
            self._check_records()

    def records(self, recs: Iterable[Record]) -> None:
        """``recs`` became records of the index."""
        if self.watching:
            heap, push = self._records, heapq.heappush
            for rec in recs:
                push(heap, (rec.enqueued_at, rec.id))
            self._check_records()

    # -- what the writer asks ----------------------------------------------------------------------

    def watch(self) -> None:
        """Keep the ages from now on (built from the index as it is)."""
        if not self.watching:
            self.watching = True
            self._rebuild_runs()
            self._rebuild_records()

    def stop(self) -> None:
        """Keep them no longer (the queue's retention was turned off)."""
        self.watching = False
        self._seqs, self._records = [], []

    def due(self, cutoff: float) -> bool:
        """Whether an entry enqueued at or before ``cutoff`` may name a live message."""
        seqs, records = self._seqs, self._records
        return bool((seqs and seqs[0][0] <= cutoff) or (records and records[0][0] <= cutoff))

    def pop(self, cutoff: float) -> tuple[list[int], list[str]]:
        """Take out every entry enqueued at or before ``cutoff``: the log objects of those of
        runs and the ids of those of records, each once, oldest first. The caller retires
        every live message they name that was enqueued at or before ``cutoff``."""
        seqs: dict[int, None] = {}
        mids: dict[str, None] = {}
        heap = self._seqs
        while heap and heap[0][0] <= cutoff:
            seqs[heapq.heappop(heap)[1]] = None
        records = self._records
        while records and records[0][0] <= cutoff:
            mids[heapq.heappop(records)[1]] = None
        return list(seqs), list(mids)

    def oldest(self) -> float | None:
        """The earliest enqueue time an entry holds (it may name only finished messages)."""
        tops = [heap[0][0] for heap in (self._seqs, self._records) if heap]
        return min(tops) if tops else None

    # -- rebuilding --------------------------------------------------------------------------------

    def _check_records(self) -> None:
        if len(self._records) > 2 * len(self._messages) + SLACK:
            self._rebuild_records()

    def _rebuild_runs(self) -> None:
        entries = {(run.enqueued_at, run.seq) for run in self._runs}
        entries.update((stretch.enqueued_at, stretch.seq) for stretch in self._stretches)
        self._seqs = list(entries)
        heapq.heapify(self._seqs)

    def _rebuild_records(self) -> None:
        self._records = [
            (rec.enqueued_at, rec.id) for rec in self._messages.values() if rec.state != DONE
        ]
        heapq.heapify(self._records)
