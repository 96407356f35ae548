"""The operations a writer appends to a queue's log.

Each records the outcome of a decision (ids, receipts, times, retry or dead), never the inputs to
one, so replaying a log always rebuilds the same state whatever the clock or the config says now.
"""

from __future__ import annotations

import msgspec


class Op(msgspec.Struct, array_like=True, tag=True, frozen=True):
    """Base of every log operation."""

    @property
    def weight(self) -> int:
        """How many of the callers' operations this one stands for (what counts toward
        checkpoints and operations per commit): one, but for an Append one per message."""
        return 1


class Open(Op, tag="o", frozen=True):
    """A writer took the queue over (its first record: the fence for older writers).

    The first Open of a queue names it with ``queue``, a random id that its message ids begin
    with, so an id of one queue never names a message of another. (A format-1 queue gets one
    from its first format-2 writer.)"""

    holder: str
    at: float
    queue: str | None = None


class Enqueue(Op, tag="e", frozen=True):
    """(Format 1, read only.) A new message; its payload lies ``size`` bytes at ``offset``
    of the same log object, or, if ``offset`` is -1, in an object of its own (``blob/<id>``)."""

    id: str
    priority: int
    enqueued_at: float
    visible_at: float
    offset: int
    size: int
    dedup_id: str | None = None
    group: str | None = None
    attributes: dict[str, str] | None = None


class EnqueueStaged(Op, tag="s", frozen=True):
    """(Format 1, read only.) New messages whose payloads lie in ``key``, an object staged
    beside the log by a bulk load (``staged/…``): each Enqueue's ``offset`` and ``size`` are
    positions in that object."""

    key: str
    messages: list[Enqueue]


class Append(Op, tag="a", frozen=True):
    """New messages, as columns: one entry per message, an absent column meaning the default
    for every message. Message ``i`` is the ``first + i``-th enqueued by this log object,
    which its id names (``s3q.log.ids``).

    Payloads lie back to back from ``offset`` of this log object; or, with ``key``, in that
    staged object at ``offsets``; those in ``blobs`` (message index -> key) each fill an
    object of their own and take no room here. (Format 2; format 1 wrote an Enqueue each.)
    """

    first: int
    enqueued_at: float
    offset: int
    sizes: list[int]
    key: str | None = None
    offsets: list[int] | None = None
    priorities: list[int] | None = None
    delays: list[float] | None = None
    groups: list[str | None] | None = None
    dedup_ids: list[str | None] | None = None
    attributes: list[dict[str, str] | None] | None = None
    blobs: dict[int, str] | None = None
    tenants: list[str | None] | None = None

    @property
    def weight(self) -> int:
        return len(self.sizes)


class CommitToken(Op, tag="t", frozen=True):
    """A token naming the commit it rides (a streaming sink's query and batch), remembered so
    a replay of that commit is recognised and enqueues nothing."""

    token: str


class Lease(Op, tag="l", frozen=True):
    """Messages handed to a consumer at ``at``: ``(id, receipt, lease_until)`` each; counts an
    attempt. (``at`` is 0 in logs of builds before it was recorded: older builds ignore it.)

    ``stretches`` leases untouched messages in stretches (format 4, ``s3q.index.stretches``):
    ``(seq, place, count, token, lease_until)`` each, the ``count`` members from the front of
    the run at ``place`` of log object ``seq``, the receipt of each ``<id>~<token>``. A
    stretch's members are untouched: each delivery is their first attempt.

    ``attempts``: which attempt each of ``leases`` is (1 the first), the writer's count as the
    lease left it (``Message.attempts``), for readers of the history (``s3q.history``), whose
    tasks each read a few log objects and cannot count from the enqueue; the fold counts
    for itself and ignores it. None in logs of earlier builds, which skip it (as ``Fail``'s
    ``attempt`` and ``Bury``'s ``attempts``)."""

    leases: list[tuple[str, str, float]]
    at: float = 0.0
    stretches: list[tuple[int, int, int, str, float]] | None = None
    attempts: list[int] | None = None


class Extend(Op, tag="x", frozen=True):
    """A lease now ends at ``until`` (at or before now: visible again)."""

    id: str
    until: float


class Release(Op, tag="u", frozen=True):
    """Leased messages given back unprocessed: visible again, the delivery not counted."""

    ids: list[str]


class Complete(Op, tag="c", frozen=True):
    """Messages acknowledged at ``at``."""

    ids: list[str]
    at: float


class Fail(Op, tag="f", frozen=True):
    """A failed delivery: retried at ``retry_at``, or dead if ``retry_at`` is None;
    ``attempt``: which attempt failed (0 in logs of earlier builds: see ``Lease.attempts``)."""

    id: str
    error: str | None
    retry_at: float | None
    at: float
    attempt: int = 0


class Bury(Op, tag="b", frozen=True):
    """Messages whose last lease expired with no attempts left: now dead; ``attempts``: the
    attempt each had (None in logs of earlier builds: see ``Lease.attempts``)."""

    ids: list[str]
    error: str
    at: float
    attempts: list[int] | None = None


class Redrive(Op, tag="r", frozen=True):
    """Dead messages back to pending, attempts reset."""

    ids: list[str]
    at: float


class Relocate(Op, tag="m", frozen=True):
    """Payloads copied forward into this log object: ``(id, new offset)`` each."""

    moves: list[tuple[str, int]]


class Prune(Op, tag="z", frozen=True):
    """Forget completed messages older than ``retention`` and dedup ids older than ``window``."""

    at: float
    retention: float
    window: float


class Configure(Op, tag="k", frozen=True):
    """Queue settings (``s3q.config.PERSISTED``) given by an ``open`` or a ``configure``, in
    force from here on."""

    settings: dict[str, int | float | str | dict[str, str] | None]


class Purge(Op, tag="p", frozen=True):
    """Every message not completed is removed."""

    at: float


class Discard(Op, tag="d", frozen=True):
    """Dead letters removed for good (e.g. once moved to another queue)."""

    ids: list[str]
    at: float


class Retire(Op, tag="y", frozen=True):
    """Messages removed at ``at`` because they outlived the queue's ``retention`` (enqueued at
    least that long before), whatever their state: pending, delayed, leased, waiting to be
    retried or dead (format 5). Each is named by its id in ``ids``, or by its place in
    ``ranges``: ``(seq, place, count)`` each, the ``count`` messages from place ``place`` of
    log object ``seq`` (the untouched members of a run, or members of a leased stretch), so a
    run of any length is one entry."""

    ids: list[str]
    at: float
    ranges: list[tuple[int, int, int]] | None = None


AnyOp = (
    Open
    | Append
    | Enqueue
    | EnqueueStaged
    | CommitToken
    | Lease
    | Extend
    | Release
    | Complete
    | Fail
    | Bury
    | Redrive
    | Relocate
    | Prune
    | Configure
    | Purge
    | Discard
    | Retire
)
