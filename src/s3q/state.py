"""The queue's index: a pure, deterministic function of its log.

``QueueState.apply`` folds one operation into the index; nothing here does I/O or reads a clock.
Reads that depend on time take ``now`` as an argument. Payloads are not kept: a message knows
where its payload lies (log sequence number, offset, size).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator

import msgspec

from . import ids, log
from .message import MessageStatus
from .ops import (
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

QUEUED, LEASED, DONE, DEAD = 0, 1, 2, 3
MAX_TOKENS = 10_000  # commit tokens remembered (streaming sinks need only their last batches)


def blob_key(mid: str) -> str:
    """Where a payload too large for the log lies."""
    return f"blob/{mid}"


class Rec(msgspec.Struct, array_like=True, gc=False):
    """One message in the index (not tracked by the cyclic GC: it holds no cycles)."""

    id: str
    n: int  # order of arrival: FIFO within a priority
    priority: int
    enqueued_at: float
    visible_at: float
    seg: int  # where the payload lies: log sequence number, offset (-1: blob/<id>), size
    offset: int
    size: int
    group: str | None = None
    dedup_id: str | None = None
    attributes: dict[str, str] | None = None
    attempts: int = 0
    state: int = QUEUED
    receipt: str | None = None
    lease_until: float = 0.0
    last_error: str | None = None
    finished_at: float = 0.0
    version: int = 0  # bumped on every change: heap entries of older versions are stale
    backoff: bool = False  # visible_at was set by a failure, not by a delay
    stage: str | None = None  # the payload lies in this staged object, not in log object seg


class Snapshot(msgspec.Struct, array_like=True):
    """The index at log object ``seq``: what a checkpoint holds."""

    seq: int
    n: int
    total_enqueued: int
    messages: list[Rec]
    dedup: list[tuple[str, str, float]]  # (dedup_id, message id, enqueued_at)
    seg_bytes: dict[int, int]
    garbage: list[tuple[int, str]]
    settings: dict[str, int | float | dict[str, str] | None] = {}
    tokens: list[str] = []  # commit tokens, oldest first
    dead: list[str] | None = None  # dead letters in the order they died (None: older checkpoints)
    queue: str = ""  # the queue's id (format 2)


class QueueState:
    """Messages by id, with the structures that make dequeue, expiry and groups cheap."""

    def __init__(self) -> None:
        self.messages: dict[str, Rec] = {}
        self.total_enqueued = 0
        self.live = 0  # queued or leased
        self.dead: dict[str, None] = {}  # ordered set, oldest first
        self._n = 0
        # Deliverable messages. Fresh ones (visible at enqueue, never changed since: version 0)
        # wait in one FIFO per priority, 8 bytes each; the others in a heap.
        self._fresh: dict[int, deque[Rec]] = {}
        self._fresh_priorities: list[int] = []  # heap of -priority of the FIFOs in _fresh
        self._ready: list[tuple[int, int, int, str]] = []  # (-priority, n, version, id)
        self._timers: list[tuple[float, int, int, str]] = []  # (time, n, version, id)
        self._groups: dict[str, deque[str]] = {}
        self._dedup: dict[str, tuple[str, float]] = {}  # dedup_id -> (id, enqueued_at)
        self._dedup_order: deque[tuple[float, str]] = deque()
        self._finished: deque[tuple[float, str]] = deque()  # completed, oldest first
        # Storage bookkeeping: which log objects still hold payloads of live messages.
        self.seq = 0  # the log object being folded
        self.refs: dict[int, int] = {}  # log seq -> live messages whose payload lies there
        self.live_bytes: dict[int, int] = {}  # log seq -> bytes of those payloads
        self.seg_bytes: dict[int, int] = {}  # log seq -> payload bytes it was written with
        self.garbage: list[tuple[int, str]] = []  # (seq it became garbage at, object key)
        self.pruned = 0  # how much the last Prune forgot
        self._sizes: dict[int, int] = {}
        self.settings: dict[str, int | float | dict[str, str] | None] = {}  # saved with the queue
        self.staged_refs: dict[str, int] = {}  # staged object -> live messages whose payload it is
        self.tokens: dict[str, None] = {}  # commit tokens, oldest first
        self.queue = ""  # the queue's id: what its message ids begin with (``ids``)

    # -- folding the log -------------------------------------------------------------------------

    def apply(self, op: AnyOp, seq: int) -> None:
        """Fold ``op``, read from (or bound for) log object ``seq``, into the index."""
        if seq != self.seq:
            self._close(seq)
        if isinstance(op, Append):
            self._append(op, seq)
        elif isinstance(op, Enqueue):
            self._enqueue(op, seq)
        elif isinstance(op, EnqueueStaged):
            self._enqueue_staged(op, seq)
        elif isinstance(op, CommitToken):
            self._remember_token(op.token)
        elif isinstance(op, Lease):
            for mid, receipt, until in op.leases:
                rec = self.messages[mid]
                rec.state, rec.receipt, rec.lease_until = LEASED, receipt, until
                rec.attempts += 1
                self._schedule(rec)
        elif isinstance(op, Complete):
            for mid in op.ids:
                self._finish(self.messages[mid], DONE, op.at)
        elif isinstance(op, Release):
            for mid in op.ids:
                rec = self.messages[mid]
                rec.state, rec.receipt, rec.attempts = QUEUED, None, rec.attempts - 1
                self._schedule(rec)  # visible_at is in the past: deliverable at once
        elif isinstance(op, Extend):
            rec = self.messages[op.id]
            rec.lease_until = op.until
            self._schedule(rec)
        elif isinstance(op, Fail):
            rec = self.messages[op.id]
            rec.last_error = op.error
            if op.retry_at is None:
                self._finish(rec, DEAD, op.at)
            else:
                rec.state, rec.visible_at, rec.backoff, rec.receipt = (
                    QUEUED,
                    op.retry_at,
                    True,
                    None,
                )
                self._schedule(rec)
        elif isinstance(op, Bury):
            for mid in op.ids:
                rec = self.messages[mid]
                rec.last_error = op.error
                self._finish(rec, DEAD, op.at)
        elif isinstance(op, Redrive):
            for mid in op.ids:
                self._redrive(self.messages[mid], op.at)
        elif isinstance(op, Relocate):
            for mid, offset in op.moves:
                rec = self.messages[mid]
                self._release(rec)
                rec.seg, rec.offset, rec.stage = seq, offset, None
                self._hold(rec)
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
        at, first, sizes, offsets, key = op.enqueued_at, op.first, op.sizes, op.offsets, op.key
        priorities, delays, groups = op.priorities, op.delays, op.groups
        dedup_ids, attributes, blobs = op.dedup_ids, op.attributes, op.blobs
        offset = op.offset
        for i, size in enumerate(sizes):
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
                priorities[i] if priorities else 0,
                at,
                at + delay if delay else at,
                seq,
                where,
                size,
                groups[i] if groups else None,
                dedup_ids[i] if dedup_ids else None,
                (attributes[i] or None) if attributes else None,
                stage,
            )
        if key is not None and key not in self.staged_refs:  # all duplicates: not needed
            self.garbage.append((seq, key))

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
    ) -> None:
        self._n += 1
        rec = Rec(
            mid,
            self._n,
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
        )
        self.messages[mid] = rec
        self.total_enqueued += 1
        self.live += 1
        if offset >= 0 and stage is None:
            self.seg_bytes[seq] = self.seg_bytes.get(seq, 0) + size
        self._hold(rec)
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
            heapq.heappush(self._timers, (rec.visible_at, rec.n, 0, rec.id))

    def _enqueue_staged(self, op: EnqueueStaged, seq: int) -> None:
        for message in op.messages:
            self._enqueue(message, seq, op.key)
        if op.key not in self.staged_refs:  # every message was a duplicate: nothing needs it
            self.garbage.append((seq, op.key))

    def _remember_token(self, token: str) -> None:
        self.tokens[token] = None
        if len(self.tokens) > MAX_TOKENS:
            del self.tokens[next(iter(self.tokens))]

    def _push_fresh(self, rec: Rec) -> None:
        fifo = self._fresh.get(rec.priority)
        if fifo is None:
            fifo = self._fresh[rec.priority] = deque()
            heapq.heappush(self._fresh_priorities, -rec.priority)
        fifo.append(rec)

    def _schedule(self, rec: Rec) -> None:
        """Index ``rec`` anew after a change: a timer for when it next becomes deliverable."""
        rec.version += 1
        if rec.group is not None and self._groups[rec.group][0] != rec.id:
            return
        when = rec.lease_until if rec.state == LEASED else rec.visible_at
        heapq.heappush(self._timers, (when, rec.n, rec.version, rec.id))

    def _finish(self, rec: Rec, state: int, at: float) -> None:
        rec.state, rec.finished_at, rec.receipt = state, at, None
        rec.version += 1
        self.live -= 1
        if state == DONE:
            rec.attributes = None
            self._finished.append((at, rec.id))
            self._release(rec)
        else:
            self.dead[rec.id] = None
        if rec.group is not None:
            self._leave_group(rec)

    def _leave_group(self, rec: Rec) -> None:
        assert rec.group is not None
        members = self._groups[rec.group]
        was_head = members[0] == rec.id
        members.remove(rec.id)
        if not members:
            del self._groups[rec.group]
        elif was_head:
            self._schedule(self.messages[members[0]])

    def _redrive(self, rec: Rec, at: float) -> None:
        del self.dead[rec.id]
        self._n += 1
        rec.n, rec.state, rec.attempts, rec.visible_at, rec.backoff = self._n, QUEUED, 0, at, False
        self.live += 1
        if rec.group is not None:
            self._groups.setdefault(rec.group, deque()).append(rec.id)
        self._schedule(rec)

    def _discard(self, rec: Rec) -> None:
        del self.dead[rec.id], self.messages[rec.id]
        self._release(rec)

    def _purge(self) -> None:
        for mid in [m for m, r in self.messages.items() if r.state != DONE]:
            rec = self.messages.pop(mid)
            self._release(rec)
        self.live = 0
        self.dead.clear()
        self._groups.clear()
        self._ready.clear()
        self._fresh.clear()
        self._fresh_priorities.clear()
        self._timers.clear()

    # -- snapshots (checkpoints) -----------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """Everything the index holds, as of the operations folded so far."""
        return Snapshot(
            seq=self.seq,
            n=self._n,
            total_enqueued=self.total_enqueued,
            messages=list(self.messages.values()),
            dedup=[(d, mid, at) for d, (mid, at) in self._dedup.items()],
            seg_bytes=self.seg_bytes,
            garbage=self.garbage,
            settings=self.settings,
            tokens=list(self.tokens),
            dead=list(self.dead),
            queue=self.queue,
        )

    @classmethod
    def restore(cls, snap: Snapshot) -> QueueState:
        """The index a snapshot describes, its delivery structures rebuilt."""
        state = cls()
        state.seq, state._n, state.total_enqueued = snap.seq, snap.n, snap.total_enqueued
        state.seg_bytes, state.garbage = dict(snap.seg_bytes), list(snap.garbage)
        state.settings = dict(snap.settings)
        state.tokens = dict.fromkeys(snap.tokens)
        state.queue = snap.queue
        records = sorted(snap.messages, key=lambda r: r.n)
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
            state._hold(rec)
        if snap.dead is not None:  # the order they died in, ties included
            state.dead = dict.fromkeys(snap.dead)
        else:
            state.dead = dict.fromkeys(
                sorted(state.dead, key=lambda mid: state.messages[mid].finished_at)
            )
        finished.sort()
        state._finished = deque(finished)
        for rec in records:
            if rec.state in (QUEUED, LEASED) and (
                rec.group is None or state._groups[rec.group][0] == rec.id
            ):
                if rec.state == QUEUED and not rec.backoff and rec.visible_at <= rec.enqueued_at:
                    state._push_fresh(rec)
                else:
                    when = rec.lease_until if rec.state == LEASED else rec.visible_at
                    state._timers.append((when, rec.n, 0, rec.id))
        heapq.heapify(state._timers)
        for did, mid, at in sorted(snap.dedup, key=lambda d: d[2]):
            state._dedup[did] = (mid, at)
            state._dedup_order.append((at, did))
        return state

    # -- storage bookkeeping ---------------------------------------------------------------------

    def _hold(self, rec: Rec) -> None:
        if rec.stage is not None:
            self.staged_refs[rec.stage] = self.staged_refs.get(rec.stage, 0) + 1
            return
        if rec.offset >= 0:
            self.refs[rec.seg] = self.refs.get(rec.seg, 0) + 1
            self.live_bytes[rec.seg] = self.live_bytes.get(rec.seg, 0) + rec.size

    def _release(self, rec: Rec) -> None:
        """``rec`` no longer needs its payload (completed, purged, or moved)."""
        if rec.stage is not None:
            self._release_staged(rec.stage)
            return
        if rec.offset < 0:
            self.garbage.append((self.seq, blob_key(rec.id)))
            return
        seg = rec.seg
        left = self.refs[seg] - 1
        self.live_bytes[seg] -= rec.size
        if left:
            self.refs[seg] = left
            return
        del self.refs[seg], self.live_bytes[seg]
        self.seg_bytes.pop(seg, None)
        if seg < self.seq:  # a closed object: garbage now; the open one is judged on closing
            self.garbage.append((self.seq, log.key(seg)))

    def _release_staged(self, key: str) -> None:
        left = self.staged_refs[key] - 1
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
            self.seg_bytes.pop(previous, None)
            self.garbage.append((seq, log.key(previous)))

    # -- choosing what to deliver ------------------------------------------------------------------

    def select(self, now: float, limit: int, max_attempts: int) -> tuple[list[Rec], list[Rec]]:
        """Up to ``limit`` deliverable messages, best first, and the expired ones to bury.

        The caller must apply a Lease for the first list and a Bury for the second at once:
        both have left the ready structures.
        """
        bury: list[Rec] = []
        timers, ready, messages = self._timers, self._ready, self.messages
        while timers and timers[0][0] <= now:
            _, n, version, mid = heapq.heappop(timers)
            rec = messages.get(mid)
            if rec is None or rec.version != version:
                continue
            if rec.state == LEASED and rec.attempts >= max_attempts:
                bury.append(rec)
            else:
                heapq.heappush(ready, (-rec.priority, n, version, mid))
        chosen: list[Rec] = []
        while len(chosen) < limit:
            fresh = self._best_fresh()
            while ready:
                _, _, version, mid = ready[0]
                rec = messages.get(mid)
                if rec is not None and rec.version == version:
                    break
                heapq.heappop(ready)
            if fresh is None and not ready:
                break
            if fresh is not None and (
                not ready or (-fresh.priority, fresh.n) < (ready[0][0], ready[0][1])
            ):
                self._fresh[fresh.priority].popleft()
                chosen.append(fresh)
            else:
                chosen.append(messages[heapq.heappop(ready)[3]])
        return chosen, bury

    def _best_fresh(self) -> Rec | None:
        """The first fresh message of the highest priority, dropping stale entries."""
        priorities, fresh = self._fresh_priorities, self._fresh
        while priorities:
            fifo = fresh[-priorities[0]]
            while fifo and fifo[0].version != 0:
                fifo.popleft()
            if fifo:
                return fifo[0]
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

    def receipt_holder(self, receipt: str) -> Rec | None:
        """The leased message ``receipt`` belongs to, if that lease is still its latest."""
        rec = self.messages.get(receipt.partition("~")[0])
        if rec is None or rec.state != LEASED or rec.receipt != receipt:
            return None
        return rec

    def dedup_hit(self, dedup_id: str, now: float, window: float) -> str | None:
        hit = self._dedup.get(dedup_id)
        return hit[0] if hit is not None and hit[1] + window > now else None

    def status(self, rec: Rec, now: float) -> MessageStatus:
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
        for rec in self.messages.values():
            if rec.state != DONE or rec.finished_at + retention > now:
                counts[self.status(rec, now)] += 1
        return counts

    def deliverable(self, now: float, limit: int) -> list[Rec]:
        """The next ``limit`` messages ``select`` would deliver at ``now``, leaving them be."""
        heads = (
            rec
            for rec in self.messages.values()
            if (rec.state == QUEUED and rec.visible_at <= now)
            or (rec.state == LEASED and rec.lease_until <= now)
        )
        eligible = (
            rec for rec in heads if rec.group is None or self._groups[rec.group][0] == rec.id
        )
        return heapq.nsmallest(limit, eligible, key=lambda rec: (-rec.priority, rec.n))

    def iter_dead(self) -> Iterator[Rec]:
        return (self.messages[mid] for mid in self.dead)

    # -- forgetting what is no longer needed -----------------------------------------------------

    def prunable(self, now: float, retention: float, dedup_window: float) -> bool:
        """Whether a Prune at ``now`` would forget anything."""
        return bool(
            (self._finished and self._finished[0][0] + retention <= now)
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
        order, dedup = self._dedup_order, self._dedup
        while order and order[0][0] + dedup_window <= now:
            at, did = order.popleft()
            hit = dedup.get(did)
            if hit is not None and hit[1] == at:
                del dedup[did]
                pruned += 1
        return pruned
