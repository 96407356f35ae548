"""A history of calls against a queue, and the checker of what must hold in it.

Every call a client makes is recorded with when it was sent and answered and how it ended:
``ok``, ``fail`` (an error that says nothing changed) or ``unknown`` (OutcomeUnknown, or a
store error a client cannot see through). After the run, the queue's contents are read back
(``Final``), and :func:`check` lists every violation of the queue's promises:

- ``lost``: an acknowledged enqueue whose message is neither in the queue nor was completed;
- ``resurrected``: a message delivered or still queued after an acknowledged completion;
- ``double-lease``: a message delivered while another consumer's lease on it surely ran (by
  the writer's clock, which may jump), or two deliveries answered with the same receipt;
- ``dedup``: two messages made from one dedup id, or one dedup id answered with two ids;
- ``known-failure-applied``: an enqueue answered with an error that says nothing changed,
  whose message exists all the same;
- ``fenced-ack``: a writer that acknowledged a commit after a newer writer had opened;
- ``stats``: the queue's counters disagree with what the history implies.

Times are ``time.monotonic()`` except ``wall`` (``time.time()``, to read message ids by).
"""

from __future__ import annotations

import bisect
import collections
from collections.abc import Iterable
from typing import Literal

import msgspec

Outcome = Literal["ok", "fail", "unknown"]


class Call(msgspec.Struct, omit_defaults=True):
    """One call and its outcome. ``ids``: what an enqueue answered, what a dequeue
    delivered, what a complete finished; ``receipts`` and ``dedups`` go with them."""

    process: str
    kind: Literal["enqueue", "dequeue", "complete", "fail"]
    invoked: float
    returned: float
    outcome: Outcome
    wall: float = 0.0  # time.time() when sent
    writer: str | None = None  # the writer that answered: its token (s3q-writer via brokers)
    dedup: str | None = None
    ids: list[str] = []
    receipts: list[str] = []
    dedups: list[str | None] = []
    error: str | None = None


class Final(msgspec.Struct):
    """The queue after the run: ids still in it (any status but completed), its counters
    (``completed``: the completions it still remembers), and by when it was read (monotonic;
    0: not known, which counts every completion as remembered)."""

    remaining: list[str]
    total_enqueued: int
    completed: int
    read_at: float = 0.0


class Violation(msgspec.Struct, frozen=True):
    check: str
    detail: str


class History(msgspec.Struct):
    """Calls, the writers' opens (token, monotonic time the open returned, or a time known to
    be no earlier: see :func:`first_answers`), the lease length used, how long the queue
    remembers a completion, the writer's clock jumps (monotonic time, its offset from then
    on), and the queue as read back after the run."""

    visibility_timeout: float
    completed_retention: float = float("inf")
    calls: list[Call] = []
    opens: list[tuple[str, float]] = []
    clock_jumps: list[tuple[float, float]] = []
    final: Final | None = None

    def lease_runs_until(self, invoked: float, returned: float) -> float:
        """The monotonic time until which a lease handed out by a call sent at ``invoked``
        and answered at ``returned`` surely runs: ``visibility_timeout`` by the writer's
        clock, which a jump forward shortens and a jump back lengthens."""
        jumps = self.clock_jumps
        if not jumps:
            return invoked + self.visibility_timeout
        times = [at for at, _ in jumps]
        start = bisect.bisect_right(times, invoked)
        # Offsets in force while the call ran; the lease began at the earliest writer time.
        during = [jumps[start - 1][1] if start else 0.0]
        during += [off for at, off in jumps[start:] if at <= returned]
        ends = invoked + min(during) + self.visibility_timeout  # in the writer's time
        offset, since = during[0], invoked
        for at, new in jumps[start:]:
            if ends - offset < at:
                break  # it ran out before this jump
            offset, since = new, at
        return max(ends - offset, since)


def first_answers(calls: Iterable[Call]) -> list[tuple[str, float]]:
    """Each writer that answered one of ``calls`` (``Call.writer``) and when its first answer
    came, earliest first: the opens as a client of brokers sees them. A writer answers only
    once open (its fence in the log, which no older writer's commit can pass), so an open is
    never later than this; an acknowledgement :func:`check` finds sent after it is late."""
    first: dict[str, float] = {}
    for c in calls:
        if c.writer is not None and c.returned < first.get(c.writer, float("inf")):
            first[c.writer] = c.returned
    return sorted(first.items(), key=lambda o: o[1])


def check(history: History) -> list[Violation]:
    """Every violation in ``history`` (an empty list: the run kept every promise)."""
    return [
        *_lost_and_resurrected(history),
        *_double_leases(history),
        *_dedup(history),
        *_fenced_acks(history),
        *_stats(history),
    ]


def _of(calls: Iterable[Call], kind: str, outcome: str | None = None) -> list[Call]:
    return [c for c in calls if c.kind == kind and (outcome is None or c.outcome == outcome)]


def _lost_and_resurrected(h: History) -> list[Violation]:
    out: list[Violation] = []
    if h.final is None:
        return [Violation("lost", "the queue was not read back after the run")]
    remaining = set(h.final.remaining)
    enqueued = {mid for c in _of(h.calls, "enqueue", "ok") for mid in c.ids}
    tried_completing = {
        mid for c in _of(h.calls, "complete") if c.outcome != "fail" for mid in c.ids
    }
    for mid in sorted(enqueued - remaining - tried_completing):
        out.append(Violation("lost", f"message {mid} was acknowledged, then vanished"))
    completed_at: dict[str, float] = {}
    for c in _of(h.calls, "complete", "ok"):
        for mid in c.ids:
            completed_at[mid] = min(completed_at.get(mid, c.returned), c.returned)
    for c in _of(h.calls, "dequeue", "ok"):
        for mid in c.ids:
            if mid in completed_at and c.invoked > completed_at[mid]:
                out.append(
                    Violation("resurrected", f"{mid} delivered by {c.process} after completion")
                )
    for mid in sorted(remaining & set(completed_at)):
        out.append(Violation("resurrected", f"{mid} is queued after its completion"))
    return out


def _double_leases(h: History) -> list[Violation]:
    out: list[Violation] = []
    ended: dict[str, float] = {}  # receipt -> when a call that may end its lease was sent
    for c in h.calls:
        if c.kind in ("complete", "fail") and c.outcome != "fail":
            for receipt in c.receipts:
                ended[receipt] = min(ended.get(receipt, c.invoked), c.invoked)
    seen: dict[str, Call] = {}
    deliveries: dict[str, list[tuple[Call, str]]] = collections.defaultdict(list)
    for c in _of(h.calls, "dequeue", "ok"):
        for mid, receipt in zip(c.ids, c.receipts, strict=True):
            if receipt in seen:
                out.append(
                    Violation(
                        "double-lease",
                        f"receipt {receipt} handed to {seen[receipt].process} and {c.process}",
                    )
                )
            seen[receipt] = c
            deliveries[mid].append((c, receipt))
    for mid, ds in deliveries.items():
        ds.sort(key=lambda d: d[0].invoked)
        for i, (first, receipt) in enumerate(ds):
            # The first lease surely runs its visibility timeout, unless its holder
            # completed or failed it before then.
            runs_until = min(
                h.lease_runs_until(first.invoked, first.returned),
                ended.get(receipt, float("inf")),
            )
            for later, _ in ds[i + 1 :]:
                if later.invoked > first.returned and later.returned < runs_until:
                    out.append(
                        Violation(
                            "double-lease",
                            f"{mid} delivered to {later.process} while the lease of "
                            f"{first.process} ran",
                        )
                    )
    return out


def _dedup(h: History) -> list[Violation]:
    out: list[Violation] = []
    answered: dict[str, set[str]] = collections.defaultdict(set)
    for c in _of(h.calls, "enqueue", "ok"):
        if c.dedup is not None:
            answered[c.dedup].update(c.ids)
    delivered: dict[str, set[str]] = collections.defaultdict(set)
    for c in _of(h.calls, "dequeue", "ok"):
        for mid, dedup in zip(c.ids, c.dedups or [None] * len(c.ids), strict=True):
            if dedup is not None:
                delivered[dedup].add(mid)
    for dedup in sorted(set(answered) | set(delivered)):
        ids = answered.get(dedup, set()) | delivered.get(dedup, set())
        if len(ids) > 1:
            out.append(Violation("dedup", f"dedup id {dedup} made {sorted(ids)}"))
    # An attempt answered "nothing changed" must not have made the message: ids begin with
    # the millisecond they were made, which tells which attempt made them.
    attempts: dict[str, list[Call]] = collections.defaultdict(list)
    for c in _of(h.calls, "enqueue"):
        if c.dedup is not None:
            attempts[c.dedup].append(c)
    for dedup, ids in answered.items():
        made_ms = min(int(mid[:12], 16) for mid in ids)
        tries = sorted(attempts[dedup], key=lambda c: c.wall)
        maker = None
        for attempt in tries:
            if int(attempt.wall * 1000) <= made_ms:
                maker = attempt
        if maker is not None and maker.outcome == "fail":
            out.append(
                Violation(
                    "known-failure-applied",
                    f"enqueue of {dedup} by {maker.process} failed ({maker.error}) yet made "
                    f"{min(ids)}",
                )
            )
    return out


def _fenced_acks(h: History) -> list[Violation]:
    """No writer commits after a newer writer's open: every ok call that needed a commit
    (a delivery, a completion) was sent before the next writer opened."""
    out: list[Violation] = []
    opened = sorted(h.opens, key=lambda o: o[1])
    for c in h.calls:
        if c.outcome != "ok" or c.writer is None or not c.ids or c.kind == "enqueue":
            continue
        later = [at for writer, at in opened if writer != c.writer and at < c.invoked]
        mine = [at for writer, at in opened if writer == c.writer]
        if mine and later and max(later) > min(mine):
            out.append(
                Violation(
                    "fenced-ack",
                    f"writer {c.writer} acknowledged a {c.kind} sent after a newer writer opened",
                )
            )
    return out


def _stats(h: History) -> list[Violation]:
    final = h.final
    if final is None:
        return []
    out: list[Violation] = []
    made_low = {c.dedup for c in _of(h.calls, "enqueue", "ok")}
    made_high = {c.dedup for c in _of(h.calls, "enqueue")}
    if not len(made_low) <= final.total_enqueued <= len(made_high):
        out.append(
            Violation(
                "stats",
                f"total_enqueued {final.total_enqueued} outside [{len(made_low)}, "
                f"{len(made_high)}] (acknowledged, attempted)",
            )
        )
    # A completion is remembered for ``completed_retention`` from when the writer made it, no
    # earlier than the call was sent: one sent after ``kept_from`` surely still is, one sent
    # before it may be forgotten (its message then counted neither completed nor remaining).
    kept_from = final.read_at - h.completed_retention
    tried = [c for c in _of(h.calls, "complete") if c.outcome != "fail"]
    done_low = {mid for c in tried if c.outcome == "ok" and c.invoked > kept_from for mid in c.ids}
    done_high = {mid for c in tried for mid in c.ids}
    if not len(done_low) <= final.completed <= len(done_high):
        out.append(
            Violation(
                "stats",
                f"completed {final.completed} outside [{len(done_low)}, {len(done_high)}]",
            )
        )
    forgettable = {mid for c in tried if c.invoked <= kept_from for mid in c.ids} - done_low
    forgotten = final.total_enqueued - final.completed - len(final.remaining)
    if not 0 <= forgotten <= len(forgettable):
        out.append(
            Violation(
                "stats",
                f"total_enqueued {final.total_enqueued} != completed {final.completed} + "
                f"{len(final.remaining)} in the queue + forgotten (at most {len(forgettable)} "
                f"completions older than the retention)",
            )
        )
    return out
