"""The ready structures: the messages deliverable now, by priority, in order of arrival.

Each priority has a FIFO of fresh messages (runs, and records visible at enqueue and never
changed since: version 0), in the order they arrived, and a heap of its other ready records by
arrival number. An entry goes stale once its record changes (its version moves on) or its run
is all taken; stale entries are dropped when they come to the front. What becomes deliverable
later waits on a timer (``timers``) and comes here when it fires.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping

from .records import Record, Run


class Ready:
    """Each priority's FIFO of fresh messages and heap of ready records.

    ``records`` are the index's records by id (read, never written, here). The delivery index
    takes what it delivers off the front of ``fresh`` and ``heaps``, once ``fresh_head`` and
    ``top`` have shown it (``DeliveryIndex._fetch``)."""

    __slots__ = ("_fresh_priorities", "_heap_priorities", "_records", "fresh", "heaps")

    def __init__(self, records: Mapping[str, Record]) -> None:
        self._records = records
        self.fresh: dict[int, deque[Record | Run]] = {}
        self._fresh_priorities: list[int] = []  # heap of -priority of the FIFOs in fresh
        self.heaps: dict[int, list[tuple[int, int, str]]] = {}  # heap of (arrival, version, id)
        self._heap_priorities: list[int] = []  # heap of -priority of the heaps in heaps

    def push_fresh(self, item: Record | Run) -> None:
        """``item`` waits, untouched, behind the fresh messages of its priority."""
        fifo = self.fresh.get(item.priority)
        if fifo is None:
            fifo = self.fresh[item.priority] = deque()
            heapq.heappush(self._fresh_priorities, -item.priority)
        fifo.append(item)

    def push(self, rec: Record, arrival: int) -> None:
        """Make ``rec`` deliverable from the ready heap of its priority (by ``arrival``)."""
        heap = self.heaps.get(rec.priority)
        if heap is None:
            heap = self.heaps[rec.priority] = []
            heapq.heappush(self._heap_priorities, -rec.priority)
        heapq.heappush(heap, (arrival, rec.version, rec.id))

    def restore(self, fresh: list[Record | Run]) -> None:
        """``fresh`` (records of version 0 and runs, as a snapshot holds them) wait in order
        of arrival."""
        fresh.sort(key=lambda item: item.arrival)
        for item in fresh:
            self.push_fresh(item)

    def clear(self) -> None:
        for part in (self.fresh, self.heaps, self._fresh_priorities, self._heap_priorities):
            part.clear()

    def fork(self, records: Mapping[str, Record]) -> Ready:
        """Structures of their own with the same entries, to try deliveries on (``records``:
        the trial's)."""
        forked = Ready(records)
        forked.fresh = {p: deque(fifo) for p, fifo in self.fresh.items()}
        forked._fresh_priorities = list(self._fresh_priorities)
        forked.heaps = {p: list(heap) for p, heap in self.heaps.items()}
        forked._heap_priorities = list(self._heap_priorities)
        return forked

    # -- the fronts --------------------------------------------------------------------------------

    def fresh_head(self, priority: int) -> Record | Run | None:
        """The next fresh record or run of ``priority``, dropping stale entries."""
        fifo = self.fresh.get(priority)
        while fifo:
            head = fifo[0]
            if len(head) if isinstance(head, Run) else head.version == 0:
                return head
            fifo.popleft()
        return None

    def top(self, priority: int) -> tuple[int, int, str] | None:
        """The first ready entry of ``priority`` (arrival number, version, id), dropping stale
        ones (records changed since)."""
        heap = self.heaps.get(priority)
        while heap:
            _, version, mid = heap[0]
            rec = self._records.get(mid)
            if rec is not None and rec.version == version:
                return heap[0]
            heapq.heappop(heap)
        return None

    def top_priority(self) -> int | None:
        """The highest priority with a message deliverable from here, forgetting the FIFOs and
        heaps of those left with none."""
        priorities, fifos, best = self._fresh_priorities, self.fresh, None
        while priorities:  # the highest priority with a fresh message
            if self.fresh_head(-priorities[0]) is not None:
                best = -priorities[0]
                break
            del fifos[-heapq.heappop(priorities)]
        priorities = self._heap_priorities
        while priorities:  # and with a ready record
            priority = -priorities[0]
            if self.top(priority) is not None:
                return priority if best is None else max(best, priority)
            heapq.heappop(priorities)
            del self.heaps[priority]
        return best

    # -- reads -------------------------------------------------------------------------------------

    def oldest_quiet(self, noisy: set[str], oldest: float) -> float:
        """The earliest enqueue time of an untouched message of a quiet tenant (or of none)
        at the head of a priority, or ``oldest``."""
        for fifo in self.fresh.values():
            for item in fifo:
                if isinstance(item, Run) and len(item) and item.tenant not in noisy:
                    oldest = min(oldest, item.enqueued_at)
                    break
        return oldest
