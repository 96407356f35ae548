"""The queue's index: what its log says, folded one operation at a time.

``QueueState.apply`` folds one operation, each kind in the module of its part of a message's
life: enqueued (``enqueues``), leased and given back or failed (``leases``), finished
(``finish``), removed unfinished (``removal``). Nothing here does I/O or reads a clock (reads
that depend on time take ``now``). The index is a coordinator of parts, each a module of its
own:

- the records of messages touched since their enqueue (here) and the untouched ones, in runs
  (``runs.RunIndex``); an Append's messages become one or the other (``appends``); members of
  runs leased together, in stretches (``stretches.Stretches``) until something happens to one;
- what to deliver next (``delivery.DeliveryIndex``: the ready structures by priority, timers,
  groups, noisy tenants' lanes, fair shares); ``select`` takes from it, and ``peek`` asks it
  the same on a fork;
- which objects hold live payloads and which are garbage (``payload_refs.PayloadRefs``);
- what is remembered for a while: dedup ids, commit tokens, completed messages
  (``retention.Retention``);
- tenants' counts (``tenants.Tenants``);
- messages removed unfinished: purged, discarded, or retired past the queue's retention
  (``removal``), found by the enqueue times ``ages.Ages`` keeps once the writer asks.

Given the same operations, the parts hold the same: a checkpoint's snapshot of them
(``checkpoint.take``, ``checkpoint.restore``) gives an index that folds on as the original
would. ``select`` takes messages out of the delivery structures before their Lease is folded:
the caller folds it at once.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..log import ids
from ..log.ops import (
    AnyOp,
    Append,
    Bury,
    CommitToken,
    Complete,
    Configure,
    Discard,
    Enqueue,
    EnqueueStaged,
    Extend,
    Fail,
    Lease,
    Open,
    Prune,
    Purge,
    Redrive,
    Release,
    Relocate,
    Retire,
)
from ..message import MessageStatus
from . import enqueues, finish, leases, removal
from .ages import Ages
from .delivery import Chosen, DeliveryIndex
from .payload_refs import PayloadRefs, blob_key
from .records import DONE, LEASED, Record, Run, status
from .retention import Retention
from .runs import RunIndex
from .stretches import Stretch, Stretches
from .tenants import QuietCounts, Tenants

__all__ = ["TABLE_BUDGET", "QueueState", "QuietCounts", "blob_key"]

#: untouched messages whose tables the index keeps (a few bytes each) beyond those it needs now
TABLE_BUDGET = 1_000_000

Settings = dict[str, int | float | str | dict[str, str] | None]


class QueueState:
    """Messages by id, with the parts that make delivery, storage and retention cheap."""

    def __init__(self) -> None:
        self.messages: dict[str, Record] = {}  # records: messages touched since their enqueue
        self.runs = RunIndex()  # untouched messages
        self.stretches = Stretches()  # members of runs leased together
        self.ages = Ages(self.messages, self.runs, self.stretches)  # for retention, if watched
        self.tenants = Tenants()
        self.delivery = DeliveryIndex(
            self.messages,
            self.tenants,
            self._take,
            stretches=self.stretches.by_token,
            lease=self.lease_run,
            lapsed=self._lapsed,
        )
        self.payloads = PayloadRefs()
        self.retention = Retention()
        self.changes = 0  # entries of the index changed so far (the checkpoint schedule's clock)
        self.total_enqueued = 0
        self.live = 0  # queued or leased
        self.dead: dict[str, None] = {}  # ordered set, oldest first
        self.arrivals = 0  # arrival numbers given so far (the latest given)
        self.payload_sizes: dict[int, int] = {}  # one int object per distinct payload size
        self.settings: Settings = {}  # saved with the queue
        self.queue = ""  # the queue's id: what its message ids begin with (``ids``)

    @property
    def seq(self) -> int:
        """The log object being folded."""
        return self.payloads.seq

    @property
    def tokens(self) -> dict[str, None]:
        """Commit tokens remembered, oldest first."""
        return self.retention.tokens

    # -- folding the log -------------------------------------------------------------------------

    def apply(self, op: AnyOp, seq: int) -> int:
        """Fold ``op``, read from (or bound for) log object ``seq``, into the index; what a
        Prune forgot (0 for the other operations)."""
        if seq != self.payloads.seq:
            self.payloads.close(seq)
        if isinstance(op, Append):
            before = len(self.messages) + self.runs.count
            enqueues.append(self, op, seq, TABLE_BUDGET)
            self.changes += len(self.messages) + self.runs.count - before
            return 0
        self.changes += op.weight
        if isinstance(op, Lease):
            leases.lease(self, op)
        elif isinstance(op, Complete):
            finish.complete(self, op.ids, op.at)
        elif isinstance(op, Release):
            leases.release(self, op.ids)
        elif isinstance(op, Extend):
            leases.extend(self, op)
        elif isinstance(op, Fail):
            leases.fail(self, op)
        elif isinstance(op, Bury):
            finish.bury(self, op)
        elif isinstance(op, Redrive):
            enqueues.redrive(self, op)
        elif isinstance(op, Relocate):
            for mid, offset in op.moves:  # payloads copied forward into log object ``seq``
                rec = self.messages[mid]
                self.payloads.drop(rec)
                rec.payload_seq, rec.offset, rec.stage = seq, offset, None
                self.payloads.keep(rec)
        else:
            return self._apply_rare(op, seq)
        return 0

    def _apply_rare(self, op: AnyOp, seq: int) -> int:
        if isinstance(op, Enqueue):
            enqueues.enqueue(self, op, seq)
        elif isinstance(op, EnqueueStaged):
            enqueues.enqueue_staged(self, op, seq)
        elif isinstance(op, CommitToken):
            self.retention.committed(op.token)
        elif isinstance(op, Prune):
            return self.retention.prune(self.messages, op.at, op.retention, op.window)
        elif isinstance(op, Configure):
            self.settings.update(op.settings)
        elif isinstance(op, Purge):
            removal.purge(self)
        elif isinstance(op, Discard):
            removal.discard(self, op.ids)
        elif isinstance(op, Retire):
            removal.retire(self, op)
        elif isinstance(op, Open):
            if op.queue is not None and not self.queue:
                self.queue = op.queue
        else:  # pragma: no cover - the union is closed
            raise TypeError(f"unknown operation {op!r}")
        return 0

    # -- records made of untouched messages ------------------------------------------------------

    def touch(self, mid: str) -> Record:
        """The record of ``mid``, made now if it is a member of a leased stretch (leaving it),
        or the front member of a run (a replayed lease: leases take runs front first):
        something is about to happen to it."""
        rec = self.messages.get(mid)
        if rec is None:
            held = self.stretches.find(mid, self.queue)
            if held is not None:
                rec = self.messages[mid] = self.stretches.split(*held)
                self.ages.record(rec)
                return rec
            found = self.runs.find(mid, self.queue)
            if found is None or found[1] != found[0].taken:
                raise KeyError(mid)
            rec = self._take(found[0], 1)[0]
        return rec

    def _take(self, run: Run, count: int) -> list[Record]:
        """The first ``count`` members of ``run`` become records, queued: something is about
        to happen to them (a lease)."""
        recs = self.runs.take(run, count)
        messages = self.messages
        for rec in recs:
            messages[rec.id] = rec
        self.ages.records(recs)
        return recs

    def lease_run(self, run: Run, count: int) -> Stretch:
        """The first ``count`` members of ``run`` leave it as a stretch: about to be leased."""
        return self.runs.lease(run, count, self.stretches)

    def _lapsed(self, stretch: Stretch) -> list[Record]:
        """The lease of ``stretch`` ran out: its members become records, still leased (so
        expired), to be delivered again or buried."""
        recs = list(stretch.members())
        self.stretches.forget(stretch)
        messages = self.messages
        for rec in recs:
            messages[rec.id] = rec
        self.ages.records(recs)
        return recs

    # -- run tables --------------------------------------------------------------------------------

    def fill(self, seq: int, found: list[Append]) -> None:
        """The Appends of log object ``seq`` (read back by ``tables``): its runs without
        their tables take them back."""
        self.runs.fill(seq, found)

    def wanted(self, limit: int, fair: bool = False) -> set[int]:
        """The log objects whose tables the next ``limit`` deliveries need read back."""
        return {run.seq for run in self.delivery.fresh_runs(limit, fair) if run.table is None}

    def wanted_by(self, op: AnyOp) -> set[int]:
        """The log objects whose tables folding ``op`` (a replayed lease) needs read back."""
        seqs: set[int] = set()
        if isinstance(op, Lease):
            for mid, _, _ in op.leases:
                seq = self.wanted_for(mid)
                if seq is not None:
                    seqs.add(seq)
            for seq, place, _, _, _ in op.stretches or ():
                found = self.wanted_for(ids.make(self.queue, seq, place))
                if found is not None:
                    seqs.add(found)
        return seqs

    def wanted_for(self, mid: str) -> int | None:
        """The log object whose table reading ``mid`` needs read back, if any."""
        if mid in self.messages:
            return None
        found = self.runs.find(mid, self.queue)
        return found[0].seq if found is not None and found[0].table is None else None

    # -- choosing what to deliver ------------------------------------------------------------------

    def expire(self, now: float, max_attempts: int) -> list[Record]:
        """Make what is due by ``now`` deliverable (``Timers.fire``), but for expired leases
        with no attempts left: those are returned, and the caller must apply a Bury for them at
        once (they have left the ready structures). Burying a group's head frees its next
        message, so expire before ``select``."""
        return self.delivery.timers.fire(now, max_attempts)

    def select(
        self,
        now: float,
        limit: int,
        max_attempts: int,
        per_group: int = 1,
        fair: bool = False,
        stretches: bool = False,
    ) -> tuple[list[Chosen], list[Record]]:
        """``DeliveryIndex.select``: the caller folds a Lease and a Bury for them at once."""
        return self.delivery.select(now, limit, max_attempts, per_group, fair, stretches)

    def peek(
        self, now: float, limit: int, max_attempts: int, fair: bool = False, per_group: int = 1
    ) -> list[Record]:
        """What ``select`` would deliver at ``now``, leaving the index as it is."""
        return self.delivery.peek(now, limit, max_attempts, fair, per_group)

    def best_priority(self, now: float, max_attempts: int) -> int | None:
        """``DeliveryIndex.best_priority``."""
        return self.delivery.best_priority(now, max_attempts)

    def next_change(self) -> float | None:
        """The earliest time a timer fires (a delay ends, a lease expires), if any."""
        return self.delivery.timers.next_change()

    # -- reads -----------------------------------------------------------------------------------

    def receipt_holder(self, receipt: str) -> Record | None:
        """The leased message ``receipt`` belongs to, if that lease is still its latest (a
        member of a stretch: a record made to be read)."""
        mid = self.holder(receipt)
        return None if mid is None else self.find(mid)

    def holder(self, receipt: str) -> str | None:
        """The id of the leased message ``receipt`` belongs to, if that lease is still its
        latest (as ``receipt_holder``, making no record)."""
        mid, token = ids.split_receipt(receipt)
        rec = self.messages.get(mid)
        if rec is None:
            return mid if self.stretches.holds(mid, token) else None
        return mid if rec.state == LEASED and rec.receipt == receipt else None

    def dedup_hit(self, dedup_id: str, now: float, window: float) -> str | None:
        """``Retention.dedup_hit``."""
        return self.retention.dedup_hit(dedup_id, now, window)

    def status(self, rec: Record, now: float) -> MessageStatus:
        """``records.status``."""
        return status(rec, now)

    def counts(self, now: float, retention: float) -> dict[MessageStatus, int]:
        """Messages by status at ``now``; completed ones only within ``retention``."""
        counts = dict.fromkeys(MessageStatus, 0)
        counts[MessageStatus.PENDING] = self.runs.untouched
        for rec in self.messages.values():
            if rec.state != DONE or rec.finished_at + retention > now:
                counts[status(rec, now)] += 1
        for stretch in self.stretches:
            held = MessageStatus.PROCESSING if stretch.until > now else MessageStatus.PENDING
            counts[held] += len(stretch)
        counts[MessageStatus.COMPLETED] += self.retention.completed.count_since(now - retention)
        return counts

    def quiet_counts(self, now: float) -> QuietCounts:
        """``Tenants.quiet_counts`` of this index's messages."""
        return self.tenants.quiet_counts(
            self.records(), self.runs.untouched, self.delivery.oldest_quiet, now
        )

    def completed_at(self, mid: str) -> float | None:
        """When ``mid`` was completed, if it is a completed message with no record."""
        where = ids.where(mid, self.queue)
        return None if where is None else self.retention.completed.finished_at(*where)

    @property
    def size(self) -> int:
        """The size of the index in entries (records and runs): what a checkpoint's size
        follows, for the checkpoint schedule."""
        return (
            len(self.messages)
            + self.runs.count
            + len(self.stretches)
            + len(self.retention.completed)
        )

    def find(self, mid: str) -> Record | None:
        """The record of ``mid``: its own, or (for an untouched message) one made to be read."""
        rec = self.messages.get(mid)
        if rec is None and (held := self.stretches.find(mid, self.queue)) is not None:
            rec = held[0].record(held[1])
        elif rec is None and (found := self.runs.find(mid, self.queue)) is not None:
            run, k = found
            rec = run.member(k, run.offset_of(k))
        return rec

    def records(self) -> Iterator[Record]:
        """Every message touched since its enqueue as a record (members of stretches made to
        be read): what a checkpoint holds of them."""
        yield from self.messages.values()
        for stretch in self.stretches:
            yield from stretch.members()

    def all(self) -> Iterator[Record]:
        """Every message in the index as a record (untouched ones made to be read)."""
        yield from self.records()
        for run in self.runs:
            yield from run.members()

    def iter_dead(self) -> Iterator[Record]:
        return (self.messages[mid] for mid in self.dead)

    def prunable(self, now: float, retention: float, dedup_window: float) -> bool:
        """Whether a Prune at ``now`` would forget anything."""
        return self.retention.prunable(now, retention, dedup_window)
