"""The queue's index: what its log says, folded one operation at a time.

``QueueState.apply`` folds one operation; nothing here does I/O or reads a clock (reads that
depend on time take ``now``). The index is a coordinator of parts, each a module of its own:

- the records of messages touched since their enqueue (here) and the untouched ones, in runs
  (``runs.RunIndex``); an Append's messages become one or the other (``appends``); members of
  runs leased together, in stretches (``stretches.Stretches``) until something happens to one;
- what to deliver next (``delivery.DeliveryIndex``: priorities, timers, groups, noisy tenants'
  lanes, fair shares); ``select`` takes from it, and ``peek`` asks it the same on a fork;
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
from . import appends, removal
from .ages import Ages
from .delivery import Chosen, DeliveryIndex
from .payload_refs import PayloadRefs, blob_key
from .records import DEAD, DONE, LEASED, QUEUED, Record, Run, status
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
            lease=self._lease_run,
            lapsed=self._lapsed,
        )
        self.payloads = PayloadRefs()
        self.retention = Retention()
        self.changes = 0  # entries of the index changed so far (the checkpoint schedule's clock)
        self.total_enqueued = 0
        self.live = 0  # queued or leased
        self.dead: dict[str, None] = {}  # ordered set, oldest first
        self.arrivals = 0  # arrival numbers given so far (the latest given)
        self._sizes: dict[int, int] = {}  # one int object per distinct payload size
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
            self._append(op, seq)
            self.changes += len(self.messages) + self.runs.count - before
            return 0
        self.changes += op.weight
        if isinstance(op, Lease):
            self._lease(op)
        elif isinstance(op, Complete):
            self._complete(op.ids, op.at)
        elif isinstance(op, Release):
            recs = [self._record(mid) for mid in op.ids]
            self.tenants.ended_records(recs, 0.0, True)
            for rec in recs:
                rec.state, rec.receipt, rec.attempts = QUEUED, None, rec.attempts - 1
                if rec.attempts == 0:
                    rec.first_leased_at = 0.0
                self.delivery.schedule(rec)  # visible_at is in the past: deliverable at once
        elif isinstance(op, Extend):
            rec = self._record(op.id)
            rec.lease_until = op.until
            self.delivery.schedule(rec)
        elif isinstance(op, Fail):
            self._fail(op)
        elif isinstance(op, Bury):
            recs = [self._record(mid) for mid in op.ids]
            self.tenants.ended_records(recs, 0.0, False)  # untimed
            for rec in recs:
                rec.last_error = op.error
                self._die(rec, op.at)
        elif isinstance(op, Redrive):
            for mid in op.ids:
                self._redrive(self.messages[mid], op.at)
        elif isinstance(op, Relocate):
            for mid, offset in op.moves:
                rec = self.messages[mid]
                self.payloads.drop(rec)
                rec.payload_seq, rec.offset, rec.stage = seq, offset, None
                self.payloads.keep(rec)
        else:
            return self._apply_rare(op, seq)
        return 0

    def _apply_rare(self, op: AnyOp, seq: int) -> int:
        if isinstance(op, Enqueue):
            self._enqueue(op, seq)
        elif isinstance(op, EnqueueStaged):
            for message in op.messages:
                self._enqueue(message, seq, op.key)
            self.payloads.unneeded(seq, op.key)  # (if every message was a duplicate)
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

    # -- messages arriving -------------------------------------------------------------------------

    def _append(self, op: Append, seq: int) -> None:
        """Plain members form runs, the others records (``appends``)."""
        for piece in appends.pieces(op):
            if isinstance(piece, appends.Plain):
                self._add_run(op, seq, piece)
            else:
                self._add(appends.record(op, seq, piece, self.queue, self.arrivals + 1))
        if op.key is not None:
            self.payloads.unneeded(seq, op.key)  # (if every message was a duplicate)

    def _add_run(self, op: Append, seq: int, plain: appends.Plain) -> None:
        room = TABLE_BUDGET - self.runs.tabled  # members whose tables the index may keep
        run, table = appends.run(op, seq, plain, self.queue, self.arrivals + 1, room)
        count, size = run.count, run.bytes
        self.arrivals += count
        self.tenants.arrived(run.tenant, count, op.enqueued_at)
        self.total_enqueued += count
        self.live += count
        if op.key is None:
            self.payloads.wrote(seq, size)
        self.payloads.keep_many(seq, op.key, count, size)
        if table.dedup_ids:
            at = op.enqueued_at
            for k, dedup_id in enumerate(table.dedup_ids):
                if dedup_id is not None:
                    self.retention.sent(dedup_id, ids.make(self.queue, seq, run.place + k), at)
        self.runs.add(run)
        self.ages.run(run)
        self.delivery.push_fresh(run)

    def _enqueue(self, op: Enqueue, seq: int, stage: str | None = None) -> None:
        """A message of format 1's own operation."""
        self._add(
            Record(
                op.id,
                self.arrivals + 1,
                op.priority,
                op.enqueued_at,
                op.visible_at,
                seq,
                op.offset,
                op.size,
                op.group,
                op.dedup_id,
                op.attributes,
                stage=stage,
            )
        )

    def _add(self, rec: Record) -> None:
        """``rec``, new, numbered the next arrival."""
        self.arrivals += 1
        rec.size = self._sizes.setdefault(rec.size, rec.size)
        self.messages[rec.id] = rec
        self.ages.record(rec)
        self.total_enqueued += 1
        self.live += 1
        self.tenants.arrived(rec.tenant, 1, rec.enqueued_at)
        if rec.offset >= 0 and rec.stage is None:
            self.payloads.wrote(rec.payload_seq, rec.size)
        self.payloads.keep(rec)
        if rec.dedup_id is not None:
            self.retention.sent(rec.dedup_id, rec.id, rec.enqueued_at)
        if rec.group is not None and not self.delivery.join(rec):
            return  # waits for the messages before it in its group
        if rec.visible_at <= rec.enqueued_at:
            self.delivery.push_fresh(rec)
        else:
            self.delivery.delay(rec)

    def _take(self, run: Run, count: int) -> list[Record]:
        """The first ``count`` members of ``run`` become records, queued: something is about
        to happen to them (a lease)."""
        recs = self.runs.take(run, count)
        messages = self.messages
        for rec in recs:
            messages[rec.id] = rec
        self.ages.records(recs)
        return recs

    def _record(self, mid: str) -> Record:
        """The record of ``mid``, made now if it is a member of a leased stretch (leaving it),
        or the front member of a run (a replayed lease: leases take runs front first)."""
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

    def _lease_run(self, run: Run, count: int) -> Stretch:
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

    # -- messages moving on ------------------------------------------------------------------------

    def _lease(self, op: Lease) -> None:
        leased: dict[str | None, int] = {}  # tenant -> queued messages now leased
        recs = []
        at, messages = op.at, self.messages
        for mid, receipt, until in op.leases:
            rec = messages.get(mid) or self._record(mid)
            if rec.state != LEASED:
                leased[rec.tenant] = leased.get(rec.tenant, 0) + 1
            rec.state, rec.receipt, rec.lease_until, rec.leased_at = LEASED, receipt, until, at
            if rec.attempts == 0:
                rec.first_leased_at = at
            rec.attempts += 1
            recs.append(rec)
        self.delivery.leased(recs)
        if op.stretches:
            for seq, place, count, token, until in op.stretches:
                stretch = self.stretches.taken.pop((seq, place), None)
                if stretch is None:  # a replayed lease: leases take runs front first
                    found = self.runs.find(ids.make(self.queue, seq, place), self.queue)
                    if found is None or found[1] != found[0].taken:
                        raise KeyError(ids.make(self.queue, seq, place))
                    stretch = self._lease_run(found[0], count)
                    del self.stretches.taken[seq, place]
                if stretch.count != count:
                    raise ValueError(
                        f"a stretch of {count} leased at {seq}/{place} holds {stretch.count}"
                    )
                self.stretches.leased(stretch, token, until, at)
                self.delivery.leased_stretch(stretch)
                leased[stretch.tenant] = leased.get(stretch.tenant, 0) + count
        self.tenants.leased(leased)

    def _fail(self, op: Fail) -> None:
        rec = self._record(op.id)
        rec.last_error = op.error
        self.tenants.ended_records([rec], op.at, op.retry_at is not None)
        if op.retry_at is None:
            self._die(rec, op.at)
        else:
            rec.state, rec.visible_at, rec.backoff, rec.receipt = QUEUED, op.retry_at, True, None
            self.delivery.schedule(rec)

    def _complete(self, mids: list[str], at: float) -> None:
        """Messages completed at ``at``: those whose ids name their places leave the records
        for ``retention.completed``; the others (format-1 ids) stay as records until pruned."""
        places: dict[int, list[int]] = {}
        freed: dict[tuple[int, str | None], list[int]] = {}  # (payload_seq, stage): [count, bytes]
        messages, retention, payloads = self.messages, self.retention, self.payloads
        recs: list[Record] = []
        members: dict[Stretch, list[int]] = {}  # members of stretches completed
        i = 0
        while i < len(mids):
            mid = mids[i]
            rec = messages.get(mid)
            if rec is not None:
                recs.append(rec)
                i += 1
                continue
            held = self.stretches.find(mid, self.queue)
            if held is None:
                raise KeyError(mid)
            stretch, k = held
            # the ids that follow are most often the stretch's next members: a run at once
            m = stretch.run_of(mids, i, k, stretch.ids()) or 1
            members.setdefault(stretch, []).extend(range(k, k + m))
            i += m
        self.tenants.ended_records(recs, at, False, ((s, len(ks)) for s, ks in members.items()))
        for stretch, ks in members.items():
            sizes, first = stretch.sizes(), stretch.place
            size = sum(sizes) if len(ks) == stretch.count else sum(sizes[k] for k in ks)
            if (where := freed.get((stretch.seq, stretch.stage))) is None:
                freed[stretch.seq, stretch.stage] = [len(ks), size]
            else:
                where[0] += len(ks)
                where[1] += size
            places.setdefault(stretch.seq, []).extend(first + k for k in ks)
            self.stretches.leave(stretch, ks)
        for rec in recs:
            mid = rec.id
            rec.state, rec.finished_at, rec.receipt, rec.attributes = DONE, at, None, None
            rec.version += 1
            if rec.stage is None and rec.offset < 0:
                payloads.drop(rec)
            elif (where := freed.get((rec.payload_seq, rec.stage))) is None:
                freed[rec.payload_seq, rec.stage] = [1, rec.size]
            else:
                where[0] += 1
                where[1] += rec.size
            if rec.group is not None:
                self.delivery.leave(rec)
            if len(mid) == ids.LENGTH:  # an id that names its place
                del messages[mid]
                seq, place = ids.split(mid)
                places.setdefault(seq, []).append(place)
            else:
                retention.finished(at, mid)
        self.live -= len(mids)
        for (payload_seq, stage), (count, size) in freed.items():
            payloads.drop_many(payload_seq, stage, count, size)
        if places:
            retention.completed.add(at, places)

    def _die(self, rec: Record, at: float) -> None:
        """``rec`` is a dead letter from ``at`` on."""
        rec.state, rec.finished_at, rec.receipt = DEAD, at, None
        rec.version += 1
        self.live -= 1
        self.dead[rec.id] = None
        if rec.group is not None:
            self.delivery.leave(rec)

    def _redrive(self, rec: Record, at: float) -> None:
        del self.dead[rec.id]
        self.arrivals += 1
        rec.arrival = self.arrivals
        rec.state, rec.attempts, rec.visible_at, rec.backoff = QUEUED, 0, at, False
        self.live += 1
        self.tenants.arrived(rec.tenant, 1, at, sent=False)
        if rec.group is not None:
            self.delivery.join(rec)
        self.delivery.schedule(rec)

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
        """``DeliveryIndex.expire``."""
        return self.delivery.expire(now, max_attempts)

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
        return self.delivery.next_change()

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
