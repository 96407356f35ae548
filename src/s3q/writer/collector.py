"""Garbage collection: delete what no live message, reader or recovery needs any more.

The index keeps a list of garbage: log objects none of whose payloads a live message still
needs, and payload objects of finished messages, each stamped with the log sequence number at
which it became garbage. A checkpoint at sequence ``C`` never refers to garbage stamped ``<= C``,
and readers starting from it read only the log after ``C``. So once a checkpoint has existed for
``gc_grace`` seconds (the *stable* one), everything stamped at or before it can go, and so can
older checkpoints: a reader that finishes within ``gc_grace`` of its start never misses an object.
A checkpoint's time is when it was taken, whoever took it: those an earlier writer of the queue
left are read from the store (``Checkpointer.taken_at``), so a new writer need not hold the queue
for ``gc_grace`` before it deletes anything.
With ``history_retention`` set, garbage younger than it is kept too
(``s3q.writer.history_retention``).

Live payloads stranded in mostly-dead log objects are copied forward into the log (a Relocate
operation) so those objects can go too. Collection runs beside the writer, never blocking commits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from ..config import QueueConfig
from ..errors import S3QError
from ..index import checkpoint
from ..index.records import DONE, Record
from ..index.state import QueueState
from ..log import segment, staging
from ..message import CompactionReport
from ..store import Store
from .history_retention import Horizon, governing_seq

DELETE_CONCURRENCY = 16
#: checkpoints newer than the stable one are thinned to about this many per ``gc_grace``
#: (besides the newest ``KEEP_NEWEST``): what a later pass finds stable is at most
#: ``gc_grace / RUNGS`` younger than it could have been, and a busy queue does not keep every
#: checkpoint it took in ``gc_grace`` (at one per 100 log objects, hundreds of megabytes)
RUNGS = 8
KEEP_NEWEST = 2
RELOCATE_BUDGET = 16 * 1024 * 1024  # bytes of payload copied forward per pass
STRAGGLER_SHARE = 0.25  # an object whose live payloads are below this share of it is compacted
#: an object that keeps only dead letters alive, at most this many bytes of them, is compacted
#: too, with others: a dead letter lives until it is redriven or discarded, and would keep the
#: whole object it came in (a message committed alone: one object per dead letter) as long
STRAGGLER_BYTES = 64 * 1024


class Writer(Protocol):
    """What collection needs of the queue's writer."""

    @property
    def store(self) -> Store: ...

    @property
    def config(self) -> QueueConfig: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def state(self) -> QueueState: ...

    @property
    def horizon(self) -> Horizon:
        """How far history retention lets collection go."""

    @property
    def staged_claims(self) -> set[str]:
        """Staged objects being committed: never orphans."""

    @property
    def checkpoints(self) -> dict[int, float]:
        """The checkpoints known: sequence number -> when written."""

    async def checkpoint_taken_at(self, seq: int) -> float | None:
        """When checkpoint ``seq`` (in the store) was taken, learnt from the store if not
        known (then known); None if the store could not say."""

    async def read_payloads(self, seq: int, spans: list[tuple[str, int, int]]) -> dict[str, bytes]:
        """Payloads by id, given ``(id, offset, size)`` in log object ``seq``."""

    def relocate(self, moves: list[tuple[str, bytes]]) -> None:
        """Copy payloads forward into the log: ``(id, payload)``."""


async def collect(writer: Writer) -> CompactionReport:
    """One pass: relocate stragglers, then delete garbage and old checkpoints."""
    report = CompactionReport()
    await _relocate_stragglers(writer, report)
    store, now = writer.store, writer.clock()
    keys = await store.keys(checkpoint.PREFIX)
    seqs = sorted(s for s in map(checkpoint.seq_of, keys) if s is not None)
    stable = await _stable(writer, seqs, now - writer.config.gc_grace)
    report.stable_checkpoint = stable
    if stable:
        await _delete_garbage(writer, report, seqs, stable)
    await _thin_checkpoints(writer, report, [s for s in seqs if s > stable])
    await _delete_orphans(writer, report)
    return report


def thinned(seqs: list[int], taken: dict[int, float], step: float) -> list[int]:
    """The checkpoints of ``seqs`` (sorted, all newer than the stable one) that can go: all
    but the newest ``KEEP_NEWEST`` and the oldest taken in each ``step`` seconds of the clock
    (fixed spans, so what one pass keeps the next keeps too, and some checkpoint ages into
    the stable one every ``step``). One whose time ``taken`` does not hold (an earlier
    writer's) is kept: it goes once it is older than a stable one.

    Readers lose nothing: one that finds the checkpoint it chose gone starts from an older
    one (the stable one is never thinned), and the log after that is kept."""
    if step <= 0:
        return []
    doomed: list[int] = []
    spans: set[float] = set()
    for seq in seqs[: max(0, len(seqs) - KEEP_NEWEST)]:
        at = taken.get(seq)
        if at is None:
            continue
        span = at // step
        if span in spans:
            doomed.append(seq)
        else:
            spans.add(span)
    return doomed


async def _thin_checkpoints(writer: Writer, report: CompactionReport, newer: list[int]) -> None:
    """Delete the checkpoints newer than the stable one that ``thinned`` lets go."""
    known = writer.checkpoints
    doomed = thinned(newer, known, writer.config.gc_grace / RUNGS)
    failed = await _delete_all(writer.store, [checkpoint.key(s) for s in doomed], report)
    for seq in doomed:
        if checkpoint.key(seq) not in failed:
            known.pop(seq, None)
            report.deleted_checkpoints += 1


async def _delete_all(store: Store, keys: list[str], report: CompactionReport) -> set[str]:
    """Delete ``keys``, ``DELETE_CONCURRENCY`` at a time; those that failed (the store's
    errors noted in ``report``)."""
    limit = asyncio.Semaphore(DELETE_CONCURRENCY)

    async def delete(key: str) -> None:
        async with limit:
            await store.delete(key)

    results = await asyncio.gather(*(delete(k) for k in keys), return_exceptions=True)
    report.errors += [str(r) for r in results if isinstance(r, S3QError)]
    return {k for k, r in zip(keys, results, strict=True) if isinstance(r, BaseException)}


async def _stable(writer: Writer, seqs: list[int], cutoff: float) -> int:
    """The newest of the checkpoints ``seqs`` (sorted) taken at or before ``cutoff``; 0: none.

    The newest is looked at first: this writer took it, or opened from it, so its time is
    known. Those an earlier writer of the queue took before it are in the store but not known
    here: their times are read, a few per writer, since checkpoints are taken in the order of
    their sequence numbers and a bisection finds the newest old enough. Whatever the order,
    the one chosen was itself taken by ``cutoff``.
    """
    if not seqs:
        return 0
    at = await writer.checkpoint_taken_at(seqs[-1])
    if at is not None and at <= cutoff:
        return seqs[-1]  # (an idle queue, gc_grace 0: nothing to read)
    low, high, found = 0, len(seqs) - 2, 0
    while low <= high:
        middle = (low + high) // 2
        at = await writer.checkpoint_taken_at(seqs[middle])
        if at is not None and at <= cutoff:
            found, low = seqs[middle], middle + 1
        else:
            high = middle - 1
    return found


async def _delete_garbage(
    writer: Writer, report: CompactionReport, seqs: list[int], stable: int
) -> None:
    """Delete garbage stamped at or before the stable checkpoint, and older checkpoints."""
    store, state, known = writer.store, writer.state, writer.checkpoints
    doomed = await _past_history(writer, report, state.payloads.doomed(stable))
    old_checkpoints = [checkpoint.key(s) for s in seqs if s < stable]
    failed = await _delete_all(store, [*old_checkpoints, *doomed], report)
    gone = set(doomed) - failed
    state.payloads.forget(gone)
    report.deleted_objects = len(gone)
    report.deleted_checkpoints = len(set(old_checkpoints) - failed)
    for s in seqs:
        if s < stable and checkpoint.key(s) not in failed:
            known.pop(s, None)


async def _past_history(
    writer: Writer, report: CompactionReport, garbage: list[tuple[int, str]]
) -> list[str]:
    """The keys of ``garbage`` that history retention (if any) lets go; counts the rest."""
    retention = writer.config.history_retention
    if not retention:
        return [key for _, key in garbage]
    logs = (s for s in map(segment.seq_of, (key for _, key in garbage)) if s is not None)
    horizon = await writer.horizon.advance(writer.store, logs, writer.clock() - retention)
    doomed = [key for stamp, key in garbage if governing_seq(stamp, key) <= horizon]
    report.history_objects = writer.horizon.held = len(garbage) - len(doomed)
    return doomed


async def _relocate_stragglers(writer: Writer, report: CompactionReport) -> None:
    """Copy live payloads out of old objects that are mostly dead, or that keep only a few
    dead letters alive, within a byte budget. The copies ride in the batch being filled, so
    the objects chosen are gathered into one. A pass moves two objects or more, or one that
    frees ``STRAGGLER_BYTES``: moving a lone small one would only keep another object in its
    place, pass after pass."""
    state = writer.state
    newest = max(writer.checkpoints, default=0)
    dead_in: dict[int, int] | None = None  # counted once an object may need it
    chosen: list[int] = []
    freed = 0  # payload bytes the chosen objects were written with and no longer hold
    budget = RELOCATE_BUDGET
    for seq, live, written in state.payloads.holding():
        if seq >= newest or budget <= 0:
            break
        if seq in state.runs or seq in state.stretches or live > budget:
            continue  # (runs and stretches leave in their own time)
        dead_only = False
        if live <= STRAGGLER_BYTES and live > STRAGGLER_SHARE * written:
            dead_in = _dead_letters_by_object(state) if dead_in is None else dead_in
            dead_only = dead_in.get(seq) == state.payloads.refs[seq]
        if dead_only or live <= STRAGGLER_SHARE * written:
            chosen.append(seq)
            freed += written - live
            budget -= live
    if len(chosen) < 2 and freed < STRAGGLER_BYTES:
        return
    recs: dict[int, list[Record]] = {seq: [] for seq in chosen}
    for rec in state.messages.values():
        if rec.payload_seq in recs and rec.offset >= 0 and rec.stage is None and rec.state != DONE:
            recs[rec.payload_seq].append(rec)
    # Where each payload lies now, taken before any await: the world moves on while we read.
    spans = {seq: [(r.id, r.offset, r.size) for r in rs] for seq, rs in recs.items()}
    reads = await asyncio.gather(*(writer.read_payloads(seq, spans[seq]) for seq in recs))
    payloads = {mid: data for part in reads for mid, data in part.items()}
    still = [  # only messages still live where they were; all into one log object
        (rec.id, payloads[rec.id])
        for seq, rs in recs.items()
        for rec in rs
        if state.messages.get(rec.id) is rec and rec.payload_seq == seq and rec.state != DONE
    ]
    if still:
        writer.relocate(still)
        report.relocated_messages += len(still)
        report.relocated_bytes += sum(len(p) for _, p in still)


def _dead_letters_by_object(state: QueueState) -> dict[int, int]:
    """Log seq -> how many dead letters have their payload in that log object."""
    found: dict[int, int] = {}
    for rec in state.iter_dead():
        if rec.stage is None and rec.offset >= 0:
            found[rec.payload_seq] = found.get(rec.payload_seq, 0) + 1
    return found


async def _delete_orphans(writer: Writer, report: CompactionReport) -> None:
    """Delete staged objects no commit refers to, once older than the orphan age: what bulk
    loads killed before their commit left behind (``s3q.log.staging``)."""
    store, state, now = writer.store, writer.state, writer.clock()
    cutoff = now - max(writer.config.gc_grace, staging.ORPHAN_AGE)
    keys = await store.keys(staging.PREFIX)
    if not keys:
        return
    garbage, needed = state.payloads.garbage_objects(), state.payloads.staged_refs
    limit = asyncio.Semaphore(DELETE_CONCURRENCY)

    async def delete(key: str) -> bool:
        async with limit:
            # Decided at the last moment: a commit may have claimed it meanwhile.
            if key in writer.staged_claims or key in needed:
                return False
            await store.delete(key)
            return True

    doomed = [
        key
        for key in keys
        if key not in needed
        and key not in garbage
        and (born := staging.written_at(key)) is not None
        and born <= cutoff
    ]
    results = await asyncio.gather(*(delete(k) for k in doomed), return_exceptions=True)
    report.deleted_objects += sum(1 for r in results if r is True)
    report.errors += [str(r) for r in results if isinstance(r, S3QError)]
