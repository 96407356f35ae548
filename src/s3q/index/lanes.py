"""Noisy tenants' lanes: the messages of a noisy tenant met at the head of their priority wait
aside, in a lane per tenant and priority, so quiet tenants' messages go first.

A lane is a heap of (arrival number, version or -1 for a run, order, record or run); an entry
is stale once its record changed (version) or its run moved on. Quiet tenants' lanes (a tenant
quiet again) are served in arrival order beside the rest; noisy ones in turns, the tenant with
the fewest messages in flight first (``noisy_turn``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import NamedTuple

from .records import Record, Run
from .tenants import Tenants

Lane = list[tuple[int, int, int, "Record | Run"]]


def front(item: Record | Run) -> int:
    """The arrival number of the next message ``item`` would deliver."""
    return item.front() if isinstance(item, Run) else item.arrival


def noisy_turn(ranked: list[tuple[int, int, str]], wanted: int) -> tuple[str, int]:
    """Among noisy tenants ranked by (messages in flight, earliest arrival, name), the one to
    serve and how many of the ``wanted`` it gets: until the next has as few in flight, or, when
    they are even, an equal part each."""
    ranked.sort()
    flight, _, name = ranked[0]
    if len(ranked) == 1:
        return name, wanted
    return name, min(wanted, max(ranked[1][0] - flight, -(-wanted // len(ranked))))


class Turn(NamedTuple):
    """What goes next beside the head of a priority: up to ``room`` messages of ``tenant``'s
    lane, those numbered before ``before``; or, with no tenant, the head, up to ``bound``."""

    tenant: str | None
    room: int
    before: int | None
    bound: int | None


class LaneHooks(NamedTuple):
    """What lanes ask of the index that owns them."""

    take: Callable[[Run, int], list[Record]]
    own: Callable[[Run], Run]
    deliverable: Callable[[Record, float], bool]


class Lanes:
    """Every priority's lanes of messages set aside.

    The owner's hooks: ``take`` takes members out of a run (with its bookkeeping), ``own``
    gives the run to take from (a copy, in a trial), ``deliverable`` says whether a group's
    head may go now (else the owner puts it on a timer)."""

    def __init__(self, tenants: Tenants, hooks: LaneHooks) -> None:
        self.by_priority: dict[int, dict[str, Lane]] = {}
        self._tenants = tenants
        self._take, self._own, self._deliverable = hooks.take, hooks.own, hooks.deliverable
        self._order = 0  # entries pushed so far (ties in a lane go first come, first served)

    def __bool__(self) -> bool:
        return bool(self.by_priority)

    def fork(self, hooks: LaneHooks) -> Lanes:
        """Lanes of their own with the same entries, to try deliveries on."""
        forked = Lanes(self._tenants, hooks)
        forked.by_priority = {
            p: {name: list(lane) for name, lane in lanes.items()}
            for p, lanes in self.by_priority.items()
        }
        forked._order = self._order
        return forked

    def of(self, priority: int) -> dict[str, Lane]:
        """The lanes of ``priority`` (made if none)."""
        return self.by_priority.setdefault(priority, {})

    def set_aside(self, priority: int, item: Record | Run) -> None:
        """``item``, a noisy tenant's, waits in its lane of ``priority``."""
        assert item.tenant is not None
        self.push(self.of(priority).setdefault(item.tenant, []), item)

    def push(self, lane: Lane, item: Record | Run) -> None:
        version = -1 if isinstance(item, Run) else item.version
        self._order += 1
        heapq.heappush(lane, (front(item), version, self._order, item))

    def drop_empty(self, priority: int) -> None:
        """Forget ``priority``'s lanes if none is left."""
        if not self.by_priority.get(priority, True):
            del self.by_priority[priority]

    @staticmethod
    def head(lane: Lane) -> int | None:
        """The arrival number of the first valid entry of ``lane``, dropping stale ones."""
        while lane:
            n, version, _, item = lane[0]
            if isinstance(item, Run):
                if len(item) and item.front() == n:
                    return n
            elif item.version == version:
                return n
            heapq.heappop(lane)
        return None

    def next(self, lane: Lane, now: float) -> int | None:
        """``head``, past a group's head that must wait for messages after it still leased."""
        while (n := self.head(lane)) is not None:
            item = lane[0][3]
            if isinstance(item, Run) or self._deliverable(item, now):
                return n
            heapq.heappop(lane)
        return None

    def heads(self, priority: int) -> list[Record | Run]:
        """The first message (or run) of each lane of ``priority``."""
        return [
            lane[0][3]
            for lane in self.by_priority.get(priority, {}).values()
            if self.head(lane) is not None
        ]

    def top_priority(self) -> int | None:
        """The highest priority with messages aside, forgetting lanes left with none."""
        for priority in sorted(self.by_priority, reverse=True):
            lanes = self.by_priority[priority]
            for name in list(lanes):
                if self.head(lanes[name]) is None:
                    del lanes[name]
            if lanes:
                return priority
            del self.by_priority[priority]
        return None

    def quiet(self, lanes: dict[str, Lane], now: float) -> tuple[int, str, int | None] | None:
        """The lane of a tenant quiet again with the earliest message: (its number, tenant,
        the number of the next lane's earliest); lanes left empty are dropped."""
        found: list[tuple[int, str]] = []
        for name in list(lanes):
            n = self.next(lanes[name], now)
            if n is None:
                del lanes[name]
            elif not self._tenants.noisy(name, now):
                found.append((n, name))
        if not found:
            return None
        found.sort()
        return found[0][0], found[0][1], found[1][0] if len(found) > 1 else None

    def turn(
        self,
        lanes: dict[str, Lane],
        head: int | None,
        bound: int | None,
        given: dict[str, int],
        wanted: int,
        now: float,
    ) -> Turn | None:
        """Whether ``lanes`` go before the head of their priority (numbered ``head``; None:
        nothing else is left) and how far, given the head would go up to ``bound``; None if
        nothing at all is left."""
        quiet = self.quiet(lanes, now)
        if quiet is not None and (head is None or quiet[0] < head):
            before = head
            if quiet[2] is not None and (before is None or quiet[2] < before):
                before = quiet[2]  # (the next lane's message is next after)
            return Turn(quiet[1], wanted, before, bound)
        if head is None:
            aside = self.noisy_next(lanes, given, wanted, now)
            return None if aside is None else Turn(aside[0], aside[1], None, bound)
        if quiet is not None and (bound is None or quiet[0] < bound):
            bound = quiet[0]  # the head goes, up to the earliest quiet lane
        return Turn(None, 0, None, bound)

    def noisy_next(
        self, lanes: dict[str, Lane], given: dict[str, int], wanted: int, now: float
    ) -> tuple[str, int] | None:
        """The noisy tenant to deliver from, and how many of the ``wanted`` (``noisy_turn``,
        counting ``given``: what this delivery chose of each so far)."""
        in_flight = self._tenants.in_flight_of
        ranked = [
            (in_flight(name) + given.get(name, 0), n, name)
            for name, lane in lanes.items()
            if (n := self.next(lane, now)) is not None
        ]
        return noisy_turn(ranked, wanted) if ranked else None

    def take(
        self, lanes: dict[str, Lane], name: str, count: int, bound: int | None, now: float
    ) -> list[Record] | None:
        """Up to ``count`` messages from the front of ``name``'s lane, in order, those before
        arrival number ``bound`` (if given); a group's head ends them. None if a run's table
        must be read back first (and nothing was taken)."""
        lane = lanes[name]
        taken: list[Record] = []
        while len(taken) < count:
            n = self.head(lane)
            if n is None or (bound is not None and n >= bound):
                break
            item = heapq.heappop(lane)[3]
            if isinstance(item, Run):
                if item.table is None:
                    self.push(lane, item)
                    return taken or None
                item = self._own(item)
                room = count - len(taken)
                if bound is not None:
                    room = min(room, bound - n)
                taken.extend(self._take(item, room))
                if len(item):
                    self.push(lane, item)
            elif self._deliverable(item, now):
                taken.append(item)
                if item.group is not None:
                    break
        return taken

    def oldest_quiet(self, noisy: set[str], oldest: float) -> float:
        """The earliest enqueue time of a quiet tenant's message aside, or ``oldest``."""
        for lanes in self.by_priority.values():
            for name, lane in lanes.items():
                if name not in noisy and self.head(lane) is not None:
                    oldest = min(oldest, lane[0][3].enqueued_at)
        return oldest
