"""Admission: which messages an enqueue makes, and how they go into the log. No I/O.

An enqueue (``Engine.enqueue``, ``Engine.enqueue_payloads``) and a staged commit
(``Engine.enqueue_staged``) are admitted alike:

- a message whose dedup id was seen within the dedup window (``Seen``), or earlier in the
  same call, is a duplicate: it is answered with the first message's id and makes nothing;
- the new messages must fit under ``max_queue_depth`` (``room``);
- they go into the log so that those of one priority and tenant lie together (a run each,
  ``runs_together``), described by one Append per call or per staged object.

The engine takes their places in the batch being filled, commits, and answers: a new
message's answer here is its place among the new (an ``int``), a duplicate's the first id.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ..errors import QueueFull
from ..log.ops import Append
from ..log.staging import StagedObject
from ..validate import Item

T = TypeVar("T")

Seen = Callable[[str], str | None]
"""The id of the first message enqueued with a dedup id within the dedup window, if any."""

Answer = str | int  # a duplicate's first id, or a new message's place among the new


def room(url: str, live: int, fresh: int, max_depth: int | None) -> None:
    """Raise QueueFull unless ``fresh`` more messages fit beside the ``live`` ones."""
    if max_depth is not None and live + fresh > max_depth:
        raise QueueFull(
            f"queue {url} holds {live} messages; max_queue_depth is "
            f"{max_depth}, so {fresh} more do not fit"
        )


def unseen(items: Iterable[Item], seen: Seen) -> int:
    """How many of ``items`` are not duplicates of messages already enqueued (an upper bound
    on the new messages: twins within ``items`` are not looked for)."""
    return sum(1 for it in items if it.dedup_id is None or seen(it.dedup_id) is None)


@dataclass
class Admitted:
    """The new messages of an enqueue, in the order they go into the log."""

    fresh: list[Item]
    blobs: dict[int, str]  # payload objects of new messages, by their place among ``fresh``
    answers: list[Answer]  # one per item given, in its order
    twins: list[str]  # payload objects written for duplicates: nothing needs them

    def carried(self) -> list[int]:
        """The places of the new messages whose payloads ride the log object."""
        return [i for i in range(len(self.fresh)) if i not in self.blobs]

    def append(self, first: int, now: float, offset: int) -> Append:
        """The Append of the new messages, the first at place ``first`` of the log object and
        their carried payloads from ``offset`` of it."""
        fresh = self.fresh
        return Append(
            first,
            now,
            offset,
            [len(it.payload) for it in fresh],
            priorities=_column([it.priority for it in fresh], 0),
            delays=_column([it.delay for it in fresh], 0.0),
            groups=_column([it.group for it in fresh], None),
            dedup_ids=_column([it.dedup_id for it in fresh], None),
            attributes=_column([it.attributes or None for it in fresh], None),
            blobs=self.blobs or None,
            tenants=_column([it.tenant for it in fresh], None),
        )

    def ids(self, made: Sequence[str]) -> list[str]:
        """The answer of each item, given the ids ``made`` of the new messages."""
        return [made[a] if isinstance(a, int) else a for a in self.answers]


def admit(items: list[Item], seen: Seen, blobs: dict[int, str] | None = None) -> Admitted:
    """Admit ``items``, whose payloads at ``blobs`` (by index in ``items``) were written to
    objects of their own: drop the duplicates, then put the new messages in runs."""
    blobs = blobs or {}
    kept, answers = _dedup([it.dedup_id for it in items], seen)
    fresh = [items[i] for i in kept]
    fresh_blobs = {place: blobs[i] for place, i in enumerate(kept) if i in blobs}
    chosen = set(kept) if blobs else ()
    twins = [key for i, key in blobs.items() if i not in chosen]  # came while it was written
    together = runs_together(
        [it.priority for it in fresh], (it.group for it in fresh), [it.tenant for it in fresh]
    )
    if together is not None:
        order, where = together
        fresh = [fresh[i] for i in order]
        fresh_blobs = {where[i]: key for i, key in fresh_blobs.items()}
        answers = [where[a] if isinstance(a, int) else a for a in answers]
    return Admitted(fresh, fresh_blobs, answers, twins)


@dataclass
class StagedAdmitted:
    """The new messages of staged objects committed together, each object's in one Append."""

    objects: list[StagedObject]
    rows: list[list[int] | None]  # each object's rows, in log order (None: all, in order)
    fresh: int
    answers: list[Answer] | None  # None: no duplicates, so each row answers with its own id
    reordered: list[tuple[int, list[int]]]  # where an object's rows start, where each went

    def appends(self, start: int, now: float) -> list[Append]:
        """The Append of each object, its new messages from place ``start`` of the log object."""
        made, at = [], start
        for obj, rows in zip(self.objects, self.rows, strict=True):
            made.append(_staged_append(obj, rows, at, now))
            at += len(obj) if rows is None else len(rows)
        return made

    def places(self, start: int) -> range | array[int]:
        """The places of the new messages in the order the rows were given, from ``start``."""
        places: range | array[int] = range(start, start + self.fresh)
        if self.reordered:
            places = array("Q", places)
            for at, where in self.reordered:
                places[at : at + len(where)] = array("Q", (start + at + w for w in where))
        return places

    def ids(self, made: Sequence[str]) -> Sequence[str]:
        """The answer of each row, given the ids ``made`` of the new messages (``places``)."""
        if self.answers is None:
            return made
        return [a if isinstance(a, str) else made[a] for a in self.answers]


def admit_staged(objects: list[StagedObject], seen: Seen) -> StagedAdmitted:
    """Admit the rows of staged ``objects``: drop the duplicates, then put each object's new
    messages in runs."""
    kept, answers = _new_rows(objects, seen)
    rows: list[list[int] | None] = []
    reordered: list[tuple[int, list[int]]] = []
    at = 0
    for obj, chosen in zip(objects, kept, strict=True):
        every = range(len(obj)) if chosen is None else chosen
        p, g, t = obj.priorities, obj.groups, obj.tenants
        together = (p or t) and runs_together(
            [p[r] for r in every] if p else [0] * len(every),
            g and (g[r] for r in every),
            t and [t[r] for r in every],
        )
        if together:
            order, where = together
            chosen = [every[j] for j in order]
            reordered.append((at, where))
        rows.append(chosen)
        at += len(every)
    return StagedAdmitted(objects, rows, at, answers, reordered)


def _new_rows(
    objects: list[StagedObject], seen: Seen
) -> tuple[list[list[int] | None], list[Answer] | None]:
    """The rows of each staged object that are new messages (None: all of them), and what
    answers each row (None: none is a duplicate, so each answers with its own)."""
    if not any(obj.dedup_ids for obj in objects):
        return [None] * len(objects), None
    dedup_ids: list[str | None] = []
    for obj in objects:
        dedup_ids.extend(obj.dedup_ids or [None] * len(obj))
    kept, answers = _dedup(dedup_ids, seen)
    rows: list[list[int] | None] = []
    start = taken = 0
    for obj in objects:  # the new rows of each object, from those of them all
        end = bisect.bisect_left(kept, start + len(obj), taken)
        rows.append([i - start for i in kept[taken:end]])
        start, taken = start + len(obj), end
    return rows, answers


def _dedup(dedup_ids: list[str | None], seen: Seen) -> tuple[list[int], list[Answer]]:
    """Which of new messages with ``dedup_ids`` are not duplicates (their indices), and what
    answers each: a duplicate's first id (enqueued before, or earlier among these), or its
    place among those kept."""
    kept: list[int] = []
    answers: list[Answer] = []
    first: dict[str, int] = {}  # dedup id -> the place of its message among those kept
    for index, dedup in enumerate(dedup_ids):
        if dedup is not None:
            known: Answer | None = seen(dedup)
            if known is None:
                known = first.get(dedup)
            if known is not None:
                answers.append(known)
                continue
            first[dedup] = len(kept)
        answers.append(len(kept))
        kept.append(index)
    return kept, answers


def runs_together(
    priorities: list[int],
    groups: Iterable[str | None] | None,
    tenants: list[str | None] | None = None,
) -> tuple[list[int], list[int]] | None:
    """An order of new messages that puts those of one priority and tenant together (a run
    each, not one per message when they alternate), and where each message goes in it; None
    when the order stays. The order within a priority and tenant is kept, so delivery (by
    priority, then in order) is unchanged but for the order of one batch's tenants; a batch
    with groups keeps its order, since a group is FIFO across priorities."""
    kinds = set(priorities) if not tenants else set(zip(priorities, tenants, strict=True))
    if len(kinds) < 2 or (groups and any(g is not None for g in groups)):
        return None
    if tenants:
        key = [(-p, t or "") for p, t in zip(priorities, tenants, strict=True)]
        order = sorted(range(len(priorities)), key=key.__getitem__)
    else:
        order = sorted(range(len(priorities)), key=lambda i: -priorities[i])
    where = [0] * len(order)
    for place, i in enumerate(order):
        where[i] = place
    return order, where


def _column(values: list[T], default: T) -> list[T] | None:
    """``values``, or None when every one is ``default`` (an absent column)."""
    return None if values.count(default) == len(values) else values  # (C: no generator)


def _staged_append(obj: StagedObject, rows: list[int] | None, first: int, now: float) -> Append:
    """The Append of ``rows`` of a staged object (None: all of them, the common case)."""
    chosen = None if rows is None or rows == list(range(len(obj))) else rows

    def pick(column: list[T] | None) -> list[T] | None:
        return column if column is None or chosen is None else [column[r] for r in chosen]

    return Append(
        first,
        now,
        0,
        obj.sizes if chosen is None else [obj.sizes[r] for r in chosen],
        key=obj.key,
        offsets=obj.offsets if chosen is None else [obj.offsets[r] for r in chosen],
        priorities=pick(obj.priorities),
        delays=pick(obj.delays),
        groups=pick(obj.groups),
        dedup_ids=pick(obj.dedup_ids),
        attributes=pick(obj.attributes),
        tenants=pick(obj.tenants),
    )
