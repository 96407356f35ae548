"""The delivery index: which message goes next, strictly by priority or by fair shares.

Deliverable messages wait in the ready structures (``ready``: per priority, fresh ones in a
FIFO, the others in a heap by arrival number); timers say when a record next becomes
deliverable (``timers``: a delay or a backoff ends, a lease runs out); a group delivers one
message at a time, in order (``groups``); noisy tenants' messages wait in lanes of their own
(``lanes``); fair delivery shares priorities by weight (``shares``). This index coordinates
them: it folds what happens to each message into them, and chooses.

``select`` takes what it chooses out of these structures (the caller folds a Lease for them at
once), members of runs as leased stretches when the caller asks (``stretches``); ``peek`` runs
the same ``select`` on a fork that copies the structures and takes from copies of the runs, so
what peek shows is what a dequeue would deliver, by the same code.
"""

from __future__ import annotations

import heapq
from collections import ChainMap
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from typing import cast

from .groups import Groups
from .lanes import LaneHooks, Lanes, front
from .ready import Ready
from .records import LEASED, QUEUED, Record, Run
from .shares import Shares, choose
from .stretches import Stretch
from .tenants import Tenants
from .timers import Timers

Chosen = Record | Stretch  # what a delivery hands out: a message, or a stretch of a run's


def _same(run: Run) -> Run:
    return run


class DeliveryIndex:
    """The structures that make dequeue, expiry and groups cheap.

    ``records`` are the index's records by id, ``stretches`` its leased stretches by token
    (read, never written, here); ``take`` takes members out of a run as records and ``lease`` as
    a stretch, and ``lapsed`` makes the members of a stretch whose lease ran out records,
    doing the owner's bookkeeping. The owner uses the parts directly where no other part is
    concerned: ``ready.push_fresh`` (a message untouched since its enqueue), ``timers.delay``
    (a new one, delayed), ``groups.join``, ``timers.fire`` (expiry: ``QueueState.expire``) and
    ``timers.next_change``."""

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
        self.ready = Ready(records)
        self.groups = Groups(records)
        self.timers = Timers(records, self._stretches, self.ready.push, self.groups.follows, lapsed)
        self.lanes = Lanes(tenants, LaneHooks(take, own, self._deliverable_head))
        self.shares = Shares()

    # -- folding: what the index learns of each message --------------------------------------------

    def schedule(self, rec: Record) -> None:
        """Index ``rec`` anew after a change: a timer for when it next becomes deliverable."""
        rec.version += 1
        if rec.state != LEASED and self.groups.follows(rec):
            # scheduled when it heads its group (a leased one: to die when it runs out); its
            # head may have waited for its lease, which is over
            self._head_again(rec)
            return
        self.timers.push(rec)

    def _head_again(self, rec: Record) -> None:
        """Index the head of ``rec``'s group anew: ``rec``, after it, is no longer leased, and
        the head may have been waiting for that (``_deliverable_head``)."""
        assert rec.group is not None
        members = self.groups.members.get(rec.group)
        if members and members[0] != rec.id:
            self.schedule(self._records[members[0]])

    def leased(self, recs: list[Record], stretches: list[Stretch]) -> None:
        """``recs``, then ``stretches``, were leased, in this order: each message is a delivery
        of its priority (``shares``), and each record and each stretch runs out on a timer."""
        shares = self.shares
        shares.served_all(rec.priority for rec in recs)
        for stretch in stretches:
            shares.served_many(stretch.priority, stretch.count)
        self.timers.leased(recs, stretches)

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
        for part in (self.groups, self.ready, self.timers, self.lanes.by_priority):
            part.clear()

    def restore(self, records: Iterable[Record], runs: Iterable[Run]) -> None:
        """The structures for ``records`` (in arrival order, versions 0, their groups joined)
        and untouched ``runs``, as a snapshot holds them."""
        fresh: list[Record | Run] = []
        later: list[Record] = []
        for rec in records:
            if rec.state == LEASED or (rec.state == QUEUED and not self.groups.follows(rec)):
                if rec.state == QUEUED and not rec.backoff and rec.visible_at <= rec.enqueued_at:
                    fresh.append(rec)
                else:
                    later.append(rec)
        self.timers.restore(later)
        fresh.extend(runs)
        self.ready.restore(fresh)

    # -- choosing ----------------------------------------------------------------------------------

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
        ``QueueState.expire``: none when it was called at ``now`` and its Bury applied). A
        group's head comes with up to ``per_group - 1`` of the messages after it, in order.
        Strictly by priority, or with ``fair`` by shares; first come, first served within one.
        With ``stretches`` (strict delivery, no noisy tenant), members of runs come as
        stretches.

        The caller must apply a Lease for the first list and a Bury for the second at once:
        both have left the ready structures.
        """
        bury = self.timers.fire(now, max_attempts)  # (``QueueState.expire``)
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
        forked.ready = self.ready.fork(records)
        forked.groups.members = self.groups.members  # (the same: read only while choosing)
        forked.timers = self.timers.fork(records, forked.ready.push, forked.groups.follows, lapsed)
        forked.lanes = self.lanes.fork(LaneHooks(take, own, forked._deliverable_head))
        forked.shares = self.shares.copy()
        return forked

    def _select_fair(
        self, now: float, limit: int, max_attempts: int, per_group: int
    ) -> list[Record]:
        """``select`` by shares (``shares.choose``), from the priorities with a message to
        deliver; those taken and not delivered go back (ahead of the rest of their priority)."""
        ready, lanes = self.ready, self.lanes
        active = {
            p
            for p in {*ready.fresh, *ready.heaps, *lanes.by_priority}
            if ready.fresh_head(p) is not None or ready.top(p) is not None or lanes.heads(p)
        }
        if not active:
            return []
        given: dict[str, int] = {}

        def fetch(priority: int, count: int) -> list[Record] | None:
            fetched = self._fetch(priority, count, now, given)
            return None if fetched is None else cast("list[Record]", fetched[0])  # (no stretches)

        def followers(head: Record, room: int) -> list[Record]:
            return self.groups.followers(head, now, room, max_attempts)

        chosen, taken = choose(self.shares, active, limit, per_group, fetch, followers)
        for rest in taken.values():
            for rec in rest:
                ready.push(rec, rec.arrival)
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
        ready, records = self.ready, self._records
        fresh_head, ready_top, fifos, heaps = ready.fresh_head, ready.top, ready.fresh, ready.heaps
        while n < count:
            fresh, top = fresh_head(priority), ready_top(priority)
            from_fresh = fresh is not None and (top is None or front(fresh) < top[0])
            head = fresh if from_fresh else None if top is None else records[top[2]]
            bound = top[0] if from_fresh and top is not None else None  # a run stops there
            if lanes is not None:
                if head is not None and self._tenants.noisy(head.tenant, now):
                    self._set_aside(priority, head, from_fresh)
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
                        fifos[priority][0] = run
                    if lease is not None:
                        stretch = lease(run, room)
                        out.append(stretch)
                        n += stretch.count
                    else:
                        recs = self._take(run, room)
                        out.extend(recs)
                        n += len(recs)
                    continue
                fifos[priority].popleft()
                rec = fresh
            else:
                rec = records[heapq.heappop(heaps[priority])[2]]
            if not self._deliverable_head(rec, now):
                continue  # (a group's head whose followers are still leased: on a timer)
            out.append(rec)
            n += 1
            if rec.group is not None:
                break
        if lanes is not None:
            self.lanes.drop_empty(priority)
        return out, n

    def _set_aside(self, priority: int, head: Record | Run, from_fresh: bool) -> None:
        """``head``, a noisy tenant's message (or run) at the front of ``priority`` (of its
        fresh messages, or of its ready heap), waits in its tenant's lane instead."""
        if from_fresh:
            self.ready.fresh[priority].popleft()
        else:
            heapq.heappop(self.ready.heaps[priority])
        self.lanes.set_aside(priority, head)

    def _deliverable_head(self, rec: Record, now: float) -> bool:
        """Whether ``rec``, out of the ready structures, is to be delivered: a group's head
        waits (on a timer) while messages after it are still leased, until they are done or
        back."""
        if rec.group is not None and (until := self.groups.held_behind(rec, now)) is not None:
            self.timers.hold(rec, until)
            return False
        return True

    def _top_priority(self) -> int | None:
        """The highest priority with a message to deliver."""
        ready = self.ready.top_priority()
        aside = self.lanes.top_priority() if self.lanes else None
        return ready if aside is None or (ready is not None and ready >= aside) else aside

    # -- reads -------------------------------------------------------------------------------------

    def best_priority(self, now: float, max_attempts: int) -> int | None:
        """The highest priority of a message deliverable at ``now``, as ``select`` would find
        it (the timers due by then fired), None if there is none; what ``select`` would choose
        is left as it is."""
        return self.timers.best_priority(now, self._top_priority(), max_attempts)

    def fresh_runs(self, limit: int, fair: bool = False) -> Iterator[Run]:
        """The runs holding the first ``limit`` fresh messages, best priority first; with
        ``fair``, those of each priority (any may have its turn). Those of noisy tenants do not
        count (others' go first), nor do the heads of tenants' messages aside."""
        left, noisy, fifos = limit, self._tenants.flagged, self.ready.fresh
        for priority in sorted({*fifos, *self.lanes.by_priority}, reverse=True):
            if fair:
                left = limit
            for head in self.lanes.heads(priority):
                if isinstance(head, Run):
                    yield head
            for item in fifos.get(priority, ()):
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
        return self.lanes.oldest_quiet(noisy, self.ready.oldest_quiet(noisy, oldest))
