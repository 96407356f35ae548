"""The queue's index: a pure, deterministic function of its log.

``QueueState.apply`` folds one operation into the index; nothing here does I/O or reads a clock.
Reads that depend on time take ``now`` as an argument. Payloads are not kept: a message knows
where its payload lies (log sequence number, offset, size).
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterator
from typing import NamedTuple

import msgspec

from s3q.index.completed import ChunkSnap, Completed
from s3q.index.records import DEAD, DONE, LEASED, QUEUED, Record, Run, RunSnap, Table
from s3q.index.tenants import Ended, Tenants, TenantSnap
from s3q.log import ids, segment
from s3q.log.ops import (
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
)
from s3q.message import MessageStatus

MAX_TOKENS = 10_000  # commit tokens remembered (streaming sinks need only their last batches)
#: untouched messages whose tables the index keeps (a few bytes each) beyond those it needs now
TABLE_BUDGET = 1_000_000


def _served(shares: dict[int, float], vtime: float, priority: int) -> tuple[float, float]:
    """Fair delivery (start-time fair queuing): one delivery of ``priority``, weighted
    ``priority + 1``. Its start tag is its priority's share, or the virtual time ``vtime`` if
    that is ahead (a priority that had nothing to deliver gets no credit for the time); the new
    virtual time is that tag, the priority's share moves on by 1 / weight. The priority with
    the lowest tag goes next, so each gets deliveries in proportion to its weight."""
    start = max(shares.get(priority, 0.0), vtime)
    return start, start + 1.0 / (priority + 1)


#: messages of one noisy tenant set aside, a heap: (arrival number, version or -1 for a run,
#: order, the record or run)
Lane = list[tuple[int, int, int, "Record | Run"]]


def _noisy_turn(ranked: list[tuple[int, int, str]], wanted: int) -> tuple[str, int]:
    """Among noisy tenants ranked by (messages in flight, earliest arrival, name), the one to
    serve and how many of the ``wanted`` it gets: until the next has as few in flight, or, when
    they are even, an equal part each."""
    ranked.sort()
    flight, _, name = ranked[0]
    if len(ranked) == 1:
        return name, wanted
    return name, min(wanted, max(ranked[1][0] - flight, -(-wanted // len(ranked))))


class QuietCounts(NamedTuple):
    """What ``quiet_counts`` finds."""

    noisy_tenants: int
    visible: int
    in_flight: int
    delayed: int
    oldest_age: float


def _front(item: Record | Run) -> int:
    """The arrival number of the next message ``item`` would deliver."""
    return item.front() if isinstance(item, Run) else item.arrival


def blob_key(mid: str) -> str:
    """Where a payload too large for the log lies."""
    return f"blob/{mid}"


#: the most messages of one group a dequeue delivers together
MAX_PER_GROUP = 10


class Snapshot(msgspec.Struct, array_like=True):
    """The index at log object ``seq``: what a checkpoint holds."""

    seq: int
    arrivals: int  # arrival numbers given so far (the latest given)
    total_enqueued: int
    messages: list[Record]
    dedup: list[tuple[str, str, float]]  # (dedup_id, message id, enqueued_at)
    written_bytes: dict[int, int]  # log seq -> payload bytes it was written with
    garbage: list[tuple[int, str]]
    settings: dict[str, int | float | str | dict[str, str] | None] = {}
    tokens: list[str] = []  # commit tokens, oldest first
    dead: list[str] | None = None  # dead letters in the order they died (None: older checkpoints)
    queue: str = ""  # the queue's id (format 2)
    runs: list[RunSnap] = []  # untouched messages (format 2), in arrival order
    completed: list[ChunkSnap] = []  # completed messages with no record (format 2)
    shares: dict[int, float] = {}  # fair delivery: each priority's next start tag
    vtime: float = 0.0  # fair delivery: the start tag of the latest delivery
    tenants: list[TenantSnap] = []  # tenant fairness: what the messages do not tell
    busy: tuple[float, float] = (0.0, 0.0)  # the queue's recent processing time, as of when


class QueueState:
    """Messages by id, with the structures that make dequeue, expiry and groups cheap."""

    def __init__(self) -> None:
        self.messages: dict[str, Record] = {}  # records: messages touched since their enqueue
        self.runs: dict[int, list[Run]] = {}  # untouched messages, by the log object of each
        self.untouched = 0  # messages in runs
        self.run_count = 0
        self.tabled = 0  # members of runs that hold their tables
        self.changes = 0  # entries of the index changed so far (the checkpoint schedule's clock)
        self.total_enqueued = 0
        self.live = 0  # queued or leased
        self.dead: dict[str, None] = {}  # ordered set, oldest first
        self._arrivals = 0  # arrival numbers given so far (the latest given)
        # Deliverable messages. Fresh ones (runs, and records visible at enqueue and never
        # changed since: version 0) wait in one FIFO per priority; the others in a heap.
        self._fresh: dict[int, deque[Record | Run]] = {}
        self._fresh_priorities: list[int] = []  # heap of -priority of the FIFOs in _fresh
        # priority -> heap (arrival, version, id)
        self._ready: dict[int, list[tuple[int, int, str]]] = {}
        self._ready_priorities: list[int] = []  # heap of -priority of the heaps in _ready
        # Fair delivery across priorities (start-time fair queuing, folded from the leases):
        # each priority's next start tag, and the start tag of the latest delivery.
        self.shares: dict[int, float] = {}
        self.vtime = 0.0
        # Tenant fairness: messages of noisy tenants met at the head of their priority wait
        # aside, a heap per tenant (arrival number, version or -1 for a run, order, item).
        self.tenants = Tenants()
        self._aside: dict[int, dict[str, Lane]] = {}
        self._aside_order = itertools.count()
        self._timers: list[tuple[float, int, int, str]] = []  # (time, arrival, version, id)
        self._groups: dict[str, deque[str]] = {}
        self._dedup: dict[str, tuple[str, float]] = {}  # dedup_id -> (id, enqueued_at)
        self._dedup_order: deque[tuple[float, str]] = deque()
        self._finished: deque[tuple[float, str]] = deque()  # completed records, oldest first
        self.completed = Completed()  # completed messages with no record: those ids place
        # Storage bookkeeping: which log objects still hold payloads of live messages.
        self.seq = 0  # the log object being folded
        self.refs: dict[int, int] = {}  # log seq -> live messages whose payload lies there
        self.live_bytes: dict[int, int] = {}  # log seq -> bytes of those payloads
        self.written_bytes: dict[int, int] = {}  # log seq -> payload bytes it was written with
        self.garbage: list[tuple[int, str]] = []  # (seq it became garbage at, object key)
        self.pruned = 0  # how much the last Prune forgot
        self._sizes: dict[int, int] = {}
        #: saved with the queue
        self.settings: dict[str, int | float | str | dict[str, str] | None] = {}
        self.staged_refs: dict[str, int] = {}  # staged object -> live messages whose payload it is
        self.tokens: dict[str, None] = {}  # commit tokens, oldest first
        self.queue = ""  # the queue's id: what its message ids begin with (``ids``)

    # -- folding the log -------------------------------------------------------------------------

    def apply(self, op: AnyOp, seq: int) -> None:
        """Fold ``op``, read from (or bound for) log object ``seq``, into the index."""
        if seq != self.seq:
            self._close(seq)
        if isinstance(op, Append):
            before = len(self.messages) + self.run_count
            self._append(op, seq)
            self.changes += len(self.messages) + self.run_count - before
            return
        self.changes += op.weight
        if isinstance(op, Enqueue):
            self._enqueue(op, seq)
        elif isinstance(op, EnqueueStaged):
            self._enqueue_staged(op, seq)
        elif isinstance(op, CommitToken):
            self._remember_token(op.token)
        elif isinstance(op, Lease):
            leased: dict[str | None, int] = {}  # tenant -> queued messages now leased
            for mid, receipt, until in op.leases:
                rec = self._record(mid)
                if rec.state != LEASED:
                    leased[rec.tenant] = leased.get(rec.tenant, 0) + 1
                rec.state, rec.receipt, rec.lease_until = LEASED, receipt, until
                rec.leased_at = op.at
                if rec.attempts == 0:
                    rec.first_leased_at = op.at
                rec.attempts += 1
                self.vtime, self.shares[rec.priority] = _served(
                    self.shares, self.vtime, rec.priority
                )
                self._schedule(rec)
            self.tenants.leased(leased)
        elif isinstance(op, Complete):
            self._complete(op.ids, op.at)
        elif isinstance(op, Release):
            self._ended(op.ids, 0.0, requeued=True)
            for mid in op.ids:
                rec = self.messages[mid]
                rec.state, rec.receipt, rec.attempts = QUEUED, None, rec.attempts - 1
                if rec.attempts == 0:
                    rec.first_leased_at = 0.0
                self._schedule(rec)  # visible_at is in the past: deliverable at once
        elif isinstance(op, Extend):
            rec = self.messages[op.id]
            rec.lease_until = op.until
            self._schedule(rec)
        elif isinstance(op, Fail):
            rec = self.messages[op.id]
            rec.last_error = op.error
            self._ended([op.id], op.at, requeued=op.retry_at is not None)
            if op.retry_at is None:
                self._die(rec, op.at)
            else:
                rec.state, rec.visible_at, rec.backoff, rec.receipt = (
                    QUEUED,
                    op.retry_at,
                    True,
                    None,
                )
                self._schedule(rec)
        elif isinstance(op, Bury):
            self._ended(op.ids, 0.0, requeued=False)  # (no outcome: not timed)
            for mid in op.ids:
                rec = self.messages[mid]
                rec.last_error = op.error
                self._die(rec, op.at)
        elif isinstance(op, Redrive):
            for mid in op.ids:
                self._redrive(self.messages[mid], op.at)
        elif isinstance(op, Relocate):
            for mid, offset in op.moves:
                rec = self.messages[mid]
                self._drop_payload(rec)
                rec.payload_seq, rec.offset, rec.stage = seq, offset, None
                self._keep_payload(rec)
        elif isinstance(op, Prune):
            self.pruned = self._prune(op.at, op.retention, op.window)
        elif isinstance(op, Configure):
            self.settings.update(op.settings)
        elif isinstance(op, Purge):
            self._purge()
        elif isinstance(op, Discard):
            for mid in op.ids:
                self._discard(self.messages[mid])
        elif isinstance(op, Open):
            if op.queue is not None and not self.queue:
                self.queue = op.queue
        else:  # pragma: no cover - the union is closed
            raise TypeError(f"unknown operation {op!r}")

    def _append(self, op: Append, seq: int) -> None:
        """Plain members (visible at once, in no group, payload not apart) form runs, one
        per stretch of one priority; the others become records."""
        if not (op.delays or op.groups or op.blobs or op.priorities or op.tenants):  # one run
            self._add_run(op, seq, 0, len(op.sizes), 0, op.offset)
        else:
            self._append_mixed(op, seq)
        if op.key is not None and op.key not in self.staged_refs:  # all duplicates
            self.garbage.append((seq, op.key))

    def _append_mixed(self, op: Append, seq: int) -> None:
        at, first, key, offsets = op.enqueued_at, op.first, op.key, op.offsets
        priorities, delays, groups = op.priorities, op.delays, op.groups
        dedup_ids, attributes, blobs, tenants = op.dedup_ids, op.attributes, op.blobs, op.tenants
        offset = op.offset  # of the next payload in this log object
        start, start_offset, priority = -1, 0, 0  # the stretch being gathered into a run
        tenant: str | None = None  # (of the stretch)
        for i, size in enumerate(op.sizes):
            p = priorities[i] if priorities else 0
            t = tenants[i] if tenants else None
            plain = not (
                (delays and delays[i])
                or (groups and groups[i] is not None)
                or (blobs and i in blobs)
            )
            if start >= 0 and (not plain or p != priority or t != tenant):
                self._add_run(op, seq, start, i, priority, start_offset, tenant)
                start = -1
            if plain:
                if start < 0:
                    start, start_offset, priority, tenant = i, offset, p, t
                if key is None:
                    offset += size
                continue
            delay = delays[i] if delays else 0.0
            blob = blobs.get(i) if blobs else None
            if blob is not None:
                stage, where = blob, 0
            elif key is not None:
                stage, where = key, offsets[i] if offsets else 0
            else:
                stage, where = None, offset
                offset += size
            self._add_message(
                ids.make(self.queue, seq, first + i),
                p,
                at,
                at + delay if delay else at,
                seq,
                where,
                size,
                groups[i] if groups else None,
                dedup_ids[i] if dedup_ids else None,
                (attributes[i] or None) if attributes else None,
                stage,
                t,
            )
        if start >= 0:
            self._add_run(op, seq, start, len(op.sizes), priority, start_offset, tenant)

    def _add_run(
        self,
        op: Append,
        seq: int,
        start: int,
        end: int,
        priority: int,
        offset: int,
        tenant: str | None = None,
    ) -> None:
        """Members ``start`` to ``end`` of ``op`` as a run (their payloads from ``offset``)."""
        count = end - start
        if not count:
            return
        table = Table(op, start, end)
        size = sum(table.sizes)
        keep = self.tabled + count <= TABLE_BUDGET
        run = Run(
            self.queue,
            seq,
            op.first + start,
            self._arrivals + 1,
            count,
            priority,
            op.enqueued_at,
            size,
            offset,
            op.key,
            table if keep else None,
            tenant,
        )
        self._arrivals += count
        self.tenants.arrived(tenant, count, op.enqueued_at)
        self.total_enqueued += count
        self.live += count
        self.untouched += count
        if keep:
            self.tabled += count
        if op.key is None:
            self.written_bytes[seq] = self.written_bytes.get(seq, 0) + size
        self._keep_payloads(seq, op.key, count, size)
        if table.dedup_ids:
            at = op.enqueued_at
            for k, dedup_id in enumerate(table.dedup_ids):
                if dedup_id is not None:
                    self._dedup[dedup_id] = (ids.make(self.queue, seq, run.place + k), at)
                    self._dedup_order.append((at, dedup_id))
        self._add(run)
        self._push_fresh(run)

    def _add(self, run: Run) -> None:
        self.runs.setdefault(run.seq, []).append(run)
        self.run_count += 1

    def _take(self, run: Run) -> Record:
        """The front member of ``run`` becomes a record, queued: something is about to
        happen to it (a lease)."""
        return self._take_many(run, 1)[0]

    def _take_many(self, run: Run, count: int) -> list[Record]:
        """``_take`` of the first ``count`` members of ``run`` (at most all)."""
        recs = run.take(count)
        messages = self.messages
        for rec in recs:
            messages[rec.id] = rec
        self.untouched -= len(recs)
        if not len(run):
            self.tabled -= run.count
            self.run_count -= 1
            runs = self.runs[run.seq]
            runs.remove(run)
            if not runs:
                del self.runs[run.seq]
        return recs

    # -- run tables --------------------------------------------------------------------------------

    def fill(self, seq: int, appends: list[Append]) -> None:
        """The Appends of log object ``seq`` (read back by ``tables``): its runs without
        their tables take them back."""
        for run in self.runs.get(seq, ()):
            if run.table is None:
                run.fill(appends)
                self.tabled += run.count

    def wanted(self, limit: int, fair: bool = False) -> set[int]:
        """The log objects whose tables the next ``limit`` deliveries need read back."""
        seqs: set[int] = set()
        for run in self._fresh_runs(limit, fair):
            if run.table is None:
                seqs.add(run.seq)
        return seqs

    def wanted_by(self, op: AnyOp) -> set[int]:
        """The log objects whose tables folding ``op`` (a replayed lease) needs read back."""
        seqs: set[int] = set()
        if isinstance(op, Lease):
            for mid, _, _ in op.leases:
                seq = self.wanted_for(mid)
                if seq is not None:
                    seqs.add(seq)
        return seqs

    def wanted_for(self, mid: str) -> int | None:
        """The log object whose table reading ``mid`` needs read back, if any."""
        if mid in self.messages:
            return None
        found = self._run_of(mid)
        return found[0].seq if found is not None and found[0].table is None else None

    def untabled(self) -> set[int]:
        """The log objects of every run without its table."""
        return {seq for seq, runs in self.runs.items() if any(r.table is None for r in runs)}

    def _fresh_runs(self, limit: int, fair: bool = False) -> Iterator[Run]:
        """The runs holding the first ``limit`` fresh messages, best priority first; with
        ``fair``, those of each priority (any may have its turn). Those of noisy tenants do not
        count (others' go first), nor do the heads of tenants' messages aside."""
        left, noisy = limit, self.tenants.flagged
        for priority in sorted({*self._fresh, *self._aside}, reverse=True):
            if fair:
                left = limit
            for head in self._aside_heads(priority):
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

    def _run_of(self, mid: str) -> tuple[Run, int] | None:
        """The run ``mid`` is an untaken member of, and its index there."""
        where = ids.where(mid, self.queue)
        if where is None:
            return None
        for run in self.runs.get(where[0], ()):
            k = run.index_of(where[1])
            if k is not None:
                return run, k
        return None

    def _record(self, mid: str) -> Record:
        """The record of ``mid``, made now if it is the front member of a run (a replayed
        lease: leases take runs front first)."""
        rec = self.messages.get(mid)
        if rec is None:
            found = self._run_of(mid)
            if found is None or found[1] != found[0].taken:
                raise KeyError(mid)
            rec = self._take(found[0])
        return rec

    def _enqueue(self, op: Enqueue, seq: int, stage: str | None = None) -> None:
        self._add_message(
            op.id,
            op.priority,
            op.enqueued_at,
            op.visible_at,
            seq,
            op.offset,
            op.size,
            op.group,
            op.dedup_id,
            op.attributes,
            stage,
        )

    def _add_message(
        self,
        mid: str,
        priority: int,
        enqueued_at: float,
        visible_at: float,
        seq: int,
        offset: int,
        size: int,
        group: str | None,
        dedup_id: str | None,
        attributes: dict[str, str] | None,
        stage: str | None,
        tenant: str | None = None,
    ) -> None:
        self._arrivals += 1
        rec = Record(
            mid,
            self._arrivals,
            priority,
            enqueued_at,
            visible_at,
            seq,
            offset,
            self._sizes.setdefault(size, size),  # one int object per distinct size
            group,
            dedup_id,
            attributes,
            stage=stage,
            tenant=tenant,
        )
        self.messages[mid] = rec
        self.total_enqueued += 1
        self.live += 1
        self.tenants.arrived(tenant, 1, enqueued_at)
        if offset >= 0 and stage is None:
            self.written_bytes[seq] = self.written_bytes.get(seq, 0) + size
        self._keep_payload(rec)
        if dedup_id is not None:
            self._dedup[dedup_id] = (mid, enqueued_at)
            self._dedup_order.append((enqueued_at, dedup_id))
        if group is not None:
            members = self._groups.setdefault(group, deque())
            members.append(mid)
            if len(members) > 1:
                return  # waits for the messages before it in its group
        if visible_at <= enqueued_at:
            self._push_fresh(rec)
        else:
            heapq.heappush(self._timers, (rec.visible_at, rec.arrival, 0, rec.id))

    def _enqueue_staged(self, op: EnqueueStaged, seq: int) -> None:
        for message in op.messages:
            self._enqueue(message, seq, op.key)
        if op.key not in self.staged_refs:  # every message was a duplicate: nothing needs it
            self.garbage.append((seq, op.key))

    def _remember_token(self, token: str) -> None:
        self.tokens[token] = None
        if len(self.tokens) > MAX_TOKENS:
            del self.tokens[next(iter(self.tokens))]

    def _push_fresh(self, item: Record | Run) -> None:
        fifo = self._fresh.get(item.priority)
        if fifo is None:
            fifo = self._fresh[item.priority] = deque()
            heapq.heappush(self._fresh_priorities, -item.priority)
        fifo.append(item)

    def _schedule(self, rec: Record) -> None:
        """Index ``rec`` anew after a change: a timer for when it next becomes deliverable."""
        rec.version += 1
        if rec.state != LEASED and self._follows(rec):
            # scheduled when it heads its group (a leased one: to die when it runs out); its
            # head may have waited for its lease (the fix of 7357bfd, made here too)
            self._head_again(rec)
            return
        when = rec.lease_until if rec.state == LEASED else rec.visible_at
        heapq.heappush(self._timers, (when, rec.arrival, rec.version, rec.id))

    def _head_again(self, rec: Record) -> None:
        assert rec.group is not None
        members = self._groups.get(rec.group)
        if members and members[0] != rec.id:
            self._schedule(self.messages[members[0]])

    def _complete(self, mids: list[str], at: float) -> None:
        """Messages completed at ``at``: those whose ids name their places leave the records
        for ``completed``; the others (format-1 ids) stay as records until pruned."""
        places: dict[int, list[int]] = {}
        freed: dict[tuple[int, str | None], list[int]] = {}  # (payload_seq, stage): [count, bytes]
        messages, finished = self.messages, self._finished
        self._ended(mids, at, requeued=False)
        for mid in mids:
            rec = messages[mid]
            rec.state, rec.finished_at, rec.receipt, rec.attributes = DONE, at, None, None
            rec.version += 1
            if rec.stage is None and rec.offset < 0:
                self._drop_payload(rec)
            elif (where := freed.get((rec.payload_seq, rec.stage))) is None:
                freed[rec.payload_seq, rec.stage] = [1, rec.size]
            else:
                where[0] += 1
                where[1] += rec.size
            if rec.group is not None:
                self._leave_group(rec)
            if len(mid) == ids.LENGTH:  # an id that names its place
                del messages[mid]
                seq, place = ids.split(mid)
                places.setdefault(seq, []).append(place)
            else:
                finished.append((at, mid))
        self.live -= len(mids)
        for (payload_seq, stage), (count, size) in freed.items():
            self._drop_payloads(payload_seq, stage, count, size)
        if places:
            self.completed.add(at, places)

    def _ended(self, mids: list[str], at: float, requeued: bool) -> None:
        """Tenants' counts: messages ``mids`` leave the leased (or the queued) together at
        ``at`` (0: their processing time not counted), ``requeued`` if queued again."""
        ended = Ended()
        by_tenant = ended.by_tenant
        for rec in map(self.messages.__getitem__, mids):
            if rec.state == LEASED:
                held = 0.0
                if at and rec.leased_at:
                    held = max(0.0, min(at, rec.lease_until) - rec.leased_at)
                ended.leased += 1
                ended.held += held
                if rec.tenant is not None:
                    entry = by_tenant.setdefault(rec.tenant, [0, 0.0, 0])
                    entry[0] += 1
                    entry[1] += held
            elif rec.state == QUEUED and not requeued and rec.tenant is not None:
                by_tenant.setdefault(rec.tenant, [0, 0.0, 0])[2] += 1
        self.tenants.ended(ended, at, requeued)

    def _die(self, rec: Record, at: float) -> None:
        """``rec`` is a dead letter from ``at`` on."""
        rec.state, rec.finished_at, rec.receipt = DEAD, at, None
        rec.version += 1
        self.live -= 1
        self.dead[rec.id] = None
        if rec.group is not None:
            self._leave_group(rec)

    def _follows(self, rec: Record) -> bool:
        """Whether ``rec`` waits behind an earlier message of its group."""
        return rec.group is not None and self._groups[rec.group][0] != rec.id

    def _leave_group(self, rec: Record) -> None:
        assert rec.group is not None
        members = self._groups[rec.group]
        was_head = members[0] == rec.id
        members.remove(rec.id)
        if not members:
            del self._groups[rec.group]
        elif was_head:
            self._schedule(self.messages[members[0]])
        else:
            self._head_again(rec)

    def _redrive(self, rec: Record, at: float) -> None:
        del self.dead[rec.id]
        self._arrivals += 1
        rec.arrival = self._arrivals
        rec.state, rec.attempts, rec.visible_at, rec.backoff = QUEUED, 0, at, False
        self.live += 1
        self.tenants.arrived(rec.tenant, 1, at, sent=False)
        if rec.group is not None:
            self._groups.setdefault(rec.group, deque()).append(rec.id)
        self._schedule(rec)

    def _discard(self, rec: Record) -> None:
        del self.dead[rec.id], self.messages[rec.id]
        self._drop_payload(rec)

    def _purge(self) -> None:
        for mid in [m for m, r in self.messages.items() if r.state != DONE]:
            rec = self.messages.pop(mid)
            self._drop_payload(rec)
        for runs in self.runs.values():
            for run in runs:
                self._drop_payloads(run.seq, run.stage, len(run), run.bytes)
        self.runs.clear()
        self.untouched = self.run_count = self.tabled = 0
        self.live = 0
        self.dead.clear()
        self._groups.clear()
        self._ready.clear()
        self._ready_priorities.clear()
        self._fresh.clear()
        self._fresh_priorities.clear()
        self._timers.clear()
        self.tenants.purged()
        self._aside.clear()

    # -- snapshots (checkpoints) -----------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """Everything the index holds, as of the operations folded so far."""
        return Snapshot(
            seq=self.seq,
            arrivals=self._arrivals,
            total_enqueued=self.total_enqueued,
            messages=list(self.messages.values()),
            dedup=[(d, mid, at) for d, (mid, at) in self._dedup.items()],
            written_bytes=self.written_bytes,
            garbage=self.garbage,
            settings=self.settings,
            tokens=list(self.tokens),
            dead=list(self.dead),
            queue=self.queue,
            runs=[run.to_snap() for runs in self.runs.values() for run in runs],
            completed=self.completed.to_snap(),
            shares=self.shares,
            vtime=self.vtime,
            tenants=self.tenants.to_snap(),
            busy=(self.tenants.busy, self.tenants.busy_at),
        )

    @classmethod
    def restore(cls, snap: Snapshot) -> QueueState:
        """The index a snapshot describes, its delivery structures rebuilt."""
        state = cls()
        state.seq, state.total_enqueued = snap.seq, snap.total_enqueued
        state._arrivals = snap.arrivals
        state.written_bytes, state.garbage = dict(snap.written_bytes), list(snap.garbage)
        state.settings = dict(snap.settings)
        state.tokens = dict.fromkeys(snap.tokens)
        state.queue = snap.queue
        state.completed = Completed.from_snap(snap.completed)
        state.shares, state.vtime = dict(snap.shares), snap.vtime
        records = sorted(snap.messages, key=lambda r: r.arrival)
        state.messages = {rec.id: rec for rec in records}
        finished = []
        for rec in records:
            rec.version = 0
            if rec.state == DONE:
                finished.append((rec.finished_at, rec.id))
                continue
            if rec.state == DEAD:
                state.dead[rec.id] = None
            else:
                state.live += 1
                if rec.group is not None:
                    state._groups.setdefault(rec.group, deque()).append(rec.id)
                if rec.state == LEASED:
                    state.tenants.restored_lease(rec.tenant)
                else:
                    state.tenants.arrived(rec.tenant, 1, 0.0, sent=False)
            state._keep_payload(rec)
        if snap.dead is not None:  # the order they died in, ties included
            state.dead = dict.fromkeys(snap.dead)
        else:
            state.dead = dict.fromkeys(
                sorted(state.dead, key=lambda mid: state.messages[mid].finished_at)
            )
        finished.sort()
        state._finished = deque(finished)
        fresh: list[Record | Run] = []
        for rec in records:
            if rec.state == LEASED or (rec.state == QUEUED and not state._follows(rec)):
                if rec.state == QUEUED and not rec.backoff and rec.visible_at <= rec.enqueued_at:
                    fresh.append(rec)
                else:
                    when = rec.lease_until if rec.state == LEASED else rec.visible_at
                    state._timers.append((when, rec.arrival, 0, rec.id))
        heapq.heapify(state._timers)
        for snap_run in snap.runs:
            run = Run.from_snap(state.queue, snap_run)
            state._add(run)
            count = len(run)
            state.untouched += count
            state.live += count
            if run.table is not None:
                state.tabled += count
            state._keep_payloads(run.seq, run.stage, count, run.bytes)
            state.tenants.arrived(run.tenant, count, 0.0, sent=False)
            fresh.append(run)
        state.tenants.restore(snap.tenants, snap.busy)
        fresh.sort(key=lambda item: item.arrival)
        for item in fresh:
            state._push_fresh(item)
        for did, mid, at in sorted(snap.dedup, key=lambda d: d[2]):
            state._dedup[did] = (mid, at)
            state._dedup_order.append((at, did))
        return state

    # -- storage bookkeeping ---------------------------------------------------------------------
    # Live messages are counted per object holding their payloads (``refs``, ``staged_refs``):
    # an object no message needs any more is garbage. (Nothing to do with releasing a lease.)

    def _keep_payload(self, rec: Record) -> None:
        """``rec``, a live message, needs its payload (unless it lies in an object of its own)."""
        if rec.stage is not None or rec.offset >= 0:
            self._keep_payloads(rec.payload_seq, rec.stage, 1, rec.size)

    def _keep_payloads(self, seq: int, stage: str | None, count: int, size: int) -> None:
        """``count`` more live messages need payloads of ``size`` bytes in all, lying in
        staged object ``stage``, else in log object ``seq``."""
        if stage is not None:
            self.staged_refs[stage] = self.staged_refs.get(stage, 0) + count
            return
        self.refs[seq] = self.refs.get(seq, 0) + count
        self.live_bytes[seq] = self.live_bytes.get(seq, 0) + size

    def _drop_payload(self, rec: Record) -> None:
        """``rec`` no longer needs its payload (completed, purged, or moved)."""
        if rec.stage is None and rec.offset < 0:
            self.garbage.append((self.seq, blob_key(rec.id)))
            return
        self._drop_payloads(rec.payload_seq, rec.stage, 1, rec.size)

    def _drop_payloads(self, seq: int, stage: str | None, count: int, size: int) -> None:
        """``count`` live messages no longer need their payloads (``size`` bytes in all), lying
        in staged object ``stage``, else in log object ``seq``."""
        if stage is not None:
            self._drop_staged(stage, count)
            return
        left = self.refs[seq] - count
        self.live_bytes[seq] -= size
        if left:
            self.refs[seq] = left
            return
        del self.refs[seq], self.live_bytes[seq]
        self.written_bytes.pop(seq, None)
        if seq < self.seq:  # a closed object: garbage now; the open one is judged on closing
            self.garbage.append((self.seq, segment.key(seq)))

    def _drop_staged(self, key: str, count: int = 1) -> None:
        """``count`` live messages no longer need their payloads in staged object ``key``."""
        left = self.staged_refs[key] - count
        if left:
            self.staged_refs[key] = left
        else:  # the staged object is garbage once its last message no longer needs it
            del self.staged_refs[key]
            self.garbage.append((self.seq, key))

    def _close(self, seq: int) -> None:
        """Folding moves on to log object ``seq``: the previous one is garbage if unreferenced."""
        previous = self.seq
        self.seq = seq
        if previous and previous < seq and previous not in self.refs:
            self.written_bytes.pop(previous, None)
            self.garbage.append((seq, segment.key(previous)))

    # -- choosing what to deliver ------------------------------------------------------------------

    def expire(self, now: float, max_attempts: int) -> list[Record]:
        """Make what is due by ``now`` deliverable, but for expired leases with no attempts
        left: those are returned, and the caller must apply a Bury for them at once (they
        have left the ready structures). Burying a group's head frees its next message, so
        expire before ``select``."""
        bury: list[Record] = []
        timers, messages = self._timers, self.messages
        while timers and timers[0][0] <= now:
            _, n, version, mid = heapq.heappop(timers)
            rec = messages.get(mid)
            if rec is None or rec.version != version:
                continue
            if rec.state == LEASED and rec.attempts >= max_attempts:
                bury.append(rec)
            elif not self._follows(rec):  # a group's later message waits to head it
                self._push_ready(rec, n)
        return bury

    def select(
        self, now: float, limit: int, max_attempts: int, per_group: int = 1, fair: bool = False
    ) -> tuple[list[Record], list[Record]]:
        """Up to ``limit`` deliverable messages, best first, and expired ones to bury (as
        ``expire``: none when it was called at ``now`` and its Bury applied). A group's head
        comes with up to ``per_group - 1`` of the messages after it, in order. Strictly by
        priority, or with ``fair`` by shares (``_served``); first come, first served within one.

        The caller must apply a Lease for the first list and a Bury for the second at once:
        both have left the ready structures.
        """
        bury = self.expire(now, max_attempts)
        if fair:
            return self._select_fair(now, limit, max_attempts, per_group), bury
        chosen: list[Record] = []
        given: dict[str, int] = {}
        while len(chosen) < limit:
            priority = self._top_priority()
            if priority is None:
                break
            got = self._fetch(priority, limit - len(chosen), now, given)
            if got is None:
                break  # a run's table is to be read back first (``wanted``)
            chosen.extend(got)
            head = chosen[-1] if chosen else None
            if per_group > 1 and head is not None and head.group is not None:
                room = min(per_group - 1, limit - len(chosen))
                chosen.extend(self._followers(head, now, room, max_attempts))
        return chosen, bury

    def _select_fair(
        self, now: float, limit: int, max_attempts: int, per_group: int
    ) -> list[Record]:
        """``select`` by shares: the priority with the lowest start tag (the higher one on a
        tie) delivers next, one message at a time, from messages taken a share of the limit at
        a time; those taken and not delivered go back (ahead of the rest of their priority)."""
        chosen: list[Record] = []
        vtime, shares = self.vtime, dict(self.shares)
        active = {
            p
            for p in {*self._fresh, *self._ready, *self._aside}
            if self._fresh_head(p) is not None
            or self._ready_top(p) is not None
            or self._aside_heads(p)
        }
        taken: dict[int, deque[Record]] = {}
        given: dict[str, int] = {}
        stuck = False
        while len(chosen) < limit and active and not stuck:
            priority = min(active, key=lambda p: (max(shares.get(p, 0.0), vtime), -p))
            buffer = taken.get(priority)
            if not buffer:
                weights = sum(p + 1 for p in active)
                want = -(-(limit - len(chosen)) * (priority + 1) // weights) + 1
                got = self._fetch(priority, want, now, given)
                stuck = got is None
                if not got:
                    active.discard(priority)
                    continue
                buffer = taken[priority] = deque(got)
            rec = buffer.popleft()
            chosen.append(rec)
            vtime, shares[priority] = _served(shares, vtime, priority)
            if per_group > 1 and rec.group is not None and len(chosen) < limit:
                room = min(per_group - 1, limit - len(chosen))
                for follower in self._followers(rec, now, room, max_attempts):
                    chosen.append(follower)
                    vtime, shares[follower.priority] = _served(shares, vtime, follower.priority)
        for rest in taken.values():
            for rec in rest:
                self._push_ready(rec, rec.arrival)
        return chosen

    def _fetch(
        self, priority: int, count: int, now: float, given: dict[str, int]
    ) -> list[Record] | None:
        """Up to ``count`` deliverable messages of ``priority``, in order, taken from the ready
        structures; a group's head ends the list (its followers go with it). None if a run's
        table must be read back first.

        With tenants noisy (``tenants``), a message of a noisy tenant met first goes aside
        instead; quiet tenants' messages go first, in order (those aside whose tenant is quiet
        again among them), then noisy ones, the tenant with the fewest in flight first (counting
        ``given``: the deliveries chosen so far, by tenant, which this adds to)."""
        out: list[Record] = []
        lanes = None
        if self._aside or self.tenants.flagged:
            lanes = self._aside.setdefault(priority, {})
        while len(out) < count:
            fresh, top = self._fresh_head(priority), self._ready_top(priority)
            from_fresh = fresh is not None and (top is None or _front(fresh) < top[0])
            head = fresh if from_fresh else None if top is None else self.messages[top[2]]
            bound = top[0] if from_fresh and top is not None else None  # a run stops there
            if lanes is not None:
                if head is not None and self.tenants.noisy(head.tenant, now):
                    self._set_aside(priority, head, from_fresh)
                    continue
                front = None if head is None else _front(head)
                quiet = self._quiet_lane(lanes, now)
                aside: tuple[str, int] | None = None  # (tenant, count) to take from its lane
                if quiet is not None and (front is None or quiet[0] < front):
                    aside = quiet[1], count - len(out)
                    if quiet[2] is not None and (front is None or quiet[2] < front):
                        front = quiet[2]  # (the next lane's message is next after)
                elif head is None:
                    aside = self._noisiest_last(lanes, given, count - len(out), now)
                    if aside is None:
                        break
                elif quiet is not None and (bound is None or quiet[0] < bound):
                    bound = quiet[0]  # the head goes, up to the earliest quiet lane
                if aside is not None:
                    name, room = aside
                    taken = self._take_aside(lanes, name, room, front, now)
                    if taken is None:
                        return out or None
                    given[name] = given.get(name, 0) + len(taken)
                    out.extend(taken)
                    if out and out[-1].group is not None:
                        break
                    continue
            if head is None:
                break
            if from_fresh:
                assert fresh is not None
                if isinstance(fresh, Run):
                    if fresh.table is None:
                        return out or None
                    room = count - len(out)
                    if bound is not None:
                        room = min(room, bound - fresh.front())
                    out.extend(self._take_many(fresh, room))
                    continue
                self._fresh[priority].popleft()
                if not self._deliverable_head(fresh, now):
                    continue
                out.append(fresh)
            else:
                rec = self.messages[heapq.heappop(self._ready[priority])[2]]
                if not self._deliverable_head(rec, now):
                    continue
                out.append(rec)
            if out[-1].group is not None:
                break
        if lanes is not None and not lanes:
            del self._aside[priority]
        return out

    def _deliverable_head(self, rec: Record, now: float) -> bool:
        """Whether ``rec``, out of the ready structures, is to be delivered: a group's head
        waits (on a timer) while messages after it are still leased, until they are done or
        back."""
        if rec.group is not None and (until := self._held_behind(rec, now)) is not None:
            heapq.heappush(self._timers, (until, rec.arrival, rec.version, rec.id))
            return False
        return True

    # -- tenant fairness: noisy tenants' messages wait aside ---------------------------------------

    def _set_aside(self, priority: int, item: Record | Run, fresh: bool) -> None:
        """Move the head of ``priority``'s ready structures (a noisy tenant's) aside."""
        if fresh:
            self._fresh[priority].popleft()
        else:
            heapq.heappop(self._ready[priority])
        assert item.tenant is not None
        self._push_aside(self._aside.setdefault(priority, {}).setdefault(item.tenant, []), item)

    def _push_aside(self, lane: Lane, item: Record | Run) -> None:
        version = -1 if isinstance(item, Run) else item.version
        heapq.heappush(lane, (_front(item), version, next(self._aside_order), item))

    def _lane_head(self, lane: Lane) -> int | None:
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

    def _lane_next(self, lane: Lane, now: float) -> int | None:
        """``_lane_head``, past a group's head that must wait for messages after it still
        leased (``_deliverable_head`` puts it on a timer)."""
        while (n := self._lane_head(lane)) is not None:
            item = lane[0][3]
            if isinstance(item, Run) or self._deliverable_head(item, now):
                return n
            heapq.heappop(lane)
        return None

    def _quiet_lane(self, lanes: dict[str, Lane], now: float) -> tuple[int, str, int | None] | None:
        """The lane of a tenant quiet again with the earliest message: (its number, tenant,
        the number of the next lane's earliest); lanes left empty are dropped."""
        heads: list[tuple[int, str]] = []
        for name in list(lanes):
            n = self._lane_next(lanes[name], now)
            if n is None:
                del lanes[name]
            elif not self.tenants.noisy(name, now):
                heads.append((n, name))
        if not heads:
            return None
        heads.sort()
        return heads[0][0], heads[0][1], heads[1][0] if len(heads) > 1 else None

    def _noisiest_last(
        self, lanes: dict[str, Lane], given: dict[str, int], wanted: int, now: float
    ) -> tuple[str, int] | None:
        """The noisy tenant to deliver from, and how many of the ``wanted`` (``_noisy_turn``,
        counting ``given``: what this delivery chose of each so far)."""
        ranked = [
            (self.tenants.in_flight_of(name) + given.get(name, 0), n, name)
            for name, lane in lanes.items()
            if (n := self._lane_next(lane, now)) is not None
        ]
        return _noisy_turn(ranked, wanted) if ranked else None

    def _take_aside(
        self,
        lanes: dict[str, Lane],
        name: str,
        count: int,
        bound: int | None,
        now: float,
    ) -> list[Record] | None:
        """Up to ``count`` messages from the front of ``name``'s lane, in order, those before
        arrival number ``bound`` (if given); a group's head ends them. None if a run's table
        must be read back first (and nothing was taken)."""
        lane = lanes[name]
        taken: list[Record] = []
        while len(taken) < count:
            n = self._lane_head(lane)
            if n is None or (bound is not None and n >= bound):
                break
            item = heapq.heappop(lane)[3]
            if isinstance(item, Run):
                if item.table is None:
                    self._push_aside(lane, item)
                    return taken or None
                room = count - len(taken)
                if bound is not None:
                    room = min(room, bound - n)
                taken.extend(self._take_many(item, room))
                if len(item):
                    self._push_aside(lane, item)
            elif self._deliverable_head(item, now):
                taken.append(item)
                if item.group is not None:
                    break
        return taken

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
        aside = self._aside_priority() if self._aside else None
        return ready if aside is None or (ready is not None and ready >= aside) else aside

    def _aside_heads(self, priority: int) -> list[Record | Run]:
        """The first message (or run) of each lane of ``priority``."""
        heads = []
        for lane in self._aside.get(priority, {}).values():
            if self._lane_head(lane) is not None:
                heads.append(lane[0][3])
        return heads

    def _aside_priority(self) -> int | None:
        """The highest priority with messages aside, forgetting lanes left with none."""
        for priority in sorted(self._aside, reverse=True):
            lanes = self._aside[priority]
            for name in list(lanes):
                if self._lane_head(lanes[name]) is None:
                    del lanes[name]
            if lanes:
                return priority
            del self._aside[priority]
        return None

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
            rec = self.messages.get(mid)
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

    def _followers(self, head: Record, now: float, count: int, max_attempts: int) -> list[Record]:
        """Up to ``count`` messages after ``head`` in its group, deliverable now, in order."""
        assert head.group is not None
        found = []
        for mid in itertools.islice(self._groups[head.group], 1, 1 + count):
            rec = self.messages[mid]
            if not (
                (rec.state == QUEUED and rec.visible_at <= now)
                or (rec.state == LEASED and rec.lease_until <= now and rec.attempts < max_attempts)
            ):
                break
            found.append(rec)
        return found

    def _held_behind(self, head: Record, now: float) -> float | None:
        """When the latest lease on a message after ``head`` in its group ends, if one runs
        (messages delivered together with their head: at most MAX_PER_GROUP after it)."""
        assert head.group is not None
        ends = [
            rec.lease_until
            for mid in itertools.islice(self._groups[head.group], 1, MAX_PER_GROUP)
            if (rec := self.messages[mid]).state == LEASED and rec.lease_until > now
        ]
        return max(ends, default=None)

    def _best_fresh(self) -> Record | Run | None:
        """The first fresh record or run of the highest priority, dropping stale entries
        (records changed since, runs all taken)."""
        priorities, fresh = self._fresh_priorities, self._fresh
        while priorities:
            fifo = fresh[-priorities[0]]
            while fifo:
                head = fifo[0]
                if len(head) if isinstance(head, Run) else head.version == 0:
                    return head
                fifo.popleft()
            del fresh[-heapq.heappop(priorities)]
        return None

    def next_change(self) -> float | None:
        """The earliest time a timer fires (a delay ends, a lease expires), if any."""
        timers = self._timers
        while timers:
            _, _, version, mid = timers[0]
            rec = self.messages.get(mid)
            if rec is not None and rec.version == version:
                return timers[0][0]
            heapq.heappop(timers)
        return None

    # -- reads -----------------------------------------------------------------------------------

    def receipt_holder(self, receipt: str) -> Record | None:
        """The leased message ``receipt`` belongs to, if that lease is still its latest."""
        rec = self.messages.get(receipt.partition("~")[0])
        if rec is None or rec.state != LEASED or rec.receipt != receipt:
            return None
        return rec

    def dedup_hit(self, dedup_id: str, now: float, window: float) -> str | None:
        hit = self._dedup.get(dedup_id)
        return hit[0] if hit is not None and hit[1] + window > now else None

    def status(self, rec: Record, now: float) -> MessageStatus:
        if rec.state == DONE:
            return MessageStatus.COMPLETED
        if rec.state == DEAD:
            return MessageStatus.DEAD
        if rec.state == LEASED:
            return MessageStatus.PROCESSING if rec.lease_until > now else MessageStatus.PENDING
        if rec.visible_at > now:
            return MessageStatus.RETRY if rec.backoff else MessageStatus.DELAYED
        return MessageStatus.PENDING

    def counts(self, now: float, retention: float) -> dict[MessageStatus, int]:
        """Messages by status at ``now``; completed ones only within ``retention``."""
        counts = dict.fromkeys(MessageStatus, 0)
        counts[MessageStatus.PENDING] = self.untouched
        for rec in self.messages.values():
            if rec.state != DONE or rec.finished_at + retention > now:
                counts[self.status(rec, now)] += 1
        counts[MessageStatus.COMPLETED] += self.completed.count_since(now - retention)
        return counts

    def quiet_counts(self, now: float) -> QuietCounts:
        """Tenant fairness at ``now``, as SQS fair queues report it: the tenants noisy, and the
        messages of the others (quiet tenants, and messages with no tenant)."""
        noisy = self.tenants.noisy_names(now)
        visible = in_flight = delayed = 0
        oldest = now
        noisy_records = 0  # queued records of noisy tenants (the rest of them are in runs)
        for rec in self.messages.values():
            if rec.state == LEASED and rec.lease_until > now:
                in_flight += rec.tenant not in noisy
                continue
            if rec.state == LEASED:  # its lease ran out: visible (as ``status`` says)
                if rec.tenant not in noisy:
                    visible += 1
                    oldest = min(oldest, rec.enqueued_at)
                continue
            if rec.state != QUEUED:
                continue
            if rec.tenant in noisy:
                noisy_records += 1
            elif rec.visible_at > now:
                delayed += 1
            else:
                visible += 1
                oldest = min(oldest, rec.enqueued_at)
        noisy_waiting = sum(self.tenants.by_name[name].waiting for name in noisy)
        visible += self.untouched - (noisy_waiting - noisy_records)
        for fifo in self._fresh.values():
            for item in fifo:
                if isinstance(item, Run) and len(item) and item.tenant not in noisy:
                    oldest = min(oldest, item.enqueued_at)
                    break
        for lanes in self._aside.values():
            for name, lane in lanes.items():
                if name not in noisy and self._lane_head(lane) is not None:
                    oldest = min(oldest, lane[0][3].enqueued_at)
        return QuietCounts(len(noisy), visible, in_flight, delayed, now - oldest)

    def completed_at(self, mid: str) -> float | None:
        """When ``mid`` was completed, if it is a completed message with no record."""
        where = ids.where(mid, self.queue)
        return None if where is None else self.completed.finished_at(*where)

    def deliverable(self, now: float, limit: int, fair: bool = False) -> list[Record]:
        """The next ``limit`` messages ``select`` would deliver at ``now``, leaving them be."""
        heads = (
            rec
            for rec in self.messages.values()
            if (rec.state == QUEUED and rec.visible_at <= now)
            or (rec.state == LEASED and rec.lease_until <= now)
        )
        eligible = (
            rec
            for rec in heads
            if rec.group is None
            or (self._groups[rec.group][0] == rec.id and self._held_behind(rec, now) is None)
        )
        runs = {id(run): run for run in self._fresh_runs(limit, fair)}
        for lanes in self._aside.values():
            for lane in lanes.values():
                runs.update((id(e[3]), e[3]) for e in lane if isinstance(e[3], Run) and len(e[3]))
        untouched = (rec for run in runs.values() for rec in itertools.islice(run.members(), limit))
        by_priority: dict[int, list[Record]] = {}
        for rec in itertools.chain(eligible, untouched):
            by_priority.setdefault(rec.priority, []).append(rec)
        noisy = self.tenants.noisy_names(now)
        given: dict[str, int] = {}
        out: list[Record] = []
        if not fair:
            for priority in sorted(by_priority, reverse=True):
                if len(out) >= limit:
                    break
                recs = by_priority[priority]
                out.extend(self._in_turn(recs, noisy, limit - len(out), given))
            return out
        waiting = {
            p: deque(self._in_turn(recs, noisy, limit, given)) for p, recs in by_priority.items()
        }
        vtime, shares = self.vtime, dict(self.shares)
        while waiting and len(out) < limit:
            priority = min(waiting, key=lambda p: (max(shares.get(p, 0.0), vtime), -p))
            out.append(waiting[priority].popleft())
            vtime, shares[priority] = _served(shares, vtime, priority)
            if not waiting[priority]:
                del waiting[priority]
        return out

    def _in_turn(
        self, recs: list[Record], noisy: set[str], wanted: int, given: dict[str, int]
    ) -> list[Record]:
        """The first ``wanted`` of deliverable ``recs`` (of one priority) in the order
        ``select`` takes them: quiet tenants' in arrival order, then noisy tenants' in turns
        (``_noisy_turn``), which ``given`` counts."""
        recs = sorted(recs, key=lambda r: r.arrival)
        out = [rec for rec in recs if rec.tenant not in noisy][:wanted]
        lanes: dict[str, deque[Record]] = {}
        for rec in recs:
            if rec.tenant in noisy:
                lanes.setdefault(rec.tenant, deque()).append(rec)
        while len(out) < wanted and lanes:
            ranked = [
                (self.tenants.in_flight_of(name) + given.get(name, 0), lane[0].arrival, name)
                for name, lane in lanes.items()
            ]
            name, room = _noisy_turn(ranked, wanted - len(out))
            lane, took = lanes[name], 0
            while took < room and lane:
                rec = lane.popleft()
                out.append(rec)
                took += 1
                if rec.group is not None:
                    break
            given[name] = given.get(name, 0) + took
            if not lane:
                del lanes[name]
        return out

    @property
    def size(self) -> int:
        """The size of the index in entries (records and runs): what a checkpoint's size
        follows, for the checkpoint schedule."""
        return len(self.messages) + self.run_count + len(self.completed)

    def find(self, mid: str) -> Record | None:
        """The record of ``mid``: its own, or (for an untouched message) one made to be read."""
        rec = self.messages.get(mid)
        if rec is None and (found := self._run_of(mid)) is not None:
            run, k = found
            rec = run.member(k, run.offset_of(k))
        return rec

    def all(self) -> Iterator[Record]:
        """Every message in the index as a record (untouched ones made to be read)."""
        yield from self.messages.values()
        for runs in self.runs.values():
            for run in runs:
                yield from run.members()

    def iter_dead(self) -> Iterator[Record]:
        return (self.messages[mid] for mid in self.dead)

    # -- forgetting what is no longer needed -----------------------------------------------------

    def prunable(self, now: float, retention: float, dedup_window: float) -> bool:
        """Whether a Prune at ``now`` would forget anything."""
        return bool(
            (self._finished and self._finished[0][0] + retention <= now)
            or self.completed.prunable(now - retention)
            or (self._dedup_order and self._dedup_order[0][0] + dedup_window <= now)
        )

    def _prune(self, now: float, retention: float, dedup_window: float) -> int:
        """Forget completed messages past ``retention`` and dedup ids past the window."""
        pruned = 0
        finished, messages = self._finished, self.messages
        while finished and finished[0][0] + retention <= now:
            _, mid = finished.popleft()
            rec = messages.get(mid)
            if rec is not None and rec.state == DONE:
                del messages[mid]
                pruned += 1
        pruned += self.completed.prune(now - retention)
        order, dedup = self._dedup_order, self._dedup
        while order and order[0][0] + dedup_window <= now:
            at, did = order.popleft()
            hit = dedup.get(did)
            if hit is not None and hit[1] == at:
                del dedup[did]
                pruned += 1
        return pruned
