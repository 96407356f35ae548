"""Group commit: a queue's operations gathered into batches, each written as the next log object.

Every operation is folded into the index at once (by ``apply``) and added to the batch being
filled. One batch at a time is written as the next log object with create-if-absent; callers
are answered when the object holding their operation is durable. Operations that arrive while
a write is in flight ride the next one: under load, one PUT carries thousands of operations.

A batch is sealed no sooner than ``window`` seconds after its first operation arrived, gathering
what comes meanwhile into the same PUT (Kafka's ``linger.ms``): a PUT per window at most, for at
most that much more latency. A batch whose window passed while the previous one was being written
(a busy queue, a slow store) is sealed the moment that write is durable, so the window costs it
nothing; a full batch is sealed at once. And the window is adaptive: a writer whose waits gather
nothing (one caller making one call at a time cannot gain from them) stops waiting, trying again
on one batch in ``PROBE_EVERY`` in case company has come.

A writer that finds its next sequence number already taken has been fenced by a newer writer:
it fails that batch and every later call with :class:`WriterFenced`. Its index is then ahead of
the log, which is why it never writes again; reopening rebuilds the truth from the log.

Nothing else stops a writer. A log write that fails (a 5xx, a reset, a hung request) is sent
again with the same bytes until it lands or the writer is fenced; a first attempt that applied
is recognised by the writer token inside the object. Callers wait for their batch up to
``commit_timeout`` and are then told :class:`OutcomeUnknown`: the write is still being tried.

A log write the store has no room for (:class:`StoreFull`) was not applied: the writer *pauses*.
That batch and every one not yet durable fail with it, nothing is written, and ``on_full`` is
called: the engine reads the index back from the log (it held what those batches folded) and
``unpause`` lets the writer go on at the same sequence number.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from ..errors import (
    OutcomeUnknown,
    S3QError,
    StoreError,
    StoreFull,
    UnsupportedFormat,
    WriterFenced,
)
from ..lease import WriterLease
from ..log import segment
from ..log.ops import AnyOp, Open
from ..store import AlreadyExists, Store, TransientError
from ..store.retry import Backoff

logger = logging.getLogger("s3q")

#: Pauses between attempts of a log write that keeps failing: short enough that the writer
#: resumes within a second of the store's return.
COMMIT_BACKOFF = Backoff(first=0.02, cap=0.5)

#: A batch this large is sealed at once, window or not (callers' operations, payload bytes).
FULL_WEIGHT = 10_000
FULL_BYTES = 8 * 1024 * 1024
#: The window is used while waits gather at least this many operations on average (a moving
#: average over the last few waits), and on one batch in PROBE_EVERY of those that could wait
#: otherwise.
WORTH_WAITING = 0.5
PROBE_EVERY = 8
#: A buffered call (``durability="buffered"``) waits for durability like any other once this
#: much is not durable yet (a slow or absent store): memory stays bounded, and callers feel the
#: store's trouble instead of piling operations on a writer that cannot write them.
BUFFER_WEIGHT = 2 * FULL_WEIGHT
BUFFER_BYTES = 2 * FULL_BYTES


def _full(batch: Batch) -> bool:
    """Whether ``batch`` is worth a PUT whatever the window."""
    return batch.weight >= FULL_WEIGHT or batch.size >= FULL_BYTES


class Batch:
    """Operations bound for one log object, and the payloads it carries."""

    __slots__ = (
        "data",
        "done",
        "enqueued",
        "held",
        "opened",
        "ops",
        "payloads",
        "seq",
        "size",
        "timer",
        "waiters",
        "weight",
    )

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.opened = 0.0  # when its first operation arrived (time.monotonic)
        self.enqueued = 0  # messages enqueued by this log object so far: the next one's place
        self.ops: list[AnyOp] = []
        self.weight = 0  # the callers' operations it carries (``Op.weight``)
        self.payloads: list[bytes] = []
        self.held: dict[str, bytes] = {}  # payloads by message id, until durable
        self.size = 0
        self.data = b""  # the log object, once encoded
        self.done = _Durable(loop=asyncio.get_running_loop())
        self.done.add_done_callback(_retrieve)
        self.waiters: list[asyncio.Future[None]] | None = None  # see ``settled``
        self.timer: asyncio.TimerHandle | None = None

    def places(self, count: int) -> int:
        """Take the places of ``count`` more messages enqueued here; the first one's."""
        first = self.enqueued
        self.enqueued += count
        return first

    def settled(self, timeout: float) -> asyncio.Future[None]:
        """A future resolved once the batch is durable or has failed (:meth:`settle`), or
        ``timeout`` seconds after the first of the callers waiting with it asked: one timer for
        all of them, not one each (as ``asyncio.wait`` would set). A caller cancelled cancels
        only its own."""
        loop = self.done.get_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        if self.waiters is None:
            self.waiters = [waiter]
            self.timer = loop.call_later(timeout, self._wake)
        else:
            self.waiters.append(waiter)
        return waiter

    def settle(self, failure: BaseException | None = None) -> None:
        """The batch is durable (or failed with ``failure``): ``done`` resolved, and the callers
        waiting with :meth:`settled` woken now, not a loop pass later."""
        if self.done.done():
            return
        if failure is None:
            self.done.set_result(None)
        else:
            self.done.set_exception(failure)
        if self.timer is not None:
            self.timer.cancel()
        self._wake()

    def _wake(self) -> None:
        waiters, self.waiters, self.timer = self.waiters or [], None, None
        for waiter in waiters:  # (one who asks after a timeout has a timer of its own)
            if not waiter.done():
                waiter.set_result(None)


class _Durable(asyncio.Future[None]):
    """Resolved when a batch is durable; awaited by every caller whose operation rides it.

    A cancelled caller must not cancel the batch for the others, so ``cancel`` is refused:
    the caller's task is cancelled once the batch has settled. (Cheaper than a shield each.)
    """

    def cancel(self, msg: object = None) -> bool:
        return False


def _retrieve(future: asyncio.Future[None]) -> None:
    future.exception()  # mark a failure as seen: every waiter gets it re-raised


class CommitHooks(Protocol):
    """What group commit calls back into: the writer whose log it writes."""

    def fold(self, op: AnyOp, seq: int) -> int:
        """Fold ``op``, going into log object ``seq``, into the index; what folding answered
        (what a Prune forgot)."""

    def sealing(self, batch: Batch) -> Any:
        """``batch`` is being sealed (operations may still be added to it); what this returns
        is handed to ``durable`` with the batch once it is in the log."""

    def durable(self, batch: Batch, sealed: Any) -> None:
        """``batch`` is in the log."""

    def stopped(self) -> None:
        """The writer stopped (fenced, or a write's outcome unknown): long polls end."""

    def full(self) -> None:
        """The store had no room for a log write: the group commit is paused."""


class GroupCommit:
    """The tail of one queue's log as its writer sees it: the batch being filled, the batches
    being written, the last durable sequence number, and why the writer stopped, if it did."""

    def __init__(
        self,
        store: Store,
        lease: WriterLease,
        token: str,
        clock: Callable[[], float],
        hooks: CommitHooks,
        commit_timeout: float,
        *,
        window: float = 0.0,
    ) -> None:
        self.store, self.lease, self.token, self.clock = store, lease, token, clock
        self.commit_timeout = commit_timeout
        self.window = window
        self._gain = 2 * WORTH_WAITING  # operations a wait gathers, on average (hopeful at first)
        self._chances = 0  # batches that could have waited
        self._hurry: asyncio.Event | None = None  # set to end a wait early
        self.waits = 0  # batches that waited for company
        self._hooks = hooks
        self.durable = 0  # sequence number of the last durable log object
        self.filling = Batch(1)  # placed after the log's end by ``resume``
        self.unflushed: dict[int, Batch] = {}
        self.failure: S3QError | None = None
        self.full: StoreFull | None = None  # paused: the store had no room for a log write
        self.abandoned = False  # closing gave up on a write the store never confirmed
        self.task: asyncio.Task[None] | None = None
        self.commits = 0
        self.ops_committed = 0
        #: when the log object in flight began to be written (time.monotonic); None: none is,
        #: so an operation added now leaves at once (after the window)
        self.writing_since: float | None = None
        #: called with (seconds, operations) after each durable commit
        self.listeners: list[Callable[[float, int], None]] = []

    def resume(self, durable: int) -> None:
        """Continue the log after log object ``durable`` (recovery found it the last)."""
        self.durable = durable
        self.filling = Batch(durable + 1)

    @property
    def halted(self) -> S3QError | None:
        """Why no write may be made now: the writer stopped (``failure``) or is paused."""
        return self.failure or self.full

    # -- adding operations -----------------------------------------------------------------

    def add(self, op: AnyOp) -> Batch:
        """Fold ``op`` into the index and the batch being filled; the batch it rides."""
        return self.add_counted(op)[0]

    def add_counted(self, op: AnyOp) -> tuple[Batch, int]:
        """``add``, with what folding ``op`` answered (what a Prune forgot)."""
        batch = self.filling
        answer = self._hooks.fold(op, batch.seq)
        if not batch.ops:
            batch.opened = time.monotonic()
        batch.ops.append(op)
        batch.weight += op.weight
        if self.task is None:
            self.task = asyncio.create_task(self._loop())
        elif self._hurry is not None and _full(batch):
            self._hurry.set()
        return batch, answer

    def add_payloads(self, op: AnyOp, ids: list[str], payloads: list[bytes], size: int) -> Batch:
        """Like ``add``, for an op whose payloads ride the same log object, in this order,
        with the ids of their messages (``size``: their total length)."""
        batch = self.add(op)
        batch.payloads.extend(payloads)
        batch.held.update(zip(ids, payloads, strict=True))
        batch.size += size
        if self._hurry is not None and _full(batch):
            self._hurry.set()
        return batch

    def flush(self) -> None:
        """Seal the batch being filled without waiting out the window (closing, say)."""
        self.window = 0.0
        if self._hurry is not None:
            self._hurry.set()

    def backlogged(self) -> bool:
        """Whether more is waiting to be durable than buffered calls may leave behind."""
        batches = [self.filling, *self.unflushed.values()]
        return (
            sum(b.weight for b in batches) > BUFFER_WEIGHT
            or sum(b.size for b in batches) > BUFFER_BYTES
        )

    def latest(self) -> Batch | None:
        """The last batch with operations in it, if any is not durable yet."""
        if self.filling.ops:
            return self.filling
        return self.unflushed.get(self.filling.seq - 1)

    def writing(self, seq: int) -> Batch | None:
        """The batch that makes log object ``seq``, if it is not durable yet."""
        return self.unflushed.get(seq) or (self.filling if self.filling.seq == seq else None)

    def held(self, seq: int) -> dict[str, bytes] | None:
        """The payloads by message id of log object ``seq``, if it is not durable yet."""
        batch = self.writing(seq)
        return None if batch is None else batch.held

    async def durable_after(self, batch: Batch | None, timeout: float | None = None) -> None:
        """Wait until ``batch`` is durable; OutcomeUnknown after ``timeout`` (by default
        ``commit_timeout``)."""
        if batch is None:
            return
        if not batch.done.done():
            if timeout is None:
                await batch.settled(self.commit_timeout)
            else:
                await asyncio.wait([batch.done], timeout=timeout)
        if not batch.done.done():
            raise OutcomeUnknown(
                f"the store has not confirmed the write of {self.store.url} that carries "
                f"this call within {self.commit_timeout:g} s; the writer goes on "
                "trying it, so it may yet apply: retry with the same dedup_id or receipt"
            )
        await batch.done

    # -- writing ---------------------------------------------------------------------------

    async def _loop(self) -> None:
        try:
            while self.filling.ops and self.halted is None:
                if self.window > 0:
                    await self._gather(self.filling)
                batch = self.filling
                sealed = self._hooks.sealing(batch)
                self.unflushed[batch.seq] = batch
                self.filling = Batch(batch.seq + 1)
                started = time.perf_counter()
                self.writing_since = time.monotonic()
                try:
                    await self._write_until_known(batch)
                except StoreFull as exc:
                    self._pause(exc)
                    return
                except S3QError as exc:
                    self.fail(exc)
                    return
                except Exception as exc:
                    # A bug or an unexpected failure: never leave callers hanging.
                    self.fail(StoreError(f"commit to {self.store.url} failed: {exc!r}"))
                    raise
                self.writing_since = None
                self.unflushed.pop(batch.seq, None)
                self.durable = batch.seq
                self.commits += 1
                self.ops_committed += batch.weight
                self._tell_listeners(time.perf_counter() - started, batch.weight)
                batch.settle()
                if self.failure is None:
                    self._hooks.durable(batch, sealed)
        finally:
            self.task = None
            self.writing_since = None

    async def _gather(self, batch: Batch) -> None:
        """Wait for company until ``batch``'s window has passed, if waiting has been gathering
        any (or to find out again whether it does)."""
        left = batch.opened + self.window - time.monotonic()
        if left <= 0 or _full(batch):
            return
        self._chances += 1
        if self._gain < WORTH_WAITING and self._chances % PROBE_EVERY:
            return
        before = batch.weight
        self._hurry = asyncio.Event()
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._hurry.wait(), left)
        finally:
            self._hurry = None
        self.waits += 1
        self._gain = 0.75 * self._gain + 0.25 * (batch.weight - before)

    def _tell_listeners(self, seconds: float, ops: int) -> None:
        for listener in self.listeners:
            try:
                listener(seconds, ops)
            except Exception:  # a metrics hook must never stop the writer
                logger.exception("commit listener %r failed", listener)

    async def _write_until_known(self, batch: Batch) -> None:
        """Write ``batch`` as the next log object, the same bytes again after each failure,
        until it is in the log or a rival's object is (WriterFenced)."""
        header = segment.Header(batch.seq, self.token, self.clock(), batch.ops)
        data = batch.data = segment.encode(header, batch.payloads)
        for attempt in itertools.count():
            try:
                await self.lease.ensure()
                await self._write(batch.seq, data)
                return
            except TransientError as exc:
                if self.abandoned:
                    raise
                logger.warning(
                    "log write %s of %s failed (attempt %d), trying again: %s",
                    batch.seq,
                    self.store.url,
                    attempt + 1,
                    exc,
                )
                await asyncio.sleep(COMMIT_BACKOFF.delay(attempt))

    async def _write(self, seq: int, data: bytes) -> None:
        try:
            await self.store.put_new(segment.key(seq), data)
        except AlreadyExists:
            # Ours if an earlier attempt applied; a rival writer's otherwise.
            try:
                header = segment.decode(await self.store.get(segment.key(seq)), segment.key(seq))
            except (segment.Corrupt, UnsupportedFormat, msgspec.DecodeError):
                header = None  # not a log object this build wrote: certainly not ours
            if header is None or header.writer != self.token:
                raise await self._fenced_by(seq, header) from None

    async def _fenced_by(self, seq: int, header: segment.Header | None) -> WriterFenced:
        """The error of a writer that found log object ``seq`` written by another."""
        holder = None
        if header is not None and header.ops and isinstance(header.ops[0], Open):
            holder = header.ops[0].holder
        else:
            with contextlib.suppress(S3QError):
                holder = await self.lease.holder_now()
        who = holder or "another writer"
        return WriterFenced(
            f"queue {self.store.url} was taken over by {who} (log object {seq} is theirs); "
            "this queue object can no longer change it: reopen it",
            holder=holder,
        )

    # -- pausing -----------------------------------------------------------------------------

    def _pause(self, exc: StoreFull) -> None:
        """The store had no room for a log write, which was not applied: fail every batch not
        yet durable with ``exc`` (their operations changed nothing in the log), and write
        nothing until ``unpause``. Operations added meanwhile join a batch that failed."""
        self.full = exc
        logger.warning("writer of %s paused: %s", self.store.url, exc)
        for batch in [*self.unflushed.values(), self.filling]:
            batch.settle(exc)
        self.unflushed.clear()
        self._hooks.stopped()  # long polls end
        self._hooks.full()

    def unpause(self) -> None:
        """The index holds the log again (read back from it): write again, after the last
        durable log object."""
        self.full = None
        self.resume(self.durable)

    # -- stopping ----------------------------------------------------------------------------

    def abandon(self) -> None:
        """Stop trying the write in flight (at close, once ``commit_timeout`` has passed): its
        callers and every later one are told the outcome is unknown."""
        self.abandoned = True
        self.fail(
            OutcomeUnknown(
                f"queue {self.store.url} closed while the store had not confirmed its last "
                "write; it may or may not have applied"
            )
        )

    def fail(self, exc: S3QError, in_flight: bool = True) -> None:
        """Stop for good. Batches not yet written fail; the one being written fails too when
        its write is what failed (``in_flight``), else its fate is its write's: a write that
        lands is in the log, and a newer writer replays it, so its callers are answered."""
        if self.failure is None:
            self.failure = exc
            logger.error("writer of %s stopped: %s", self.store.url, exc)
        doomed = [self.filling, *(self.unflushed.values() if in_flight else ())]
        for batch in doomed:
            batch.settle(self.failure)
        if in_flight:
            self.unflushed.clear()
        self._hooks.stopped()
