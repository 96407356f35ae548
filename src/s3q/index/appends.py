"""An Append's messages as the index holds them: runs of plain members, records of the rest.

A member is plain when it is visible at once, in no group and its payload is not apart; plain
members of one priority and one tenant that follow one another form a run (``records.Run``),
the others become records (``records.Record``) of their own. Pure: the index numbers what this
finds and keeps it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from ..log import ids
from ..log.ops import Append
from .records import Record, Run, Table


class Plain(NamedTuple):
    """Members ``start`` to ``end`` of an Append, plain, of one priority and tenant, their
    payloads from ``offset`` in the log object (when they lie there)."""

    start: int
    end: int
    priority: int
    offset: int
    tenant: str | None


class Apart(NamedTuple):
    """Member ``member`` of an Append, to be a record: its payload in staged object or blob
    ``stage`` (None: in the log object) at ``offset``."""

    member: int
    stage: str | None
    offset: int


def pieces(op: Append) -> Iterator[Plain | Apart]:
    """The members of ``op`` in order: runs of plain ones, and the others one by one."""
    if not (op.delays or op.groups or op.blobs or op.priorities or op.tenants):  # one run
        if op.sizes:
            yield Plain(0, len(op.sizes), 0, op.offset, None)
        return
    key, offsets = op.key, op.offsets
    priorities, delays, groups, blobs, tenants = (
        op.priorities,
        op.delays,
        op.groups,
        op.blobs,
        op.tenants,
    )
    offset = op.offset  # of the next payload in the log object
    start, start_offset, priority = -1, 0, 0  # the plain members being gathered
    tenant: str | None = None  # (of those)
    for i, size in enumerate(op.sizes):
        p = priorities[i] if priorities else 0
        t = tenants[i] if tenants else None
        plain = not (
            (delays and delays[i]) or (groups and groups[i] is not None) or (blobs and i in blobs)
        )
        if start >= 0 and (not plain or p != priority or t != tenant):
            yield Plain(start, i, priority, start_offset, tenant)
            start = -1
        if plain:
            if start < 0:
                start, start_offset, priority, tenant = i, offset, p, t
            if key is None:
                offset += size
            continue
        blob = blobs.get(i) if blobs else None
        if blob is not None:
            yield Apart(i, blob, 0)
        elif key is not None:
            yield Apart(i, key, offsets[i] if offsets else 0)
        else:
            yield Apart(i, None, offset)
            offset += size
    if start >= 0:
        yield Plain(start, len(op.sizes), priority, start_offset, tenant)


def run(
    op: Append, seq: int, plain: Plain, queue: str, arrival: int, room: int
) -> tuple[Run, Table]:
    """``plain`` of ``op``, in log object ``seq``, as a run whose front is numbered
    ``arrival``, and its table (which the run keeps if it has ``room`` for its members)."""
    start, end = plain.start, plain.end
    table = Table(op, start, end)
    run = Run(
        queue,
        seq,
        op.first + start,
        arrival,
        end - start,
        plain.priority,
        op.enqueued_at,
        sum(table.sizes),
        plain.offset,
        op.key,
        table if end - start <= room else None,
        plain.tenant,
    )
    return run, table


def record(op: Append, seq: int, apart: Apart, queue: str, arrival: int) -> Record:
    """Member ``apart`` of ``op``, in log object ``seq``, as a record numbered ``arrival``."""
    i, at = apart.member, op.enqueued_at
    delay = op.delays[i] if op.delays else 0.0
    return Record(
        ids.make(queue, seq, op.first + i),
        arrival,
        op.priorities[i] if op.priorities else 0,
        at,
        at + delay if delay else at,
        seq,
        apart.offset,
        op.sizes[i],
        op.groups[i] if op.groups else None,
        op.dedup_ids[i] if op.dedup_ids else None,
        (op.attributes[i] or None) if op.attributes else None,
        stage=apart.stage,
        tenant=op.tenants[i] if op.tenants else None,
    )
