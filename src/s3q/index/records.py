r"""What the queue's index holds of each message: a :class:`Record` per message touched since
its enqueue, and :class:`Run`\s of untouched ones (consecutive messages of one Append, a few
dozen bytes however many), with the states a record goes through.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Iterable, Iterator
from enum import IntEnum

import msgspec

from ..log import ids
from ..log.ops import Append
from ..message import MessageStatus


class State(IntEnum):
    """Where a message is in its life, as the index records it (``Record.state``). The
    public :class:`MessageStatus` (``QueueState.status``) also depends on the time:

    - QUEUED: PENDING, or DELAYED (``visible_at`` still ahead), or RETRY (ahead after a
      failure: ``backoff``);
    - LEASED: PROCESSING, or PENDING once the lease has run out;
    - DONE: COMPLETED;
    - DEAD: DEAD (a dead letter).
    """

    QUEUED = 0
    LEASED = 1
    DONE = 2
    DEAD = 3


#: The states as plain ints, for the loops over every record: ``Record.state`` holds these,
#: not ``State`` members. CPython compares two exact ints on a fast path that an int subclass
#: misses (counting 1M records by status: ~10% slower with members), and a module global is
#: read faster than ``State.LEASED`` (~5 times, in a loop doing nothing else). ``State(n)``
#: names one.
QUEUED, LEASED, DONE, DEAD = int(State.QUEUED), int(State.LEASED), int(State.DONE), int(State.DEAD)


def status(rec: Record, now: float) -> MessageStatus:
    """What the public API says of ``rec`` at ``now``."""
    if rec.state == DONE:
        return MessageStatus.COMPLETED
    if rec.state == DEAD:
        return MessageStatus.DEAD
    if rec.state == LEASED:
        return MessageStatus.PROCESSING if rec.lease_until > now else MessageStatus.PENDING
    if rec.visible_at > now:
        return MessageStatus.RETRY if rec.backoff else MessageStatus.DELAYED
    return MessageStatus.PENDING


class Record(msgspec.Struct, array_like=True, gc=False):
    """One message in the index (not tracked by the cyclic GC: it holds no cycles)."""

    id: str
    arrival: int  # its arrival number (order of arrival): FIFO within a priority
    priority: int
    enqueued_at: float
    visible_at: float
    payload_seq: int  # where the payload lies: log sequence number, offset (-1: blob/<id>), size
    offset: int
    size: int
    group: str | None = None
    dedup_id: str | None = None
    attributes: dict[str, str] | None = None
    attempts: int = 0
    state: int = QUEUED  # a State, as a plain int (see QUEUED): decoded as one, compared fast
    receipt: str | None = None
    lease_until: float = 0.0
    last_error: str | None = None
    finished_at: float = 0.0
    version: int = 0  # bumped on every change: heap entries of older versions are stale
    backoff: bool = False  # visible_at was set by a failure, not by a delay
    stage: str | None = None  # the payload lies in this staged object, not in the log
    first_leased_at: float = 0.0  # when its first counted delivery was made (0: none, or unknown)
    tenant: str | None = None  # who it is for (``tenants``): quiet tenants' messages go first
    leased_at: float = 0.0  # when its latest lease began (0: unknown)


class Table:
    """What a run holds of each of its members, in the Append that enqueued them: read back
    from the log when it is dropped (``tables``)."""

    __slots__ = ("attributes", "dedup_ids", "offsets", "sizes")

    def __init__(self, op: Append, start: int, end: int) -> None:
        """Members ``start`` to ``end`` of ``op``."""
        self.sizes = array("I", op.sizes[start:end])
        self.offsets = None if op.offsets is None else array("Q", op.offsets[start:end])
        dedup_ids = op.dedup_ids[start:end] if op.dedup_ids else None
        attributes = op.attributes[start:end] if op.attributes else None
        self.dedup_ids = dedup_ids if dedup_ids and any(d is not None for d in dedup_ids) else None
        self.attributes = attributes if attributes and any(attributes) else None


class Run:
    """Untouched messages: ``count`` consecutive places from ``place`` of one Append in log
    object ``seq``, of one priority, tenant and enqueue time, visible at once and in no group.

    They leave from the front, as delivery is FIFO within a priority (a lease, live or
    replayed, always takes a run's front member): a member taken becomes a record
    (``Record``) of its own. A run made beyond the index's table budget, or restored from a
    checkpoint, holds no ``table`` (each member's size and offset: 4 to 12 bytes), only a few
    dozen bytes whatever its length; taking a member, or reading one, needs the table read back
    first (``snapshot.fill_tables``).
    """

    __slots__ = (
        "arrival",
        "bytes",
        "count",
        "enqueued_at",
        "offset",
        "place",
        "priority",
        "queue",
        "seq",
        "stage",
        "table",
        "taken",
        "tenant",
    )

    def __init__(
        self,
        queue: str,
        seq: int,
        place: int,
        arrival: int,
        count: int,
        priority: int,
        enqueued_at: float,
        size: int,
        offset: int,
        stage: str | None,
        table: Table | None,
        tenant: str | None = None,
    ) -> None:
        self.queue, self.seq, self.place, self.count = queue, seq, place, count
        self.arrival = arrival  # of the member at ``place``
        self.tenant = tenant
        self.priority, self.enqueued_at, self.stage = priority, enqueued_at, stage
        self.bytes = size  # payload bytes of the members not taken
        self.offset = offset  # of the front member's payload, when it lies in the log object
        self.table = table
        self.taken = 0  # members taken from the front

    def copy(self) -> Run:
        """A run of its own with the same members, to take from without touching this one."""
        twin = Run.__new__(Run)
        for name in Run.__slots__:
            setattr(twin, name, getattr(self, name))
        return twin

    def __len__(self) -> int:
        """The members not taken yet."""
        return self.count - self.taken

    def index_of(self, place: int) -> int | None:
        """The member at ``place``, if it is one not taken yet."""
        k = place - self.place
        return k if self.taken <= k < self.count else None

    def front(self) -> int:
        """The arrival number of the front member."""
        return self.arrival + self.taken

    def front_place(self) -> int:
        return self.place + self.taken

    def member(self, k: int, offset: int) -> Record:
        """Member ``k`` as a record (its payload at ``offset``), queued and untouched."""
        table = self._table()
        return Record(
            ids.make(self.queue, self.seq, self.place + k),
            self.arrival + k,
            self.priority,
            self.enqueued_at,
            self.enqueued_at,
            self.seq,
            offset,
            table.sizes[k],
            None,
            table.dedup_ids[k] if table.dedup_ids else None,
            (table.attributes[k] or None) if table.attributes else None,
            stage=self.stage,
            tenant=self.tenant,
        )

    def offset_of(self, k: int) -> int:
        """Where the payload of member ``k`` (not taken) lies."""
        table = self._table()
        if table.offsets is not None:
            return table.offsets[k]
        return self.offset + sum(table.sizes[self.taken : k])

    def cut(self, count: int) -> tuple[Table, int, int, Iterable[int]]:
        """Take the first ``count`` members (at most all) off the run: its table, their
        indexes ``start`` to ``end`` there, and where their payloads lie."""
        table, start = self._table(), self.taken
        end = min(start + count, self.count)
        sizes = table.sizes[start:end]
        if table.offsets is None:
            offsets: Iterable[int] = itertools.accumulate(sizes, initial=self.offset)
        else:
            offsets = table.offsets[start:end]
        taken = sum(sizes)
        self.taken = end
        self.offset += taken
        self.bytes -= taken
        return table, start, end, offsets

    def take(self, count: int) -> list[Record]:
        """Take the first ``count`` members (at most all) out of the run, as records."""
        place = self.place
        table, start, end, offsets = self.cut(count)
        none = itertools.repeat(None)
        dedup_ids = none if table.dedup_ids is None else table.dedup_ids[start:end]
        attributes = none if table.attributes is None else table.attributes[start:end]
        at, priority, seq, stage = self.enqueued_at, self.priority, self.seq, self.stage
        tenant = self.tenant
        return [
            Record(
                mid,
                arrival,
                priority,
                at,
                at,
                seq,
                offset,
                size,
                None,
                dedup,
                attrs or None,
                stage=stage,
                tenant=tenant,
            )
            for mid, arrival, offset, size, dedup, attrs in zip(  # offsets and the rest run longer
                ids.make_many(self.queue, seq, place + start, end - start),
                range(self.arrival + start, self.arrival + end),
                offsets,
                table.sizes[start:end],
                dedup_ids,
                attributes,
                strict=False,
            )
        ]

    def members(self) -> Iterator[Record]:
        """The members not taken, front first, as records (the run is left as it is)."""
        offsets, offset = self._table().offsets, self.offset
        for k in range(self.taken, self.count):
            rec = self.member(k, offset if offsets is None else offsets[k])
            offset += rec.size
            yield rec

    def drop_table(self) -> None:
        """Forget the table (read back from the log when needed), rebasing the run on its
        front member so a table read back covers exactly the members left."""
        self.place, self.count = self.place + self.taken, len(self)
        self.arrival += self.taken
        self.taken, self.table = 0, None

    def fill(self, ops: list[Append]) -> None:
        """Take the table back from the Appends of log object ``seq``."""
        self.drop_table()
        for op in ops:
            start = self.place - op.first
            if 0 <= start < len(op.sizes):
                self.table = Table(op, start, start + self.count)
                return
        raise LookupError(f"log object {self.seq} has no Append of place {self.place}")

    def _table(self) -> Table:
        if self.table is None:
            raise LookupError(f"the table of run {self.seq}/{self.place} is not read back")
        return self.table

    def to_snap(self) -> RunSnap:
        """The members not taken, for a checkpoint (the table stays in the log)."""
        k = self.taken
        return RunSnap(
            self.seq,
            self.place + k,
            self.arrival + k,
            self.priority,
            self.enqueued_at,
            b"",
            self.offset,
            self.stage,
            None,
            None,
            None,
            len(self),
            self.bytes,
            self.tenant,
        )

    @classmethod
    def from_snap(cls, queue: str, snap: RunSnap) -> Run:
        if snap.count >= 0:
            return cls(
                queue,
                snap.seq,
                snap.place,
                snap.arrival,
                snap.count,
                snap.priority,
                snap.enqueued_at,
                snap.payload_bytes,
                snap.offset,
                snap.stage,
                None,
                snap.tenant,
            )
        # A checkpoint that held the table (the first builds of format 2).
        sizes = array("I")
        sizes.frombytes(snap.sizes)
        op = Append(
            snap.place,
            snap.enqueued_at,
            snap.offset,
            sizes.tolist(),
            snap.stage,
            None if snap.offsets is None else _uint64s(snap.offsets),
            dedup_ids=snap.dedup_ids,
            attributes=snap.attributes,
        )
        table = Table(op, 0, len(sizes))
        return cls(
            queue,
            snap.seq,
            snap.place,
            snap.arrival,
            len(sizes),
            snap.priority,
            snap.enqueued_at,
            sum(sizes),
            snap.offset,
            snap.stage,
            table,
        )


def _uint64s(data: bytes) -> list[int]:
    values = array("Q")
    values.frombytes(data)
    return values.tolist()


class RunSnap(msgspec.Struct, array_like=True):
    """A run in a checkpoint: its members not taken yet (their table is in the log)."""

    seq: int
    place: int
    arrival: int  # of the member at ``place``
    priority: int
    enqueued_at: float
    sizes: bytes  # uint32 each (the first builds of format 2; now empty)
    offset: int
    stage: str | None
    offsets: bytes | None  # uint64 each (as ``sizes``)
    dedup_ids: list[str | None] | None  # (as ``sizes``)
    attributes: list[dict[str, str] | None] | None  # (as ``sizes``)
    count: int = -1  # members (-1: as many as ``sizes`` holds)
    payload_bytes: int = 0  # of the members
    tenant: str | None = None
