"""The writer of one queue: its life cycle (open, recovery, fencing, close), and its operations
handed to the parts that carry them out.

Each operation is checked against the index, folded into it and added to the log by group
commit (``commit``); the caller is answered once it is durable. The parts share the writer's
``core``: ``intake`` adds messages (admitted by ``admission``, which does no I/O),
``leasing`` leases them and settles their leases, ``reads`` and ``dead_letters`` answer
and act on what the queue holds, ``payloads`` reads payloads, and ``upkeep`` prunes,
checkpoints (``checkpointer``) and collects garbage (``collector``) beside the writer.

A log write the store had no room for pauses the group commit (``commit``): once no call is
under way and no work runs beside the writer, the index is read back from the log, as an open
reads it, and the writer goes on; the calls meanwhile were told :class:`StoreFull`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import secrets
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from .. import snapshot, validate
from ..config import (
    OBJECT_WINDOW,
    PERSISTED,
    QueueConfig,
    Setting,
    check_settings,
    queue_settings,
    with_settings,
)
from ..errors import InvalidConfig, OutcomeUnknown, S3QError, StoreError, WriterFenced
from ..index.state import QueueState
from ..lease import WriterLease, describe_holder, writer_lease
from ..log import ids, segment, stamps
from ..log.ops import Configure, Open
from ..log.staging import StagedObject
from ..message import CompactionReport, Message, MessageStatus, QueueStats
from ..snapshot import Located
from ..store import AlreadyExists, Store, store_kind
from ..wire.pages import Pages
from .checkpointer import Checkpointer
from .commit import COMMIT_BACKOFF, GroupCommit
from .core import Core
from .dead_letters import DeadLetters
from .intake import Intake
from .leasing import Leasing, Take
from .payloads import Payloads
from .reads import Reads
from .upkeep import Upkeep

logger = logging.getLogger("s3q")

DEFAULT_SETTINGS = queue_settings(QueueConfig())

P = ParamSpec("P")
R = TypeVar("R")


def _counted(
    method: Callable[Concatenate[Engine, P], Awaitable[R]],
) -> Callable[Concatenate[Engine, P], Coroutine[Any, Any, R]]:
    """An operation that may change the queue, counted as a call under way while it runs
    (``Core.calling``), and answered only while the writer's lease runs (``_still_leading``)."""
    return _served(method, reads=False)


def _read(
    method: Callable[Concatenate[Engine, P], Awaitable[R]],
) -> Callable[Concatenate[Engine, P], Coroutine[Any, Any, R]]:
    """An operation that only reads the queue, counted and answered as ``_counted``."""
    return _served(method, reads=True)


def _served(
    method: Callable[Concatenate[Engine, P], Awaitable[R]], *, reads: bool
) -> Callable[Concatenate[Engine, P], Coroutine[Any, Any, R]]:
    @functools.wraps(method)
    async def counted(self: Engine, /, *args: P.args, **kwargs: P.kwargs) -> R:
        async with self._core.calling():
            result = await method(self, *args, **kwargs)
            if not self._lease.runs():
                await self._still_leading(reads)
            return result

    return counted


class Engine:
    """The single writer of one queue. Create with :meth:`open`."""

    def __init__(self, store: Store, config: QueueConfig) -> None:
        self.store = store
        self.clock = config.clock
        self.token = secrets.token_hex(8) + stamps.MARK
        self.stamps = stamps.StampClock(self.clock)  # log objects' times, never going back
        self.holder = describe_holder(config.writer_address)
        self._lease: WriterLease = writer_lease(
            store,
            self.holder,
            self.token,
            config.lease_ttl,
            self.clock,
            config.writer_address,
            config.broker_lease,
        )
        self.commit = GroupCommit(
            store,
            self._lease,
            self.token,
            self.stamps,
            lambda op, seq: self.state.apply(op, seq),
            config.commit_timeout,
            window=commit_window(store, config.commit_window),
            on_seal=lambda batch: self._upkeep.sealing(batch),
            on_durable=lambda batch, data: self._upkeep.sealed_durable(batch, data),
            on_stop=lambda: self._core.notify(),
            on_full=self._paused,
        )
        self.checkpointer = Checkpointer(
            store, self.token, self.clock, config.checkpoint_ops, config.checkpoint_interval
        )
        self._core = core = Core(store, config, self.commit, self.token)
        payloads = Payloads(core)
        self._upkeep = Upkeep(core, self.checkpointer, payloads)
        self._intake = Intake(core, self._upkeep)
        self._leasing = Leasing(core, payloads)
        self._reads = Reads(core, self._leasing, payloads)
        self._dead = DeadLetters(core, self._leasing, payloads)
        self._renewer: asyncio.Task[None] | None = None
        self._rereading: asyncio.Task[None] | None = None  # the index, after a pause
        self._opened_with = config  # the settings in force once opened, before any configure
        self._stopping = asyncio.Event()

    # -- what the parts share --------------------------------------------------------------------

    @property
    def config(self) -> QueueConfig:
        """The settings in force."""
        return self._core.config

    @config.setter
    def config(self, config: QueueConfig) -> None:
        self._core.config = config

    @property
    def state(self) -> QueueState:
        """The index of the queue."""
        return self._core.state

    @state.setter
    def state(self, state: QueueState) -> None:
        self._core.state = state

    @property
    def _tasks(self) -> set[asyncio.Task[None]]:
        """Work running beside the writer (checkpoint writes, deletes)."""
        return self._core.tasks

    # -- life cycle ------------------------------------------------------------------------------

    @property
    def failure(self) -> S3QError | None:
        """Why this writer stopped, if it did (then every call raises it)."""
        return self.commit.failure

    @property
    def checkpoints(self) -> dict[int, float]:
        """The checkpoints this writer knows of: sequence number -> when written."""
        return self.checkpointer.known

    @property
    def commit_listeners(self) -> list[Callable[[float, int], None]]:
        """Called with (seconds, operations) after each durable commit."""
        return self.commit.listeners

    @property
    def commits(self) -> int:
        """Log objects this writer has made durable."""
        return self.commit.commits

    @classmethod
    async def open(
        cls,
        store: Store,
        config: QueueConfig,
        settings: dict[str, Setting] | None = None,
        since: snapshot.Loaded | None = None,
    ) -> Engine:
        """Take the writer lease, rebuild the index from the log, fence older writers, and
        apply the queue's settings: those given (``settings``) are saved; the others are the
        saved ones, else the defaults. ``since``: the index read ahead of the lease (see
        ``snapshot.load``), read on from instead of from a checkpoint."""
        engine = cls(store, config)
        try:
            await engine._lease.acquire()
            if engine._lease.renew_every is not None:  # kept alive through a long replay too
                engine._renewer = asyncio.create_task(engine._renew_loop(engine._lease.renew_every))
            await engine._recover(since)
            engine._core.check()  # fenced while recovering: the lease went to another writer
            await engine._apply_settings(settings or {})
        except BaseException:
            engine._core.closed = True
            engine._stopping.set()
            for task in (engine._renewer, engine._rereading):
                if task is not None:
                    await _quietly(task)
            await _quietly(engine._lease.release())
            raise
        return engine

    async def close(self) -> None:
        """Finish the commits under way, then give up the lease: within ``commit_timeout``
        and one more second for the lease, however the store behaves (a lease not given back
        lapses by itself)."""
        if self._core.closed:
            return
        self._core.closed = True
        self.commit.flush()  # what waits for company is written now
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.commit_timeout

        def left() -> float:
            return max(0.0, deadline - loop.time())

        while self.commit.halted is None and (pending := self.commit.latest()) is not None:
            with contextlib.suppress(S3QError):
                await self.commit.durable_after(pending, timeout=left())
            if not pending.done.done():  # the store has not confirmed it: give up on it
                self.commit.abandon()
        self.commit.abandoned = True  # a write still being tried stops at its next failure
        # What is still running gets what is left of the time, then is cut short: a log
        # write already given up on, checkpoint writes and collection (whole objects each).
        running = [self.commit.task, *self._tasks, self._upkeep.collecting, self._rereading]
        await _finish_or_cancel(running, left())
        if self.commit.halted is None and self.checkpointer.behind(self.state):
            try:  # a clean shutdown leaves a checkpoint behind: the next open is fast
                async with asyncio.timeout(left()):
                    await self._upkeep.checkpoint_now()
            except (S3QError, TimeoutError) as exc:
                logger.warning("no checkpoint at close of %s: %r", self.store.url, exc)
        self._stopping.set()
        await _finish_or_cancel([self._renewer], left())
        try:
            async with asyncio.timeout(max(left(), 1.0)):
                await self._lease.release()
        except (S3QError, TimeoutError) as exc:
            if self.commit.failure is None:
                logger.warning(
                    "could not release the writer lease of %s (it lapses by itself): %r",
                    self.store.url,
                    exc,
                )
        self._core.cache.clear()
        self.state = QueueState()  # a closed queue object holds no memory worth mentioning
        await self.store.close()

    async def _recover(self, since: snapshot.Loaded | None) -> None:
        loaded = await snapshot.load(self.store, since=since)
        self.state = loaded.state
        self.checkpointer.recovered(
            self.state, loaded.checkpoints, loaded.first_at, loaded.replayed
        )
        durable = loaded.seq
        self.stamps.after(loaded.last_at)
        # Fence: the first record of this writer, at the first free sequence number.
        while True:
            seq = durable + 1
            now = self.stamps()
            fence = Open(self.holder, now, None if self.state.queue else ids.new_queue())
            try:
                await self.store.put_new(
                    segment.key(seq),
                    segment.encode(segment.Header(seq, self.token, now, [fence]), []),
                )
            except AlreadyExists:  # an older writer is still committing: take its work in
                await self._replay(seq, await self.store.get(segment.key(seq)))
                durable = seq
                continue
            self.state.apply(fence, seq)
            durable = seq
            break
        self.commit.resume(durable)
        self.checkpointer.objects_since += 1
        if self.checkpointer.long_replay():
            # A long tail was replayed (a writer that stopped without a checkpoint): take one
            # now, so the next open does not replay it all again.
            data = self.checkpointer.take(durable, self.state)
            self._core.background(self._upkeep.write_checkpoint(durable, data))

    def _paused(self) -> None:
        """The group commit paused (``StoreFull``): read the index back from the log."""
        if self._rereading is None or self._rereading.done():
            self._core.unpaused.clear()
            self._rereading = asyncio.create_task(self._reread())
            self._rereading.add_done_callback(lambda _: self._core.unpaused.set())

    async def _reread(self) -> None:
        """Once nothing reads the index to change it (the calls under way, each told
        StoreFull or about to be, and the work beside the writer), load it from the log as
        an open does, without what the failed batches folded, and unpause."""
        core = self._core
        while True:
            busy = {t for t in [*core.tasks, self._upkeep.collecting] if t and not t.done()}
            if busy:
                await asyncio.wait(busy)
            elif not core.idle.is_set():
                await core.idle.wait()
            else:
                break
        for attempt in itertools.count():
            if core.closed or self.commit.failure is not None:
                return
            try:
                loaded = await snapshot.load(self.store)
                break
            except S3QError as exc:
                logger.warning("reading %s back after a full store: %s", self.store.url, exc)
                await asyncio.sleep(COMMIT_BACKOFF.delay(attempt))
        if loaded.seq != self.commit.durable:  # not this writer's log any more
            self.commit.fail(
                StoreError(
                    f"the log of {self.store.url} ends at {loaded.seq}, not at this writer's "
                    f"last write {self.commit.durable}: reopen the queue"
                )
            )
            return
        self.state = loaded.state
        saved = {k: v for k, v in self.state.settings.items() if k in PERSISTED}
        self.config = with_settings(self._opened_with, saved)  # a failed configure undone
        self.checkpointer.recovered(
            self.state, loaded.checkpoints, loaded.first_at, loaded.replayed
        )
        self.commit.unpause()
        core.notify()
        logger.warning("writer of %s goes on after a full store", self.store.url)

    async def _apply_settings(self, given: dict[str, Setting]) -> None:
        """Put the queue's settings in force: those ``given`` (in the config already) are
        saved where they change anything; the others come from the saved ones, else the
        defaults."""
        saved = self.state.settings
        inherited: dict[str, Any] = {
            k: v for k, v in saved.items() if k in PERSISTED and k not in given
        }
        self.config = with_settings(self.config, inherited)
        in_force = {**DEFAULT_SETTINGS, **saved}
        changed = {k: v for k, v in given.items() if in_force[k] != v}
        self._check_partitions(changed, in_force)
        if changed:
            await self.commit.durable_after(self.commit.add(Configure(changed)))
        self._opened_with = self.config

    def _check_partitions(self, changed: dict[str, Any], in_force: dict[str, Setting]) -> None:
        """InvalidConfig if ``changed`` changes ``partitions`` of a queue that ever held a
        message, or that has partitions (its other partitions may hold messages): its groups
        and dedup ids would move to other partitions."""
        if "partitions" in changed and (self.state.total_enqueued or in_force["partitions"] != 1):
            raise InvalidConfig(
                f"queue {self.store.url} has partitions={in_force['partitions']}, not "
                f"{changed['partitions']}: partitions is set before a queue's first message "
                "and never changed after"
            )

    async def _replay(self, seq: int, data: bytes) -> None:
        self.stamps.after(await snapshot.replay(self.store, self.state, seq, data))
        self.checkpointer.objects_since += 1

    async def _still_leading(self, reads: bool) -> None:
        """Before answering a call while this writer's lease has run out by its clock (it was
        paused, or its renewals stalled): renew the lease and check it is still ours. If another
        writer took the queue meanwhile, this one stops, and the call is not answered as done:
        a read raises WriterFenced (it changed nothing: ask the new writer), a change
        OutcomeUnknown (its log object was written, but whether before the new writer read the
        log is not known here)."""
        try:
            await self._lease.ensure()
        except WriterFenced as exc:
            self.commit.fail(exc, in_flight=False)
            if reads:
                raise
            raise OutcomeUnknown(
                f"queue {self.store.url}: this writer's lease ran out before the call was "
                f"answered, and the queue has another writer now ({exc}); the call may or may "
                "not have been applied: retry with the same dedup id or receipt"
            ) from exc
        except StoreError as exc:
            if reads:
                raise
            raise OutcomeUnknown(
                f"queue {self.store.url}: this writer's lease ran out before the call was "
                f"answered and could not be renewed ({exc}); the call may or may not have been "
                "applied: retry with the same dedup id or receipt"
            ) from exc

    async def _renew_loop(self, every: float) -> None:
        """Renew every ``every`` seconds until closing. Stopped between renewals, never in
        the middle of one: a store request abandoned mid-flight outlives its event loop."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), every)
                return
            try:
                await self._lease.renew()
            except WriterFenced as exc:
                self.commit.fail(exc, in_flight=False)
                return
            except S3QError as exc:
                logger.warning("writer lease renewal for %s failed: %s", self.store.url, exc)

    @_counted
    async def configure(self, settings: dict[str, Setting]) -> dict[str, Setting]:
        """Change persisted settings of the open queue: in force at once, logged like those
        an ``open`` gives. The persisted settings now in force."""
        self._core.check()
        if not settings:  # a read of the settings (the SQS endpoint's, on every call)
            return queue_settings(self.config)
        check_settings(settings)
        config = with_settings(self.config, settings)
        changed = {k: v for k, v in settings.items() if getattr(self.config, k) != v}
        self._check_partitions(changed, queue_settings(self.config))
        self.config = config
        if changed:
            self._core.notify()  # a long poll re-reads the settings it depends on
            await self.commit.durable_after(self.commit.add(Configure(changed)))
        return queue_settings(self.config)

    # -- operations, each carried out by its part ------------------------------------------------

    @_counted
    async def enqueue(self, items: list[validate.Item], durability: str | None = None) -> list[str]:
        return await self._intake.enqueue(items, durability)

    @_counted
    async def enqueue_payloads(
        self, payloads: list[bytes], durability: str | None = None
    ) -> list[str]:
        """``enqueue`` of plain messages given as their payloads (``Intake``)."""
        return await self._intake.enqueue_payloads(payloads, durability)

    @_counted
    async def enqueue_staged(
        self, objects: list[StagedObject], token: str | None = None
    ) -> Sequence[str] | None:
        """Commit the messages of staged objects in one log object (``Intake``)."""
        return await self._intake.enqueue_staged(objects, token)

    @_counted
    async def dequeue(self, take: Take) -> list[Message]:
        return await self._leasing.dequeue(take)

    @_counted
    async def dequeue_pages(self, take: Take) -> Pages:
        return await self._leasing.dequeue_pages(take)

    @_counted
    async def lease(self, max_messages: int, visibility_timeout: float | None) -> list[Located]:
        """Lease like ``dequeue``, each message with where its payload lies (``Leasing``)."""
        return await self._leasing.lease(max_messages, visibility_timeout)

    @_read
    async def locate(self, ids: list[str]) -> dict[str, Located]:
        """The messages named (not completed) and where their payloads lie now."""
        return await self._leasing.locate(ids)

    @_counted
    async def complete(self, receipts: list[str]) -> None:
        await self._leasing.complete(receipts)

    @_counted
    async def fail(self, receipt: str, error: str | None) -> float | None:
        return await self._leasing.fail(receipt, error)

    @_counted
    async def release(self, receipts: list[str]) -> None:
        await self._leasing.release(receipts)

    @_counted
    async def extend(self, receipt: str, seconds: float, revive: bool = False) -> None:
        await self._leasing.extend(receipt, seconds, revive)

    async def changed(self, timeout: float) -> None:
        """Until the queue changes, at most ``timeout`` seconds (``Leasing.changed``)."""
        await self._leasing.changed(timeout)

    def stop_waiting(self) -> None:
        """Long polls end now with what is there, and later ones do not wait."""
        self._core.stop_waiting()

    def writing_since(self) -> float | None:
        """When the log object in flight began to be written (time.monotonic); None if none
        is."""
        return self._core.commit.writing_since

    def best_priority(self) -> int | None:
        """The highest priority a dequeue would deliver now, None if it would deliver nothing
        or the queue shares priorities (``delivery="fair"``)."""
        core = self._core
        if core.fair or self.failure is not None:
            return None
        return core.state.best_priority(core.clock(), core.config.max_attempts)

    @_read
    async def status(self, mid: str) -> MessageStatus:
        return await self._reads.status(mid)

    @_read
    async def stats(self) -> QueueStats:
        return await self._reads.stats()

    @_read
    async def peek(self, limit: int) -> list[Message]:
        return await self._reads.peek(limit)

    @_read
    async def dead_letters(self, limit: int) -> list[Message]:
        return await self._dead.listed(limit)

    @_counted
    async def redrive(self, ids: list[str] | None) -> int:
        return await self._dead.redrive(ids)

    @_counted
    async def discard(self, ids: list[str]) -> int:
        return await self._dead.discard(ids)

    @_counted
    async def purge(self) -> int:
        return await self._dead.purge()

    @_counted
    async def cleanup(self) -> int:
        return await self._upkeep.cleanup()

    @_counted
    async def compact(self) -> CompactionReport:
        """Checkpoint now, then collect garbage: for a tidy-minded caller or a long idle spell."""
        return await self._upkeep.compact()


def commit_window(store: Store, given: float | None) -> float:
    """The commit window of a writer of ``store``: the one given, else OBJECT_WINDOW on an
    object store (a PUT costs money and tens of ms) and none on a local directory or in
    memory (a write costs neither)."""
    if given is not None:
        return given
    return OBJECT_WINDOW if store_kind(store) == "object store" else 0.0


async def _finish_or_cancel(tasks: Iterable[asyncio.Task[Any] | None], timeout: float) -> None:
    """Let ``tasks`` finish within ``timeout``, cancel the rest, and retrieve every outcome
    (their failures are reported where they happen)."""
    running = [task for task in tasks if task is not None]
    if not running:
        return
    _, unfinished = await asyncio.wait(running, timeout=timeout)
    for task in unfinished:
        task.cancel()
    await asyncio.wait(running)
    for task in running:
        if not task.cancelled():
            task.exception()


async def _quietly(awaitable: Awaitable[object]) -> None:
    with contextlib.suppress(Exception):  # best effort on a writer that already failed
        await awaitable
