r"""Leased stretches: consecutive members of a run leased together by one dequeue.

A dequeue that takes members off the front of a run (``records.Run``) leases them as one
:class:`Stretch`: one entry in the index and one timer however many members, and one
``(seq, place, count, token, until)`` in the Lease operation that logs it. A member's receipt is
its id and the stretch's token (``<id>~<token>``), as any receipt is its id and a token.

A member completed leaves the stretch. A member anything else happens to (failed, extended,
released, buried, or delivered again once the stretch's lease ran out) leaves it first as a
record of its own, leased just as it was (``Stretch.record``), and the operation folds on that
record as on any other. A checkpoint holds the members as records: a stretch is a way of holding
leases, not a state of its own.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator

from ..log import ids
from .records import LEASED, Record, Run


class Stretch:
    """Members ``place`` to ``place + count`` of log object ``seq``, taken together off the
    front of a run; leased until ``until`` (once its Lease is folded: ``token`` set)."""

    __slots__ = (
        "arrival",
        "at",
        "count",
        "enqueued_at",
        "held",
        "ids_",
        "index",
        "left",
        "offsets",
        "place",
        "priority",
        "queue",
        "receipts_",
        "seq",
        "stage",
        "start",
        "table",
        "tenant",
        "token",
        "until",
    )

    group = None  # (runs are in no group: what a chooser of messages asks of each)

    def __init__(self, run: Run, count: int) -> None:
        """Take the first ``count`` members (at most all) off ``run``."""
        place, arrival = run.front_place(), run.front()
        table, start, end, offsets = run.cut(count)
        self.queue, self.seq, self.place, self.arrival = run.queue, run.seq, place, arrival
        self.count = self.left = end - start
        self.priority, self.tenant, self.enqueued_at = run.priority, run.tenant, run.enqueued_at
        self.stage, self.table, self.start = run.stage, table, start
        self.offsets = array("Q", offsets)
        self.offsets = self.offsets[: self.count]  # (accumulate gives one more)
        self.held = bytearray(b"\x01") * self.count  # 1: member still leased here
        self.token = ""
        self.until = self.at = 0.0
        self.index: dict[str, int] | None = None  # member id -> its index (once asked for)
        self.ids_: list[str] | None = None  # (once asked for)
        self.receipts_: list[str] | None = None  # (once asked for, after the lease)

    def __len__(self) -> int:
        """The members still leased as part of the stretch."""
        return self.left

    def ids(self) -> list[str]:
        """Every member's id, first to last."""
        made = self.ids_
        if made is None:
            made = self.ids_ = ids.make_many(self.queue, self.seq, self.place, self.count)
        return made

    def index_of(self, place: int) -> int | None:
        """The member at ``place``, if it is still leased here."""
        k = place - self.place
        return k if 0 <= k < self.count and self.held[k] else None

    def receipts(self) -> list[str]:
        """Every member's receipt, first to last (once leased): the very strings handed out,
        so the completion that gives them back is matched a whole run at a time."""
        made = self.receipts_
        if made is None:
            suffix = ids.RECEIPT_MARK + self.token
            made = self.receipts_ = [mid + suffix for mid in self.ids()]
        return made

    def run_of(self, given: list[str], i: int, k: int, mine: list[str]) -> int:
        """How many of ``given`` from ``i`` on are ``mine`` (this stretch's ids or receipts)
        from member ``k`` on, all still leased here: the whole rest, or 0 (then they are
        looked at one by one)."""
        m = min(len(given) - i, self.count - k)
        if m > 1 and given[i : i + m] == mine[k : k + m] and 0 not in self.held[k : k + m]:
            return m
        return 0

    def member_index(self, mid: str) -> int | None:
        """Member ``mid``, if it is still leased here (by its id, parsing none: those that
        settle a stretch's members mostly name many of them)."""
        index = self.index
        if index is None:
            index = self.index = {m: k for k, m in enumerate(self.ids())}
        k = index.get(mid)
        return k if k is not None and self.held[k] else None

    def sizes(self) -> array[int]:
        return self.table.sizes[self.start : self.start + self.count]

    def dedup_ids(self) -> list[str | None] | None:
        dedup_ids = self.table.dedup_ids
        return None if dedup_ids is None else dedup_ids[self.start : self.start + self.count]

    def attributes(self) -> list[dict[str, str] | None] | None:
        attributes = self.table.attributes
        return None if attributes is None else attributes[self.start : self.start + self.count]

    def record(self, k: int) -> Record:
        """Member ``k`` as a record: leased as part of the stretch was."""
        table, i = self.table, self.start + k
        mid = ids.make(self.queue, self.seq, self.place + k)
        return Record(
            mid,
            self.arrival + k,
            self.priority,
            self.enqueued_at,
            self.enqueued_at,
            self.seq,
            self.offsets[k],
            table.sizes[i],
            None,
            table.dedup_ids[i] if table.dedup_ids else None,
            (table.attributes[i] or None) if table.attributes else None,
            attempts=1,
            state=LEASED,
            version=1,  # (not 0: never taken for an untouched one)
            receipt=ids.receipt(mid, self.token),
            lease_until=self.until,
            stage=self.stage,
            first_leased_at=self.at,
            tenant=self.tenant,
            leased_at=self.at,
        )

    def members(self) -> Iterator[Record]:
        """The members still leased here, as records made to be read."""
        held = self.held
        return (self.record(k) for k in range(self.count) if held[k])

    def held_bytes(self) -> int:
        """The payload bytes of the members still leased here."""
        sizes, held = self.sizes(), self.held
        if self.left == self.count:
            return sum(sizes)
        return sum(size for size, h in zip(sizes, held, strict=True) if h)


class Stretches:
    """The stretches leased and not yet settled, by token and by log object."""

    def __init__(self) -> None:
        self.by_token: dict[str, Stretch] = {}
        self.by_seq: dict[int, list[Stretch]] = {}
        self.members = 0  # members still leased in a stretch
        self.taken: dict[tuple[int, int], Stretch] = {}  # chosen, their Lease not yet folded
        self._last: Stretch | None = None  # the one ``find`` found last

    def __contains__(self, seq: int) -> bool:
        """Whether members of a stretch lie in log object ``seq``."""
        return seq in self.by_seq

    def __iter__(self) -> Iterator[Stretch]:
        return iter(self.by_token.values())

    def __len__(self) -> int:
        return len(self.by_token)

    def take(self, run: Run, count: int) -> Stretch:
        """The first ``count`` members of ``run`` chosen for a lease: the Lease that is
        folded next (``leased``) finds them here."""
        stretch = Stretch(run, count)
        self.taken[stretch.seq, stretch.place] = stretch
        return stretch

    def leased(self, stretch: Stretch, token: str, until: float, at: float) -> None:
        stretch.token, stretch.until, stretch.at = token, until, at
        self.by_token[token] = stretch
        self.by_seq.setdefault(stretch.seq, []).append(stretch)
        self.members += stretch.left

    def find(self, mid: str, queue: str) -> tuple[Stretch, int] | None:
        """The stretch ``mid`` is still leased in, and its index there."""
        last = self._last
        if last is not None and (k := last.member_index(mid)) is not None:
            return last, k
        where = ids.where(mid, queue)
        if where is None:
            return None
        for stretch in self.by_seq.get(where[0], ()):
            k = stretch.index_of(where[1])
            if k is not None:
                self._last = stretch
                return stretch, k
        return None

    def holds(self, mid: str, token: str) -> bool:
        """Whether ``<mid>~<token>`` is the receipt of a member still leased in a stretch."""
        stretch = self.by_token.get(token)
        return stretch is not None and stretch.member_index(mid) is not None

    def leave(self, stretch: Stretch, members: Iterable[int]) -> None:
        """Members ``members`` (indexes, still leased here) leave the stretch."""
        held, gone = stretch.held, 0
        for k in members:
            held[k] = 0
            gone += 1
        stretch.left -= gone
        self.members -= gone
        if not stretch.left:
            self.forget(stretch)

    def split(self, stretch: Stretch, k: int) -> Record:
        """Member ``k`` leaves ``stretch`` as a record of its own, leased as it was."""
        rec = stretch.record(k)
        self.leave(stretch, (k,))
        return rec

    def forget(self, stretch: Stretch) -> None:
        """``stretch`` holds no lease any more (its members have left, or it is purged)."""
        self.members -= stretch.left
        stretch.left = 0
        del self.by_token[stretch.token]
        if self._last is stretch:
            self._last = None
        others = self.by_seq[stretch.seq]
        others.remove(stretch)
        if not others:
            del self.by_seq[stretch.seq]

    def clear(self) -> None:
        self.by_token.clear()
        self.by_seq.clear()
        self.taken.clear()
        self.members = 0
        self._last = None
