"""Fair delivery across priorities: start-time fair queuing, folded from the leases.

Each priority has a weight (``priority + 1``) and a start tag (its share); a delivery of a
priority starts at its tag, or at the virtual time if that is ahead (a priority that had nothing
to deliver gets no credit for the time), and moves its tag on by 1 / weight. The priority with
the lowest tag delivers next, so each gets deliveries in proportion to its weight.
"""

from __future__ import annotations

from collections.abc import Iterable


class Shares:
    """Each priority's next start tag, and the start tag of the latest delivery."""

    __slots__ = ("tags", "vtime")

    def __init__(self, tags: dict[int, float] | None = None, vtime: float = 0.0) -> None:
        self.tags: dict[int, float] = {} if tags is None else tags
        self.vtime = vtime

    def served(self, priority: int) -> None:
        """One delivery of ``priority``."""
        self.served_all((priority,))

    def served_all(self, priorities: Iterable[int]) -> None:
        """One delivery of each of ``priorities``, in order."""
        tags, vtime = self.tags, self.vtime
        for priority in priorities:
            start = tags.get(priority, 0.0)
            if vtime > start:
                start = vtime
            vtime, tags[priority] = start, start + 1.0 / (priority + 1)
        self.vtime = vtime

    def served_many(self, priority: int, count: int) -> None:
        """``count`` deliveries of ``priority`` in a row (``served_all`` of it repeated, to the
        same bits: each start is the tag the delivery before set)."""
        if count <= 0:
            return
        tags, step = self.tags, 1.0 / (priority + 1)
        start = tags.get(priority, 0.0)
        if self.vtime > start:
            start = self.vtime
        for _ in range(count - 1):
            start += step
        self.vtime, tags[priority] = start, start + step

    def next(self, active: Iterable[int]) -> int:
        """Of the priorities ``active``, the one to deliver next (the higher on a tie)."""
        tags, vtime = self.tags, self.vtime
        return min(active, key=lambda p: (max(tags.get(p, 0.0), vtime), -p))

    def copy(self) -> Shares:
        """Shares to try deliveries on, leaving these be."""
        return Shares(dict(self.tags), self.vtime)
