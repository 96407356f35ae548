"""The delivery index: which message goes next, strictly by priority or by fair shares.

Deliverable messages wait in one of two places per priority: fresh ones (runs, and records
visible at enqueue and never changed since: version 0) in a FIFO, the others in a heap by
arrival number. Timers say when a record next becomes deliverable (a delay or a backoff ends, a
lease runs out); a group delivers one message at a time, in order; noisy tenants' messages wait
in lanes of their own (``lanes``); fair delivery shares priorities by weight (``shares``).

``select`` takes what it chooses out of these structures (the caller folds a Lease for them at
once), members of runs as leased stretches when the caller asks (``stretches``); ``peek`` runs
the same ``select`` on a fork that copies the structures and takes from copies of the runs, so
what peek shows is what a dequeue would deliver, by the same code.
"""

from __future__ import annotations

import heapq
from collections import ChainMap, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from typing import Any, TypeVar, cast

from .groups import Groups
from .lanes import LaneHooks, Lanes, front
from .records import LEASED, QUEUED, Record, Run
from .shares import Shares
from .stretches import Stretch
from .tenants import Tenants

T = TypeVar("T", bound=tuple[Any, ...])

Chosen = Record | Stretch  # what a delivery hands out: a message, or a stretch of a run's


def _same(run: Run) -> Run:
    return run


def _due(heap: list[T], now: float) -> Iterator[T]:
    """The entries of timer ``heap`` (each a tuple starting with its time) due by ``now``, in
    no order: the heap walked from its root, never below an entry not due."""
    stack = [0] if heap else []
    while stack:
        i = stack.pop()
        if i < len(heap) and heap[i][0] <= now:
            stack += (2 * i + 1, 2 * i + 2)
            yield heap[i]


class DeliveryIndex:
    """The structures that make dequeue, expiry and groups cheap.

    ``records`` are the index's records by id, ``stretches`` its leased stretches by token
    (read, never written, here); ``take`` takes members out of a run as records and ``lease`` as
    a stretch, and ``lapsed`` makes the members of a stretch whose lease ran out records,
    doing the owner's bookkeeping."""

    def __init__(
        self,
        records: Mapping[str, Record],
        tenants: Tenants,
        take: Callable[[Run, int], list[Record]],
        own: Callable[[Run], Run] = _same,
        stretches: Mapping[str, Stretch] | None = None,
        lease: Callable[[Run, int], Stretch] | None = None,
        lapsed: Callable[[Stretch], list[Record]] | None = None,
    ) -> None:
        self._records, self._tenants, self._take, self._own = records, tenants, take, own
        self._stretches: Mapping[str, Stretch] = {} if stretches is None else stretches
        self._lease, self._lapsed = lease, lapsed
        self._stretch_timers: list[tuple[float, int, str]] = []  # (until, arrival, token)
        self._fresh: dict[int, deque[Record | Run]] = {}
        self._fresh_priorities: list[int] = []  # heap of -priority of the FIFOs in _fresh
        self._ready: dict[int, list[tuple[int, int, str]]] = {}  # heap of (arrival, version, id)
        self._ready_priorities: list[int] = []  # heap of -priority of the heaps in _ready
        self._timers: list[tuple[float, int, int, str]] = []  # (time, arrival, version, id)
        self.groups = Groups(records)
        self.lanes = Lanes(tenants, LaneHooks(take, own, self._deliverable_head))
        self.shares = Shares()

    # -- folding: what the index learns of each message --------------------------------------------

    def push_fresh(self, item: Record | Run) -> None:
        """``item`` waits, untouched, behind the fresh messages of its priority."""
        fifo = self._fresh.get(item.priority)
        if fifo is None:
            fifo = self._fresh[item.priority] = deque()
            heapq.heappush(self._fresh_priorities, -item.priority)
        fifo.append(item)

    def delay(self, rec: Record) -> None:
        """``rec``, new, becomes deliverable when its delay ends."""
        heapq.heappush(self._timers, (rec.visible_at, rec.arrival, 0, rec.id))

    def schedule(self, rec: Record) -> None:
        """Index ``rec`` anew after a change: a timer for when it next becomes deliverable."""
        rec.version += 1
        if rec.state != LEASED and self.follows(rec):
            # scheduled when it heads its group (a leased one: to die when it runs out); its
            # head may have waited for its lease, which is over
            self._head_again(rec)
            return
        when = rec.lease_until if rec.state == LEASED else rec.visible_at
        heapq.heappush(self._timers, (when, rec.arrival, rec.version, rec.id))

    def _head_again(self, rec: Record) -> None:
        """Index the head of ``rec``'s group anew: ``rec``, after it, is no longer leased, and
        the head may have been waiting for that (``_deliverable_head``)."""
        assert rec.group is not None
        members = self.groups.members.get(rec.group)
        if members and members[0] != rec.id:
            self.schedule(self._records[members[0]])

    def leased(self, recs: list[Record]) -> None:
        """``recs`` were leased, in this order: each is a delivery of its priority (``shares``)
        and runs out on a timer."""
        self.shares.served_all(rec.priority for rec in recs)
        timers, push = self._timers, heapq.heappush
        for rec in recs:
            rec.version += 1
            push(timers, (rec.lease_until, rec.arrival, rec.version, rec.id))

    def leased_stretch(self, stretch: Stretch) -> None:
        """``stretch`` was leased: a delivery of its priority per member, and one timer."""
        self.shares.served_many(stretch.priority, stretch.count)
        heapq.heappush(self._stretch_timers, (stretch.until, stretch.arrival, stretch.token))

    def join(self, rec: Record) -> bool:
        """``Groups.join``."""
        return self.groups.join(rec)

    def follows(self, rec: Record) -> bool:
        """``Groups.follows``."""
        return self.groups.follows(rec)

    def leave(self, rec: Record) -> None:
        """``rec`` is finished: the next message of its group may head it, or its head, if it
        was waiting for ``rec``'s lease, may go."""
        head = self.groups.leave(rec)
        if head is not None:
            self.schedule(head)
        else:
            self._head_again(rec)

    def clear(self) -> None:
        """Nothing is left to deliver (a purge)."""
        for part in (self.groups, self._ready, self._fresh, self.lanes.by_priority):
            part.clear()
        self._ready_priorities.clear()
        self._fresh_priorities.clear()
        self._timers.clear()
        self._stretch_timers.clear()

    def restore(self, records: Iterable[Record], runs: Iterable[Run]) -> None:
        """The structures for ``records`` (in arrival order, versions 0, their groups joined)
        and untouched ``runs``, as a snapshot holds them."""
        fresh: list[Record | Run] = []
        for rec in records:
            if rec.state == LEASED or (rec.state == QUEUED and not self.follows(rec)):
                if rec.state == QUEUED and not rec.backoff and rec.visible_at <= rec.enqueued_at:
                    fresh.append(rec)
                else:
                    when = rec.lease_until if rec.state == LEASED else rec.visible_at
                    self._timers.append((when, rec.arrival, 0, rec.id))
        heapq.heapify(self._timers)
        fresh.extend(runs)
        fresh.sort(key=lambda item: item.arrival)
        for item in fresh:
            self.push_fresh(item)

    # -- choosing ----------------------------------------------------------------------------------

    def expire(self, now: float, max_attempts: int) -> list[Record]:
        """Make what is due by ``now`` deliverable, but for expired leases with no attempts
        left: those are returned, and the caller must apply a Bury for them at once (they
        have left the ready structures). Burying a group's head frees its next message, so
        expire before ``select``."""
        bury: list[Record] = []
        timers, records = self._timers, self._records
        while timers and timers[0][0] <= now:
            _, n, version, mid = heapq.heappop(timers)
            rec = records.get(mid)
            if rec is None or rec.version != version:
                continue
            if rec.state == LEASED and rec.attempts >= max_attempts:
                bury.append(rec)
            elif not self.follows(rec):  # a group's later message waits to head it
                self._push_ready(rec, n)
        timers_of_stretches, stretches = self._stretch_timers, self._stretches
        while timers_of_stretches and timers_of_stretches[0][0] <= now:
            stretch = stretches.get(heapq.heappop(timers_of_stretches)[2])
            if stretch is None or not stretch.left:
                continue
            assert self._lapsed is not None
            for rec in self._lapsed(stretch):  # (in no group)
                if rec.attempts >= max_attempts:
                    bury.append(rec)
                else:
                    self._push_ready(rec, rec.arrival)
        return bury

    def select(
        self,
        now: float,
        limit: int,
        max_attempts: int,
        per_group: int = 1,
        fair: bool = False,
        stretches: bool = False,
    ) -> tuple[list[Chosen], list[Record]]:
        """Up to ``limit`` deliverable messages, best first, and expired ones to bury (as
        ``expire``: none when it was called at ``now`` and its Bury applied). A group's head
        comes with up to ``per_group - 1`` of the messages after it, in order. Strictly by
        priority, or with ``fair`` by shares; first come, first served within one. With
        ``stretches`` (strict delivery, no noisy tenant), members of runs come as stretches.

        The caller must apply a Lease for the first list and a Bury for the second at once:
        both have left the ready structures.
        """
        bury = self.expire(now, max_attempts)
        if fair:
            return list(self._select_fair(now, limit, max_attempts, per_group)), bury
        chosen: list[Chosen] = []
        count = 0  # messages chosen
        given: dict[str, int] = {}
        while count < limit:
            priority = self._top_priority()
            if priority is None:
                break
            fetched = self._fetch(priority, limit - count, now, given, stretches)
            if fetched is None:
                break  # a run's table is to be read back first (``wanted``)
            got, n = fetched
            chosen.extend(got)
            count += n
            head = chosen[-1] if chosen else None
            if per_group > 1 and head is not None and head.group is not None:
                assert isinstance(head, Record)
                room = min(per_group - 1, limit - count)
                followers = self.groups.followers(head, now, room, max_attempts)
                chosen.extend(followers)
                count += len(followers)
        return chosen, bury

    def peek(
        self, now: float, limit: int, max_attempts: int, fair: bool = False, per_group: int = 1
    ) -> list[Record]:
        """What ``select`` would deliver at ``now``, leaving the index as it is."""
        chosen = self.fork().select(now, limit, max_attempts, per_group, fair)[0]
        return [rec for rec in chosen if isinstance(rec, Record)]  # (a fork leases no stretch)

    def fork(self) -> DeliveryIndex:
        """An index of its own with the same messages, to try deliveries on: its structures are
        copies, and it takes members from copies of the runs (its records beside these)."""
        taken: dict[str, Record] = {}
        copies: dict[int, Run] = {}  # id of a run (or of its copy) -> its copy

        def own(run: Run) -> Run:
            copy = copies.get(id(run))
            if copy is None:
                copy = copies[id(run)] = run.copy()
                copies[id(copy)] = copy
            return copy

        def take(run: Run, count: int) -> list[Record]:
            recs = own(run).take(count)
            taken.update((rec.id, rec) for rec in recs)
            return recs

        def lapsed(stretch: Stretch) -> list[Record]:
            recs = list(stretch.members())  # (the stretch itself is left as it is)
            taken.update((rec.id, rec) for rec in recs)
            return recs

        records = ChainMap(taken, cast("MutableMapping[str, Record]", self._records))
        forked = DeliveryIndex(records, self._tenants, take, own, self._stretches, None, lapsed)
        forked._fresh = {p: deque(fifo) for p, fifo in self._fresh.items()}
        forked._fresh_priorities = list(self._fresh_priorities)
        forked._ready = {p: list(heap) for p, heap in self._ready.items()}
        forked._ready_priorities = list(self._ready_priorities)
        forked._timers = list(self._timers)
        forked._stretch_timers = list(self._stretch_timers)
        forked.groups = Groups(records)  # (the same members: read only while choosing)
        forked.groups.members = self.groups.members
        forked.lanes = self.lanes.fork(LaneHooks(take, own, forked._deliverable_head))
        forked.shares = self.shares.copy()
        return forked

    def _select_fair(
        self, now: float, limit: int, max_attempts: int, per_group: int
    ) -> list[Record]:
        """``select`` by shares: the priority with the lowest start tag (the higher one on a
        tie) delivers next, one message at a time, from messages taken a share of the limit at
        a time; those taken and not delivered go back (ahead of the rest of their priority)."""
        chosen: list[Record] = []
        trial = self.shares.copy()
        active = {
            p
            for p in {*self._fresh, *self._ready, *self.lanes.by_priority}
            if self._fresh_head(p) is not None
            or self._ready_top(p) is not None
            or self.lanes.heads(p)
        }
        taken: dict[int, deque[Record]] = {}
        given: dict[str, int] = {}
        stuck = False
        while len(chosen) < limit and active and not stuck:
            priority = trial.next(active)
            buffer = taken.get(priority)
            if not buffer:
                weights = sum(p + 1 for p in active)
                want = -(-(limit - len(chosen)) * (priority + 1) // weights) + 1
                fetched = self._fetch(priority, want, now, given)
                got = None if fetched is None else fetched[0]
                stuck = got is None
                if not got:
                    active.discard(priority)
                    continue
                buffer = taken[priority] = deque(cast("list[Record]", got))  # (no stretches)
            rec = buffer.popleft()
            chosen.append(rec)
            trial.served(priority)
            if per_group > 1 and rec.group is not None and len(chosen) < limit:
                room = min(per_group - 1, limit - len(chosen))
                for follower in self.groups.followers(rec, now, room, max_attempts):
                    chosen.append(follower)
                    trial.served(follower.priority)
        for rest in taken.values():
            for rec in rest:
                self._push_ready(rec, rec.arrival)
        return chosen

    def _fetch(
        self, priority: int, count: int, now: float, given: dict[str, int], stretches: bool = False
    ) -> tuple[list[Chosen], int] | None:
        """Up to ``count`` deliverable messages of ``priority``, in order, taken from the ready
        structures, and how many; a group's head ends the list (its followers go with it). None
        if a run's table must be read back first. With ``stretches``, members of runs come as
        stretches while no tenant is noisy.

        With tenants noisy, a message of a noisy tenant met first goes aside instead; quiet
        tenants' messages go first, in order (those aside whose tenant is quiet again among
        them), then noisy ones, the tenant with the fewest in flight first (counting ``given``:
        the deliveries chosen so far, by tenant, which this adds to)."""
        out: list[Chosen] = []
        n = 0  # messages in ``out``
        lanes = None
        if self.lanes or self._tenants.flagged:
            lanes = self.lanes.of(priority)
        lease = self._lease if stretches and lanes is None else None
        while n < count:
            fresh, top = self._fresh_head(priority), self._ready_top(priority)
            from_fresh = fresh is not None and (top is None or front(fresh) < top[0])
            head = fresh if from_fresh else None if top is None else self._records[top[2]]
            bound = top[0] if from_fresh and top is not None else None  # a run stops there
            if lanes is not None:
                if head is not None and self._tenants.noisy(head.tenant, now):
                    if from_fresh:
                        self._fresh[priority].popleft()
                    else:
                        heapq.heappop(self._ready[priority])
                    self.lanes.set_aside(priority, head)
                    continue
                number = None if head is None else front(head)
                turn = self.lanes.turn(lanes, number, bound, given, count - n, now)
                if turn is None:
                    break
                if turn.tenant is not None:
                    taken = self.lanes.take(lanes, turn.tenant, turn.room, turn.before, now)
                    if taken is None:
                        return (out, n) if out else None
                    given[turn.tenant] = given.get(turn.tenant, 0) + len(taken)
                    out.extend(taken)
                    n += len(taken)
                    if out and out[-1].group is not None:
                        break
                    continue
                bound = turn.bound
            if head is None:
                break
            if from_fresh:
                assert fresh is not None
                if isinstance(fresh, Run):
                    if fresh.table is None:
                        return (out, n) if out else None
                    room = count - n
                    if bound is not None:
                        room = min(room, bound - fresh.front())
                    run = self._own(fresh)
                    if run is not fresh:  # (a fork takes from its copy)
                        self._fresh[priority][0] = run
                    if lease is not None:
                        stretch = lease(run, room)
                        out.append(stretch)
                        n += stretch.count
                    else:
                        recs = self._take(run, room)
                        out.extend(recs)
                        n += len(recs)
                    continue
                self._fresh[priority].popleft()
                if not self._deliverable_head(fresh, now):
                    continue  # (a head restored untouched whose followers are still leased)
                out.append(fresh)
            else:
                rec = self._records[heapq.heappop(self._ready[priority])[2]]
                if not self._deliverable_head(rec, now):
                    continue
                out.append(rec)
            n += 1
            if out[-1].group is not None:
                break
        if lanes is not None:
            self.lanes.drop_empty(priority)
        return out, n

    def _deliverable_head(self, rec: Record, now: float) -> bool:
        """Whether ``rec``, out of the ready structures, is to be delivered: a group's head
        waits (on a timer) while messages after it are still leased, until they are done or
        back."""
        if rec.group is not None and (until := self.groups.held_behind(rec, now)) is not None:
            heapq.heappush(self._timers, (until, rec.arrival, rec.version, rec.id))
            return False
        return True

    def _push_ready(self, rec: Record, arrival: int) -> None:
        """Make ``rec`` deliverable from the ready heap of its priority (by ``arrival``)."""
        heap = self._ready.get(rec.priority)
        if heap is None:
            heap = self._ready[rec.priority] = []
            heapq.heappush(self._ready_priorities, -rec.priority)
        heapq.heappush(heap, (arrival, rec.version, rec.id))

    def _top_priority(self) -> int | None:
        """The highest priority with a message to deliver."""
        fresh = self._best_fresh()
        ready = self._best_ready_priority()
        if fresh is not None:
            ready = fresh.priority if ready is None else max(fresh.priority, ready)
        aside = self.lanes.top_priority() if self.lanes else None
        return ready if aside is None or (ready is not None and ready >= aside) else aside

    def _fresh_head(self, priority: int) -> Record | Run | None:
        """The next fresh record or run of ``priority``, dropping stale entries."""
        fifo = self._fresh.get(priority)
        while fifo:
            head = fifo[0]
            if len(head) if isinstance(head, Run) else head.version == 0:
                return head
            fifo.popleft()
        return None

    def _ready_top(self, priority: int) -> tuple[int, int, str] | None:
        """The first ready entry of ``priority`` (arrival number, version, id), dropping stale
        ones (records changed since)."""
        heap = self._ready.get(priority)
        while heap:
            _, version, mid = heap[0]
            rec = self._records.get(mid)
            if rec is not None and rec.version == version:
                return heap[0]
            heapq.heappop(heap)
        return None

    def _best_ready_priority(self) -> int | None:
        """The highest priority with a ready entry, forgetting those left with none."""
        priorities = self._ready_priorities
        while priorities:
            priority = -priorities[0]
            if self._ready_top(priority) is not None:
                return priority
            heapq.heappop(priorities)
            del self._ready[priority]
        return None

    def _best_fresh(self) -> Record | Run | None:
        """The first fresh record or run of the highest priority, dropping stale entries
        (records changed since, runs all taken)."""
        priorities, fresh = self._fresh_priorities, self._fresh
        while priorities:
            head = self._fresh_head(-priorities[0])
            if head is not None:
                return head
            del fresh[-heapq.heappop(priorities)]
        return None

    # -- reads -------------------------------------------------------------------------------------

    def best_priority(self, now: float, max_attempts: int) -> int | None:
        """The highest priority of a message deliverable at ``now``, as ``select`` would find
        it (the timers due by then fired), None if there is none; what ``select`` would choose
        is left as it is."""
        best = self._top_priority()
        records = self._records
        for _, _, version, mid in _due(self._timers, now):
            rec = records.get(mid)
            if rec is None or rec.version != version or (best is not None and rec.priority <= best):
                continue
            if not (rec.state == LEASED and rec.attempts >= max_attempts) and not self.follows(rec):
                best = rec.priority
        if max_attempts > 1:  # (a stretch's members have had one attempt)
            for _, _, token in _due(self._stretch_timers, now):
                stretch = self._stretches.get(token)
                if (
                    stretch is not None
                    and stretch.left
                    and (best is None or stretch.priority > best)
                ):
                    best = stretch.priority
        return best

    def next_change(self) -> float | None:
        """The earliest time a timer fires (a delay ends, a lease expires), if any."""
        timers, when = self._timers, None
        while timers:
            _, _, version, mid = timers[0]
            rec = self._records.get(mid)
            if rec is not None and rec.version == version:
                when = timers[0][0]
                break
            heapq.heappop(timers)
        timers_of_stretches = self._stretch_timers
        while timers_of_stretches:
            stretch = self._stretches.get(timers_of_stretches[0][2])
            if stretch is not None and stretch.left:
                until = timers_of_stretches[0][0]
                return until if when is None else min(when, until)
            heapq.heappop(timers_of_stretches)
        return when

    def fresh_runs(self, limit: int, fair: bool = False) -> Iterator[Run]:
        """The runs holding the first ``limit`` fresh messages, best priority first; with
        ``fair``, those of each priority (any may have its turn). Those of noisy tenants do not
        count (others' go first), nor do the heads of tenants' messages aside."""
        left, noisy = limit, self._tenants.flagged
        for priority in sorted({*self._fresh, *self.lanes.by_priority}, reverse=True):
            if fair:
                left = limit
            for head in self.lanes.heads(priority):
                if isinstance(head, Run):
                    yield head
            for item in self._fresh.get(priority, ()):
                if left <= 0:
                    break
                if isinstance(item, Run) and len(item):
                    yield item
                    left -= 0 if item.tenant in noisy else len(item)
                elif isinstance(item, Record) and item.version == 0:
                    left -= item.tenant not in noisy

    def oldest_quiet(self, noisy: set[str], oldest: float) -> float:
        """The earliest enqueue time of an untouched message of a quiet tenant (or of none)
        at the head of a priority or aside, or ``oldest``."""
        for fifo in self._fresh.values():
            for item in fifo:
                if isinstance(item, Run) and len(item) and item.tenant not in noisy:
                    oldest = min(oldest, item.enqueued_at)
                    break
        return self.lanes.oldest_quiet(noisy, oldest)
