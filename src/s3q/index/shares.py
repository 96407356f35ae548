"""Fair delivery across priorities: start-time fair queuing, folded from the leases.

Each priority has a weight (``priority + 1``) and a start tag (its share); a delivery of a
priority starts at its tag, or at the virtual time if that is ahead (a priority that had nothing
to deliver gets no credit for the time), and moves its tag on by 1 / weight. The priority with
the lowest tag delivers next, so each gets deliveries in proportion to its weight.

``choose`` is a fair delivery: it tries the shares on a copy, taking messages a share of its
limit at a time from what each priority offers (the delivery index's ``fetch``); the Lease
folded for those chosen moves the shares themselves.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from .records import Record


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


def choose(
    shares: Shares,
    active: set[int],
    limit: int,
    per_group: int,
    fetch: Callable[[int, int], list[Record] | None],
    followers: Callable[[Record, int], list[Record]],
) -> tuple[list[Record], dict[int, deque[Record]]]:
    """Up to ``limit`` messages of the ``active`` priorities by ``shares``: the priority with
    the lowest start tag (the higher one on a tie) delivers next, one message at a time, from
    messages taken a share of the limit at a time (``fetch(priority, count)``, in order; None
    if a run's table must be read back first, which ends the choice). A group's head comes with
    up to ``per_group - 1`` of the messages after it (``followers(head, room)``).

    Returns those chosen, and by priority those taken and not chosen, for the caller to put
    back ahead of the rest of their priority."""
    chosen: list[Record] = []
    trial = shares.copy()
    taken: dict[int, deque[Record]] = {}
    stuck = False
    while len(chosen) < limit and active and not stuck:
        priority = trial.next(active)
        buffer = taken.get(priority)
        if not buffer:
            weights = sum(p + 1 for p in active)
            want = -(-(limit - len(chosen)) * (priority + 1) // weights) + 1
            got = fetch(priority, want)
            stuck = got is None
            if not got:
                active.discard(priority)
                continue
            buffer = taken[priority] = deque(got)
        rec = buffer.popleft()
        chosen.append(rec)
        trial.served(priority)
        if per_group > 1 and rec.group is not None and len(chosen) < limit:
            for follower in followers(rec, min(per_group - 1, limit - len(chosen))):
                chosen.append(follower)
                trial.served(follower.priority)
    return chosen, taken
