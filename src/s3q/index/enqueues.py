"""Messages enqueued: the fold of an Append (its runs and records, ``appends``), of format 1's
Enqueue and EnqueueStaged, and of a Redrive (dead letters enqueued anew).

Each message is numbered the next arrival and counted where the index counts messages (its
tenant, the object holding its payload, its dedup id, the ages), then waits for delivery:
fresh, delayed, or behind the messages before it in its group.
"""

from __future__ import annotations

from typing import Protocol

from ..log import ids
from ..log.ops import Append, Enqueue, EnqueueStaged, Redrive
from . import appends
from .ages import Ages
from .delivery import DeliveryIndex
from .payload_refs import PayloadRefs
from .records import QUEUED, Record
from .retention import Retention
from .runs import RunIndex
from .tenants import Tenants


class QueueState(Protocol):
    """The parts of the index (``state.QueueState``) an enqueue changes."""

    messages: dict[str, Record]
    runs: RunIndex
    ages: Ages
    tenants: Tenants
    delivery: DeliveryIndex
    payloads: PayloadRefs
    retention: Retention
    total_enqueued: int
    live: int
    dead: dict[str, None]
    arrivals: int
    payload_sizes: dict[int, int]
    queue: str


def append(state: QueueState, op: Append, seq: int, budget: int) -> None:
    """Plain members form runs, the others records (``appends``); the index keeps the tables
    of ``budget`` untouched messages at most."""
    for piece in appends.pieces(op):
        if isinstance(piece, appends.Plain):
            _add_run(state, op, seq, piece, budget)
        else:
            add(state, appends.record(op, seq, piece, state.queue, state.arrivals + 1))
    if op.key is not None:
        state.payloads.unneeded(seq, op.key)  # (if every message was a duplicate)


def _add_run(state: QueueState, op: Append, seq: int, plain: appends.Plain, budget: int) -> None:
    room = budget - state.runs.tabled  # members whose tables the index may keep
    run, table = appends.run(op, seq, plain, state.queue, state.arrivals + 1, room)
    count, size = run.count, run.bytes
    state.arrivals += count
    state.tenants.arrived(run.tenant, count, op.enqueued_at)
    state.total_enqueued += count
    state.live += count
    if op.key is None:
        state.payloads.wrote(seq, size)
    state.payloads.keep_many(seq, op.key, count, size)
    if table.dedup_ids:
        at = op.enqueued_at
        for k, dedup_id in enumerate(table.dedup_ids):
            if dedup_id is not None:
                state.retention.sent(dedup_id, ids.make(state.queue, seq, run.place + k), at)
    state.runs.add(run)
    state.ages.run(run)
    state.delivery.ready.push_fresh(run)


def enqueue(state: QueueState, op: Enqueue, seq: int, stage: str | None = None) -> None:
    """A message of format 1's own operation."""
    add(
        state,
        Record(
            op.id,
            state.arrivals + 1,
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
        ),
    )


def enqueue_staged(state: QueueState, op: EnqueueStaged, seq: int) -> None:
    """Format 1's messages of a staged object."""
    for message in op.messages:
        enqueue(state, message, seq, op.key)
    state.payloads.unneeded(seq, op.key)  # (if every message was a duplicate)


def add(state: QueueState, rec: Record) -> None:
    """``rec``, new, numbered the next arrival."""
    state.arrivals += 1
    rec.size = state.payload_sizes.setdefault(rec.size, rec.size)
    state.messages[rec.id] = rec
    state.ages.record(rec)
    state.total_enqueued += 1
    state.live += 1
    state.tenants.arrived(rec.tenant, 1, rec.enqueued_at)
    if rec.offset >= 0 and rec.stage is None:
        state.payloads.wrote(rec.payload_seq, rec.size)
    state.payloads.keep(rec)
    if rec.dedup_id is not None:
        state.retention.sent(rec.dedup_id, rec.id, rec.enqueued_at)
    delivery = state.delivery
    if rec.group is not None and not delivery.groups.join(rec):
        return  # waits for the messages before it in its group
    if rec.visible_at <= rec.enqueued_at:
        delivery.ready.push_fresh(rec)
    else:
        delivery.timers.delay(rec)


def redrive(state: QueueState, op: Redrive) -> None:
    """Dead letters ``op.ids`` are queued again, each numbered the next arrival, with no
    attempt counted."""
    for mid in op.ids:
        rec = state.messages[mid]
        del state.dead[rec.id]
        state.arrivals += 1
        rec.arrival = state.arrivals
        rec.state, rec.attempts, rec.visible_at, rec.backoff = QUEUED, 0, op.at, False
        state.live += 1
        state.tenants.arrived(rec.tenant, 1, op.at, sent=False)
        if rec.group is not None:
            state.delivery.groups.join(rec)
        state.delivery.schedule(rec)
