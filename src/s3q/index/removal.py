"""Messages removed from the index before they are finished: every one not completed
(``Purge``), dead letters (``Discard``), and those past the queue's retention (``Retire``),
whatever their state.

A removed message leaves every part of the index that held it (records or runs, leased
stretches, delivery, groups, tenants' counts, dead letters) and gives up its payload, whose
object is garbage once nothing else holds it, as when a message completes. ``retiring`` finds
what a Retire at a cutoff names from the index's ages (``ages.Ages``), without a pass over the
index: a run, or the members of a stretch, as one range of places, however many.
"""

from __future__ import annotations

from typing import Protocol

from ..log import ids
from ..log.ops import Retire
from .ages import Ages
from .delivery import DeliveryIndex
from .payload_refs import PayloadRefs
from .records import DEAD, DONE, Record, Run
from .runs import RunIndex
from .stretches import Stretch, Stretches
from .tenants import Tenants

Range = tuple[int, int, int]  # (log object, first place, count)


class QueueState(Protocol):
    """The parts of the index (``state.QueueState``) a removal changes."""

    messages: dict[str, Record]
    runs: RunIndex
    stretches: Stretches
    delivery: DeliveryIndex
    payloads: PayloadRefs
    tenants: Tenants
    ages: Ages
    dead: dict[str, None]
    live: int
    changes: int
    queue: str


def purge(state: QueueState) -> None:
    """Every message not completed is removed."""
    for mid in [m for m, r in state.messages.items() if r.state != DONE]:
        state.payloads.drop(state.messages.pop(mid))
    for stretch in state.stretches:
        state.payloads.drop_many(stretch.seq, stretch.stage, len(stretch), stretch.held_bytes())
    state.stretches.clear()
    for run in state.runs:
        state.payloads.drop_many(run.seq, run.stage, len(run), run.bytes)
    state.runs.clear()
    state.live = 0
    state.dead.clear()
    state.delivery.clear()
    state.tenants.purged()


def discard(state: QueueState, mids: list[str]) -> None:
    """Dead letters ``mids`` are removed."""
    for mid in mids:
        rec = state.messages[mid]
        del state.dead[mid], state.messages[mid]
        state.payloads.drop(rec)


# -- retirement ------------------------------------------------------------------------------------


def retiring(state: QueueState, cutoff: float) -> tuple[list[str], list[Range]] | None:
    """What a Retire of every live message enqueued at or before ``cutoff`` names (records by
    id, runs and stretches by ranges of places), None if there is none; the caller folds that
    Retire at once (the ages that led here are spent). Costs a look at two heaps when nothing
    is due (after the first call, which starts the ages: ``Ages.watch``)."""
    ages = state.ages
    ages.watch()
    if not ages.due(cutoff):
        return None
    seqs, mids = ages.pop(cutoff)
    found: list[str] = []
    for mid in mids:
        rec = state.messages.get(mid)
        if rec is not None and rec.state != DONE and rec.enqueued_at <= cutoff:
            found.append(mid)
    ranges: list[Range] = []
    for seq in seqs:
        for run in state.runs.by_seq.get(seq, ()):
            if run.enqueued_at <= cutoff:
                ranges.append((seq, run.front_place(), len(run)))
        for stretch in state.stretches.by_seq.get(seq, ()):
            if stretch.enqueued_at <= cutoff:
                ranges.extend(_held_ranges(stretch))
    return (found, ranges) if found or ranges else None


def _held_ranges(stretch: Stretch) -> list[Range]:
    """The members still leased in ``stretch``, as ranges of consecutive places."""
    found: list[Range] = []
    held, k = stretch.held, 0
    while k < stretch.count:
        if not held[k]:
            k += 1
            continue
        start = k
        while k < stretch.count and held[k]:
            k += 1
        found.append((stretch.seq, stretch.place + start, k - start))
    return found


def retire(state: QueueState, op: Retire) -> None:
    """Fold ``op``: the messages it names leave the index. Its ranges are found in the runs,
    the stretches or the records (a checkpoint holds a stretch's members as records)."""
    recs = [state.messages[mid] for mid in op.ids]
    runs: list[Run] = []
    members: dict[Stretch, list[int]] = {}
    for seq, place, count in op.ranges or ():
        run = next((r for r in state.runs.by_seq.get(seq, ()) if r.front_place() == place), None)
        if run is not None:
            if len(run) != count:
                raise ValueError(f"a run of {count} retired at {seq}/{place} holds {len(run)}")
            runs.append(run)
        else:
            _members(state, seq, place, count, recs, members)
    live = [rec for rec in recs if rec.state != DEAD]
    state.tenants.ended_records(live, 0.0, False, ((s, len(ks)) for s, ks in members.items()))
    gone: dict[str, int] = {}
    for run in runs:
        if run.tenant is not None:
            gone[run.tenant] = gone.get(run.tenant, 0) + len(run)
    state.tenants.dropped(gone)
    for rec in recs:
        _retire_record(state, rec)
    for stretch, ks in members.items():
        sizes = stretch.sizes()
        state.payloads.drop_many(stretch.seq, stretch.stage, len(ks), sum(sizes[k] for k in ks))
        state.live -= len(ks)
        state.stretches.leave(stretch, ks)
    for run in runs:
        state.payloads.drop_many(run.seq, run.stage, len(run), run.bytes)
        state.live -= len(run)
        state.runs.retire(run)
    state.changes += len(op.ids) + len(op.ranges or ())


def _members(
    state: QueueState,
    seq: int,
    place: int,
    count: int,
    recs: list[Record],
    members: dict[Stretch, list[int]],
) -> None:
    """Places ``place`` to ``place + count`` of log object ``seq``, none in a run: members of
    a leased stretch (added to ``members``) or records (added to ``recs``)."""
    for stretch in state.stretches.by_seq.get(seq, ()):
        k = stretch.index_of(place)
        if k is not None and k + count <= stretch.count and all(stretch.held[k : k + count]):
            members.setdefault(stretch, []).extend(range(k, k + count))
            return
    for p in range(place, place + count):
        mid = ids.make(state.queue, seq, p)
        rec = state.messages.get(mid)
        if rec is not None:
            recs.append(rec)
            continue
        held = state.stretches.find(mid, state.queue)
        if held is None:
            raise KeyError(mid)
        members.setdefault(held[0], []).append(held[1])


def _retire_record(state: QueueState, rec: Record) -> None:
    """``rec`` leaves the index (its tenant's counts were settled by the caller)."""
    if rec.state == DEAD:
        del state.dead[rec.id]
    else:
        state.live -= 1
        if rec.group is not None:
            state.delivery.leave(rec)
    rec.version += 1  # what delivery holds of it is stale
    rec.receipt = None  # a lease being answered is not handed out
    del state.messages[rec.id]
    state.payloads.drop(rec)
