"""Messages finished: completed, or dead letters (buried when their leases ran out with no
attempt left, or failed with no retry left).

A completed message whose id names its place gives up its record for the places the index
keeps of completions (``retention.completed``: ranges, by log object); the members of a
leased stretch completed together leave it as one range. The payloads of completed messages
are given up (their objects garbage once nothing else holds them); a dead letter keeps its
record and its payload until it is redriven or discarded (``removal``).
"""

from __future__ import annotations

from typing import Protocol

from ..log import ids
from ..log.ops import Bury
from .delivery import DeliveryIndex
from .payload_refs import PayloadRefs
from .records import DEAD, DONE, Record
from .retention import Retention
from .stretches import Stretch, Stretches
from .tenants import Tenants


class QueueState(Protocol):
    """The parts of the index (``state.QueueState``) a message finishing changes."""

    messages: dict[str, Record]
    stretches: Stretches
    delivery: DeliveryIndex
    payloads: PayloadRefs
    retention: Retention
    tenants: Tenants
    dead: dict[str, None]
    live: int
    queue: str

    def touch(self, mid: str) -> Record: ...


def complete(state: QueueState, mids: list[str], at: float) -> None:
    """Messages completed at ``at``: those whose ids name their places leave the records
    for ``retention.completed``; the others (format-1 ids) stay as records until pruned."""
    places: dict[int, list[int]] = {}
    freed: dict[tuple[int, str | None], list[int]] = {}  # (payload_seq, stage): [count, bytes]
    messages, retention, payloads = state.messages, state.retention, state.payloads
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
        held = state.stretches.find(mid, state.queue)
        if held is None:
            raise KeyError(mid)
        stretch, k = held
        # the ids that follow are most often the stretch's next members: a run at once
        m = stretch.run_of(mids, i, k, stretch.ids()) or 1
        members.setdefault(stretch, []).extend(range(k, k + m))
        i += m
    state.tenants.ended_records(recs, at, False, ((s, len(ks)) for s, ks in members.items()))
    for stretch, ks in members.items():
        sizes, first = stretch.sizes(), stretch.place
        size = sum(sizes) if len(ks) == stretch.count else sum(sizes[k] for k in ks)
        if (where := freed.get((stretch.seq, stretch.stage))) is None:
            freed[stretch.seq, stretch.stage] = [len(ks), size]
        else:
            where[0] += len(ks)
            where[1] += size
        places.setdefault(stretch.seq, []).extend(first + k for k in ks)
        state.stretches.leave(stretch, ks)
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
            state.delivery.leave(rec)
        if len(mid) == ids.LENGTH:  # an id that names its place
            del messages[mid]
            seq, place = ids.split(mid)
            places.setdefault(seq, []).append(place)
        else:
            retention.finished(at, mid)
    state.live -= len(mids)
    for (payload_seq, stage), (count, size) in freed.items():
        payloads.drop_many(payload_seq, stage, count, size)
    if places:
        retention.completed.add(at, places)


def bury(state: QueueState, op: Bury) -> None:
    """Leased messages whose leases ran out with no attempt left are dead letters."""
    recs = [state.touch(mid) for mid in op.ids]
    state.tenants.ended_records(recs, 0.0, False)  # untimed
    for rec in recs:
        rec.last_error = op.error
        die(state, rec, op.at)


def die(state: QueueState, rec: Record, at: float) -> None:
    """``rec`` is a dead letter from ``at`` on."""
    rec.state, rec.finished_at, rec.receipt = DEAD, at, None
    rec.version += 1
    state.live -= 1
    state.dead[rec.id] = None
    if rec.group is not None:
        state.delivery.leave(rec)
