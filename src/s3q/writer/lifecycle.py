"""A writer's life cycle: open (the lease taken, the index read back from the log, older
writers fenced, the settings applied), the lease renewed, a pause while the store is full, and
close; and what group commit calls back into (``commit.CommitHooks``).

:class:`Lifecycle` is the base of :class:`~s3q.writer.engine.Engine`, which makes the parts it
names and carries the queue's operations.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Self

from .. import snapshot
from ..config import PERSISTED, QueueConfig, Setting, queue_settings, with_settings
from ..errors import InvalidConfig, OutcomeUnknown, S3QError, StoreError, WriterFenced
from ..index.state import QueueState
from ..lease import WriterLease
from ..log import ids, segment
from ..log.ops import AnyOp, Configure, Open
from ..log.stamps import StampClock
from ..store import AlreadyExists, Store
from .checkpointer import Checkpointer
from .commit import COMMIT_BACKOFF, Batch, GroupCommit
from .core import Core
from .upkeep import Upkeep

logger = logging.getLogger("s3q")

DEFAULT_SETTINGS = queue_settings(QueueConfig())


class Lifecycle:
    """The life of one queue's writer, from its open to its close."""

    store: Store
    clock: Callable[[], float]
    token: str
    holder: str
    stamps: StampClock
    commit: GroupCommit
    checkpointer: Checkpointer
    _lease: WriterLease
    _core: Core
    _upkeep: Upkeep
    _renewer: asyncio.Task[None] | None
    _rereading: asyncio.Task[None] | None
    _opened_with: QueueConfig  # the settings in force once opened, before any configure
    _stopping: asyncio.Event

    def __init__(self, store: Store, config: QueueConfig) -> None:
        raise NotImplementedError  # (Engine makes the parts)

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

    # -- what group commit calls back into (commit.CommitHooks) --------------------------------

    def fold(self, op: AnyOp, seq: int) -> int:
        """Fold ``op``, going into log object ``seq``, into the index."""
        return self.state.apply(op, seq)

    def sealing(self, batch: Batch) -> Any:
        """``batch`` is being sealed: upkeep may add to it (a checkpoint's mark)."""
        return self._upkeep.sealing(batch)

    def durable(self, batch: Batch, sealed: Any) -> None:
        """``batch`` is in the log."""
        self._upkeep.sealed_durable(batch, sealed)

    def stopped(self) -> None:
        """The writer stopped: long polls end."""
        self._core.notify()

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
    ) -> Self:
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
        if loaded.torn is not None:  # (this writer holds the queue: no other writes there)
            logger.warning(
                "log object %d of %s was cut short by a crash before it was durable (never "
                "acknowledged): removed",
                loaded.torn,
                self.store.url,
            )
            await self.store.delete(segment.key(loaded.torn))
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

    def full(self) -> None:
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
