"""Message leases folded: messages leased (records one by one, members of runs as stretches),
extended, released (given back, the attempt uncounted), or failed (to be retried after a
backoff, or with no retry left a dead letter: ``finish.die``).

A lease makes a record of a message that had none (``QueueState.touch``); a stretch stays one
entry however many members, until something happens to one of them alone.
"""

from __future__ import annotations

from typing import Protocol

from ..log import ids
from ..log.ops import Extend, Fail, Lease
from . import finish
from .records import LEASED, QUEUED, Run
from .runs import RunIndex
from .stretches import Stretch


class QueueState(finish.QueueState, Protocol):
    """The parts of the index (``state.QueueState``) a lease changes (and, through a failure,
    a death: ``finish``)."""

    runs: RunIndex

    def lease_run(self, run: Run, count: int) -> Stretch: ...


def lease(state: QueueState, op: Lease) -> None:
    """Fold ``op``: its messages leased one by one, and its stretches (those chosen by the
    select before it, or, replayed, taken off the fronts of their runs)."""
    leased: dict[str | None, int] = {}  # tenant -> queued messages now leased
    recs = []
    at, messages = op.at, state.messages
    for mid, receipt, until in op.leases:
        rec = messages.get(mid) or state.touch(mid)
        if rec.state != LEASED:
            leased[rec.tenant] = leased.get(rec.tenant, 0) + 1
        rec.state, rec.receipt, rec.lease_until, rec.leased_at = LEASED, receipt, until, at
        if rec.attempts == 0:
            rec.first_leased_at = at
        rec.attempts += 1
        recs.append(rec)
    stretches: list[Stretch] = []
    if op.stretches:
        for seq, place, count, token, until in op.stretches:
            stretch = state.stretches.taken.pop((seq, place), None)
            if stretch is None:  # a replayed lease: leases take runs front first
                found = state.runs.find(ids.make(state.queue, seq, place), state.queue)
                if found is None or found[1] != found[0].taken:
                    raise KeyError(ids.make(state.queue, seq, place))
                stretch = state.lease_run(found[0], count)
                del state.stretches.taken[seq, place]
            if stretch.count != count:
                raise ValueError(
                    f"a stretch of {count} leased at {seq}/{place} holds {stretch.count}"
                )
            state.stretches.leased(stretch, token, until, at)
            stretches.append(stretch)
            leased[stretch.tenant] = leased.get(stretch.tenant, 0) + count
    state.delivery.leased(recs, stretches)
    state.tenants.leased(leased)


def extend(state: QueueState, op: Extend) -> None:
    rec = state.touch(op.id)
    rec.lease_until = op.until
    state.delivery.schedule(rec)


def release(state: QueueState, mids: list[str]) -> None:
    """Leased messages ``mids`` are given back, deliverable at once, their attempts as before
    the lease."""
    recs = [state.touch(mid) for mid in mids]
    state.tenants.ended_records(recs, 0.0, True)
    for rec in recs:
        rec.state, rec.receipt, rec.attempts = QUEUED, None, rec.attempts - 1
        if rec.attempts == 0:
            rec.first_leased_at = 0.0
        state.delivery.schedule(rec)  # visible_at is in the past: deliverable at once


def fail(state: QueueState, op: Fail) -> None:
    rec = state.touch(op.id)
    rec.last_error = op.error
    state.tenants.ended_records([rec], op.at, op.retry_at is not None)
    if op.retry_at is None:
        finish.die(state, rec, op.at)
    else:
        rec.state, rec.visible_at, rec.backoff, rec.receipt = QUEUED, op.retry_at, True, None
        state.delivery.schedule(rec)
