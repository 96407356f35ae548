"""The writer of one queue: its life cycle (open, recovery, close) and its operations.

Each operation is checked against the index, folded into it and added to the log by group
commit (``commit``); the caller is answered once it is durable. Checkpoints are scheduled by
``checkpointer`` and garbage is collected by ``collector``, beside the writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import secrets
import time
from array import array
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import Any, TypeVar

from . import collector, ids, log, snapshot, tables, validate
from .cache import ObjectCache
from .checkpointer import Checkpointer
from .commit import Batch, GroupCommit
from .config import (
    BUFFERED,
    FAIR,
    OBJECT_WINDOW,
    PERSISTED,
    QueueConfig,
    Setting,
    check_settings,
    queue_settings,
    with_settings,
)
from .errors import (
    InvalidArgument,
    MessageNotFound,
    QueueClosed,
    QueueFull,
    ReceiptExpired,
    S3QError,
    StoreError,
    WriterFenced,
)
from .lease import WriterLease, describe_holder, writer_lease
from .message import Message, MessageStatus, QueueStats
from .ops import (
    Append,
    Bury,
    CommitToken,
    Complete,
    Configure,
    Discard,
    Extend,
    Fail,
    Lease,
    Open,
    Prune,
    Purge,
    Redrive,
    Release,
    Relocate,
)
from .records import DONE, Record
from .snapshot import Located
from .staging import StagedObject
from .state import QueueState, blob_key
from .store import AlreadyExists, LocalStore, NotFound, Store

logger = logging.getLogger("s3q")

DEFAULT_SETTINGS = queue_settings(QueueConfig())

MAX_DEQUEUE = 10_000

Span = tuple[str, int, int]  # a payload: message id, offset, size


class Engine:
    """The single writer of one queue. Create with :meth:`open`."""

    def __init__(self, store: Store, config: QueueConfig) -> None:
        self.store = store
        self.config = config
        self.clock = config.clock
        self.state = QueueState()
        self.token = secrets.token_hex(8)
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
            self.clock,
            lambda op, seq: self.state.apply(op, seq),
            config.commit_timeout,
            window=commit_window(store, config.commit_window),
            on_seal=self._sealing,
            on_durable=self._sealed_durable,
            on_stop=self._notify,
        )
        self.checkpointer = Checkpointer(
            store, self.token, self.clock, config.checkpoint_ops, config.checkpoint_interval
        )
        self._cache = ObjectCache(config.payload_cache_bytes)
        self._renewer: asyncio.Task[None] | None = None
        self._no_waits = False  # stop_waiting() was called
        self._stopping = asyncio.Event()
        self._closed = False
        self._changed: asyncio.Future[None] | None = None
        self._collecting: asyncio.Task[collector.CompactionReport] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._blobs = itertools.count()
        self._receipts = itertools.count()
        self.staged_claims: set[str] = set()  # staged objects being committed: not orphans
        self.buffered_answers = 0  # messages whose enqueue was answered before it was durable
        self.deliveries: dict[int, int] = {}  # priority -> messages this writer delivered
        self.deliveries_noisy = 0  # of them, to noisy tenants (``tenants``)
        self.deliveries_quiet = 0  # and to the others

    # -- life cycle --------------------------------------------------------------------------

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
        cls, store: Store, config: QueueConfig, settings: dict[str, Setting] | None = None
    ) -> Engine:
        """Take the writer lease, rebuild the index from the log, fence older writers, and
        apply the queue's settings: those given (``settings``) are saved; the others are the
        saved ones, else the defaults."""
        engine = cls(store, config)
        try:
            await engine._lease.acquire()
            if engine._lease.renew_every is not None:  # kept alive through a long replay too
                engine._renewer = asyncio.create_task(engine._renew_loop(engine._lease.renew_every))
            await engine._recover()
            engine._check()  # fenced while recovering: the lease went to another writer
            await engine._apply_settings(settings or {})
        except BaseException:
            engine._closed = True
            engine._stopping.set()
            if engine._renewer is not None:
                await _quietly(engine._renewer)
            await _quietly(engine._lease.release())
            raise
        return engine

    async def close(self) -> None:
        """Finish the commits under way, then give up the lease: within ``commit_timeout``
        and one more second for the lease, however the store behaves (a lease not given back
        lapses by itself)."""
        if self._closed:
            return
        self._closed = True
        self.commit.flush()  # what waits for company is written now
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.commit_timeout

        def left() -> float:
            return max(0.0, deadline - loop.time())

        while self.commit.failure is None and (pending := self.commit.latest()) is not None:
            with contextlib.suppress(S3QError):
                await self.commit.durable_after(pending, timeout=left())
            if not pending.done.done():  # the store has not confirmed it: give up on it
                self.commit.abandon()
        self.commit.abandoned = True  # a write still being tried stops at its next failure
        # What is still running gets what is left of the time, then is cut short: a log
        # write already given up on, checkpoint writes and collection (whole objects each).
        await _finish_or_cancel([self.commit.task, *self._tasks, self._collecting], left())
        if self.commit.failure is None and self.checkpointer.behind(self.state):
            try:  # a clean shutdown leaves a checkpoint behind: the next open is fast
                async with asyncio.timeout(left()):
                    await self._checkpoint_now()
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
        self._cache.clear()
        self.state = QueueState()  # a closed queue object holds no memory worth mentioning
        await self.store.close()

    async def _recover(self) -> None:
        loaded = await snapshot.load(self.store)
        self.state = loaded.state
        self.checkpointer.recovered(
            self.state, loaded.checkpoints, loaded.first_at, loaded.replayed
        )
        durable = loaded.seq
        # Fence: the first record of this writer, at the first free sequence number.
        while True:
            seq = durable + 1
            now = self.clock()
            fence = Open(self.holder, now, None if self.state.queue else ids.new_queue())
            try:
                await self.store.put_new(
                    log.key(seq), log.encode(log.Header(seq, self.token, now, [fence]), [])
                )
            except AlreadyExists:  # an older writer is still committing: take its work in
                await self._replay(seq, await self.store.get(log.key(seq)))
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
            self._background(self._write_checkpoint(durable, data))

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
        if changed:
            await self.commit.durable_after(self.commit.add(Configure(changed)))

    async def _replay(self, seq: int, data: bytes) -> None:
        await snapshot.replay(self.store, self.state, seq, data)
        self.checkpointer.objects_since += 1

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

    @property
    def _fair(self) -> bool:
        """Whether priorities share deliveries (``delivery="fair"``) rather than the highest
        going first."""
        return self.config.delivery == FAIR

    # -- adding to the log ---------------------------------------------------------------------

    def _check(self) -> None:
        if self.commit.failure is not None:
            raise self.commit.failure
        if self._closed:
            raise QueueClosed(f"queue {self.store.url} is closed")

    def relocate(self, moves: list[tuple[str, bytes]]) -> None:
        """Copy live payloads forward into the batch being filled (for garbage collection)."""
        if self._closed or self.commit.failure is not None:
            return
        start = offset = self.commit.filling.size
        placed = []
        for mid, payload in moves:
            placed.append((mid, offset))
            offset += len(payload)
        made, payloads = [mid for mid, _ in moves], [payload for _, payload in moves]
        self.commit.add_payloads(Relocate(placed), made, payloads, offset - start)

    # -- checkpoints and garbage collection -------------------------------------------------------

    def _sealing(self, batch: Batch) -> bytearray | None:
        """``batch`` leaves for the store: prune if a checkpoint is due (the Prune rides the
        batch the checkpoint is taken at), and take that checkpoint."""
        if self.checkpointer.due(self.state):
            self._prune()
        return self.checkpointer.sealed(batch.seq, self.state)

    def _sealed_durable(self, batch: Batch, checkpoint: bytearray | None) -> None:
        if batch.size:  # payloads rode it: deliveries of them read them from here
            self._cache.put(batch.seq, batch.data)
        if checkpoint is not None:
            self._background(self._write_checkpoint(batch.seq, checkpoint))

    def _prune(self) -> tuple[int, Batch | None]:
        """Forget what retention and the dedup window let go of, through the log."""
        config, now = self.config, self.clock()
        if not self.state.prunable(now, config.completed_retention, config.dedup_window):
            return 0, None
        batch, pruned = self.commit.add_counted(
            Prune(now, config.completed_retention, config.dedup_window)
        )
        return pruned, batch

    async def _checkpoint_now(self, replace: bool = False) -> None:
        """Checkpoint the durable log; the caller made sure nothing is in flight."""
        seq = self.commit.durable
        await self.checkpointer.write(seq, self.checkpointer.take(seq, self.state), replace)

    async def _write_checkpoint(self, seq: int, data: bytearray) -> None:
        await self.checkpointer.write(seq, data)
        await self._collect_soon()

    async def _collect_soon(self) -> None:
        """One garbage collection pass at a time, never in the way of commits."""
        if self._collecting is None or self._collecting.done():
            self._collecting = asyncio.create_task(self._collect())
            await asyncio.wait([self._collecting])

    async def _collect(self) -> collector.CompactionReport:
        return await collector.collect(self)

    def _background(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("background work on %s failed: %s", self.store.url, task.exception())

    async def compact(self) -> collector.CompactionReport:
        """Checkpoint now, then collect garbage: for a tidy-minded caller or a long idle spell."""
        self._check()
        self._prune()
        while (pending := self.commit.latest()) is not None:
            await self.commit.durable_after(pending)
        await self._checkpoint_now()
        while self._tasks:
            await asyncio.wait(set(self._tasks))
        if self._collecting is not None:
            await asyncio.wait([self._collecting])
        report = await self._collect()
        if report.deleted_objects and self.commit.latest() is None:
            await self._checkpoint_now(replace=True)  # drop what was deleted from its list
        report.objects, report.bytes = await self.store.usage()
        return report

    # -- waking consumers ----------------------------------------------------------------------

    def stop_waiting(self) -> None:
        """Long polls end now with what is there, and later ones do not wait."""
        self._no_waits = True
        self._notify()

    def _notify(self) -> None:
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)
        self._changed = None

    async def _wait_change(self, timeout: float) -> None:
        if self._changed is None:
            self._changed = asyncio.get_running_loop().create_future()
        await asyncio.wait([self._changed], timeout=timeout)

    # -- operations ----------------------------------------------------------------------------

    async def enqueue(self, items: list[validate.Item], durability: str | None = None) -> list[str]:
        self._check()
        self._admit(items)
        blobs: dict[int, str] = {}
        if any(len(it.payload) > self.config.large_payload for it in items):
            blobs = await self._write_blobs(items)
            self._check()
            try:
                self._admit(items)  # the queue may have filled while the blobs were written
            except QueueFull:
                for key in blobs.values():
                    self._background(self.store.delete(key))
                raise
        state, now, window = self.state, self.clock(), self.config.dedup_window
        answers: list[str | int] = []  # a duplicate's first id, or a new message's place
        fresh: list[validate.Item] = []
        fresh_blobs: dict[int, str] = {}
        seen: dict[str, int] = {}
        for index, it in enumerate(items):
            if it.dedup_id is not None:
                known: str | int | None = state.dedup_hit(it.dedup_id, now, window)
                if known is None:
                    known = seen.get(it.dedup_id)
                if known is not None:
                    answers.append(known)
                    if index in blobs:  # a twin arrived while this blob was written
                        self._background(self.store.delete(blobs[index]))
                    continue
                seen[it.dedup_id] = len(fresh)
            if index in blobs:
                fresh_blobs[len(fresh)] = blobs[index]
            answers.append(len(fresh))
            fresh.append(it)
        if not fresh:  # all duplicates: answer once the originals are durable
            await self._answer_after(self.commit.latest(), 0, durability)
            return [a for a in answers if isinstance(a, str)]
        together = _runs_together(
            [it.priority for it in fresh],
            (it.group for it in fresh),
            [it.tenant for it in fresh],
        )
        if together is not None:
            order, where = together
            fresh = [fresh[i] for i in order]
            fresh_blobs = {where[i]: key for i, key in fresh_blobs.items()}
            answers = [where[a] if isinstance(a, int) else a for a in answers]
        batch = self.commit.filling
        first = batch.places(len(fresh))
        made = [ids.make(self.state.queue, batch.seq, first + i) for i in range(len(fresh))]
        op = Append(
            first,
            now,
            batch.size,
            [len(it.payload) for it in fresh],
            priorities=_column([it.priority for it in fresh], 0),
            delays=_column([it.delay for it in fresh], 0.0),
            groups=_column([it.group for it in fresh], None),
            dedup_ids=_column([it.dedup_id for it in fresh], None),
            attributes=_column([it.attributes or None for it in fresh], None),
            blobs=fresh_blobs or None,
            tenants=_column([it.tenant for it in fresh], None),
        )
        carried = [i for i in range(len(fresh)) if i not in fresh_blobs]
        payloads = [fresh[i].payload for i in carried]
        size = sum(map(len, payloads))
        await self._append(op, [made[i] for i in carried], payloads, size, durability)
        return [made[a] if isinstance(a, int) else a for a in answers]

    async def enqueue_payloads(
        self, payloads: list[bytes], durability: str | None = None
    ) -> list[str]:
        """``enqueue`` of plain messages (priority 0, no delay, group, dedup id or
        attributes) given as their payloads: the batch path, with no object per message."""
        sizes = list(map(len, payloads))
        if max(sizes) > self.config.large_payload:
            return await self.enqueue(
                [validate.Item(p, 0, 0.0, None, None, None) for p in payloads], durability
            )
        self._check()
        self._room(len(payloads))
        batch = self.commit.filling
        first = batch.places(len(payloads))
        made = ids.make_many(self.state.queue, batch.seq, first, len(payloads))
        size = sum(sizes)
        op = Append(first, self.clock(), batch.size, sizes)
        await self._append(op, made, payloads, size, durability)
        return made

    async def _append(
        self,
        op: Append,
        made: list[str],
        payloads: list[bytes],
        size: int,
        durability: str | None,
    ) -> None:
        """Commit ``op``, carrying ``payloads`` (``size`` bytes) of the messages ``made``
        into the batch being filled; return once the caller may be answered."""
        batch = self.commit.add_payloads(op, made, payloads, size)
        self._notify()
        await self._answer_after(batch, len(op.sizes), durability)

    async def _answer_after(
        self, batch: Batch | None, messages: int, durability: str | None
    ) -> None:
        """Return when an enqueue riding ``batch`` may be answered: once the batch is durable;
        at once if buffered (``durability``, else the queue's) and the writer keeps up
        (``BUFFER_WEIGHT``)."""
        buffered = (durability or self.config.durability) == BUFFERED
        if buffered and not self.commit.backlogged():
            self.buffered_answers += messages
            return
        await self.commit.durable_after(batch)

    def _admit(self, items: list[validate.Item]) -> None:
        """Raise QueueFull unless the new messages among ``items`` fit."""
        state, config = self.state, self.config
        if config.max_queue_depth is None:
            return
        now = self.clock()
        fresh = sum(
            1
            for it in items
            if it.dedup_id is None or not state.dedup_hit(it.dedup_id, now, config.dedup_window)
        )
        self._room(fresh)

    def _room(self, fresh: int) -> None:
        """Raise QueueFull unless ``fresh`` more messages fit."""
        state, config = self.state, self.config
        if config.max_queue_depth is not None and state.live + fresh > config.max_queue_depth:
            raise QueueFull(
                f"queue {self.store.url} holds {state.live} messages; max_queue_depth is "
                f"{config.max_queue_depth}, so {fresh} more do not fit"
            )

    async def _write_blobs(self, items: list[validate.Item]) -> dict[int, str]:
        """Payloads over ``large_payload`` go to objects of their own, before their enqueue:
        the key of each, by its index in ``items``."""
        threshold = self.config.large_payload
        large = [i for i, it in enumerate(items) if len(it.payload) > threshold]
        prefix = f"{int(time.time() * 1000):012x}{self.token[:8]}"  # names sort by time
        keys = {i: blob_key(f"{prefix}{next(self._blobs):x}") for i in large}
        await asyncio.gather(*(self.store.put(keys[i], items[i].payload) for i in large))
        return keys

    # -- bulk loads and located leases (the Spark source) ------------------------------------

    async def enqueue_staged(
        self, objects: list[StagedObject], token: str | None = None
    ) -> Sequence[str] | None:
        """Commit the messages of staged objects in one log object (all or none), with the
        commit ``token`` if given. Their ids (the first ids of dedup hits), or None if
        ``token`` was committed before: a replay, which enqueues nothing."""
        self._check()
        if token is not None and token in self.state.tokens:
            await self.commit.durable_after(self.commit.latest())
            return None
        for obj in objects:
            validate.staged(obj, self.config.max_message_size, self.config.max_delay)
        keys = [obj.key for obj in objects]
        known = set(self.state.payloads.staged_refs) | self.state.payloads.garbage_keys()
        reused = [key for key in keys if key in known or key in self.staged_claims]
        if reused or len(set(keys)) != len(keys):
            raise InvalidArgument(f"staged object(s) committed twice: {(reused or keys)[:3]}")
        self.staged_claims.update(keys)  # from here on the collector leaves them alone
        try:
            if self._collecting is not None and not self._collecting.done():
                await asyncio.wait([self._collecting])  # it may have chosen them already
            await asyncio.gather(*(self._check_staged(obj) for obj in objects))
            self._check()
            if token is not None and token in self.state.tokens:
                return None
            return await self._commit_staged(objects, token)
        finally:
            self.staged_claims.difference_update(keys)

    async def _check_staged(self, obj: StagedObject) -> None:
        """The staged object exists and is as long as its description says."""
        try:
            tail = await self.store.get_range(obj.key, max(obj.size - 1, 0), obj.size)
        except NotFound:
            raise StoreError(
                f"staged object {obj.key} of {self.store.url} is gone: uncommitted staged "
                "objects are collected after a while; stage the data again"
            ) from None
        if len(tail) != min(obj.size, 1):
            raise InvalidArgument(f"staged object {obj.key} is shorter than {obj.size} bytes")

    async def _commit_staged(self, objects: list[StagedObject], token: str | None) -> Sequence[str]:
        state, config, now = self.state, self.config, self.clock()
        kept, answers = self._new_rows(objects, now)
        fresh = sum(
            len(obj) if rows is None else len(rows) for obj, rows in zip(objects, kept, strict=True)
        )
        if config.max_queue_depth is not None and state.live + fresh > config.max_queue_depth:
            raise QueueFull(
                f"queue {self.store.url} holds {state.live} messages; max_queue_depth is "
                f"{config.max_queue_depth}, so {fresh} more do not fit"
            )
        batch = self.commit.filling  # no await from here on: all ride one log object
        start = batch.places(0)
        reordered: list[tuple[int, list[int]]] = []  # (where an object's rows start, moves)
        for obj, rows in zip(objects, kept, strict=True):
            every = range(len(obj)) if rows is None else rows
            first = batch.places(len(every))
            p, g, t = obj.priorities, obj.groups, obj.tenants
            together = (p or t) and _runs_together(
                [p[r] for r in every] if p else [0] * len(every),
                g and (g[r] for r in every),
                t and [t[r] for r in every],
            )
            if together:
                order, where = together
                rows = [every[j] for j in order]
                reordered.append((first - start, where))
            self.commit.add(_staged_append(obj, rows, first, now))
        if token is not None:
            self.commit.add(CommitToken(token))
        self._notify()
        await self.commit.durable_after(batch)
        places: range | array[int] = range(start, start + fresh)
        if reordered:  # the places of a reordered object's rows, in the order given
            places = array("Q", places)
            for at, where in reordered:
                places[at : at + len(where)] = array("Q", (start + at + w for w in where))
        made = ids.Ids(state.queue, batch.seq, places)
        if answers is None:
            return made
        return [a if isinstance(a, str) else made[a] for a in answers]

    def _new_rows(
        self, objects: list[StagedObject], now: float
    ) -> tuple[list[list[int] | None], list[str | int] | None]:
        """The rows of each staged object that are new messages (None: all of them), and
        what answers each row: a duplicate's first id, or a new message's index among the new
        (None: none is a duplicate, so each answers with its own)."""
        if not any(obj.dedup_ids for obj in objects):
            return [None] * len(objects), None
        window = self.config.dedup_window
        answers: list[str | int] = []
        seen: dict[str, int] = {}
        kept: list[list[int] | None] = []
        fresh = 0
        for obj in objects:
            rows: list[int] = []
            dedup_ids = obj.dedup_ids
            for i in range(len(obj)):
                dedup = dedup_ids[i] if dedup_ids else None
                if dedup is not None:
                    hit: str | int | None = seen.get(dedup)
                    if hit is None:
                        hit = self.state.dedup_hit(dedup, now, window)
                    if hit is not None:
                        answers.append(hit)
                        continue
                    seen[dedup] = fresh
                answers.append(fresh)
                rows.append(i)
                fresh += 1
            kept.append(rows)
        return kept, answers

    async def lease(self, max_messages: int, visibility_timeout: float | None) -> list[Located]:
        """Lease up to ``max_messages`` like ``dequeue``, without reading their payloads:
        each comes with where its payload lies, for a reader of the store to fetch."""
        self._check()
        timeout = (
            self.config.visibility_timeout if visibility_timeout is None else visibility_timeout
        )
        chosen, buried = await self._select(max_messages)
        now = self.clock()
        if not chosen:
            await self.commit.durable_after(buried)
            return []
        leases = self._leases(chosen, now + timeout)
        where = [snapshot.location(rec) for rec in chosen]  # durable once the lease is
        await self.commit.durable_after(self.commit.add(Lease(leases, now)))
        return [
            Located(self._message(rec, b""), place)
            for rec, place, (_, receipt, _) in zip(chosen, where, leases, strict=True)
            if self._still_held(rec, receipt)
        ]

    async def locate(self, ids: list[str]) -> dict[str, Located]:
        """The messages named (not completed) and where their payloads lie now."""
        self._check()
        found = {}
        for mid in ids:
            rec = await self._find(mid)
            if rec is not None and rec.state != DONE:
                found[mid] = Located(self._message(rec, b""), snapshot.location(rec))
        await self.commit.durable_after(self.commit.latest())  # a relocation may be on its way
        return found

    async def dequeue(
        self, max_messages: int, visibility_timeout: float | None, wait: float, per_group: int = 1
    ) -> list[Message]:
        self._check()
        timeout = (
            self.config.visibility_timeout if visibility_timeout is None else visibility_timeout
        )
        deadline = time.monotonic() + wait
        while True:
            self._check()
            chosen, buried = await self._select(max_messages, per_group)
            now = self.clock()
            if chosen:
                leases = self._leases(chosen, now + timeout)
                batch = self.commit.add(Lease(leases, now))
                payloads, _ = await asyncio.gather(
                    self._payloads(chosen), self.commit.durable_after(batch)
                )
                return [
                    self._message(rec, payload)
                    for rec, payload, (_, receipt, _) in zip(chosen, payloads, leases, strict=True)
                    if self._still_held(rec, receipt)
                ]
            remaining = 0.0 if self._no_waits else deadline - time.monotonic()
            if remaining <= 0:
                await self.commit.durable_after(buried)
                return []
            upcoming = self.state.next_change()
            if upcoming is not None:
                remaining = min(remaining, max(upcoming - now, 0.001))
            await self._wait_change(remaining)

    def _leases(self, chosen: list[Record], until: float) -> list[tuple[str, str, float]]:
        """A new lease of each of ``chosen``: (id, receipt, until)."""
        prefix = self.token[:6]
        return [(rec.id, f"{rec.id}~{prefix}{next(self._receipts):x}", until) for rec in chosen]

    def _still_held(self, rec: Record, receipt: str) -> bool:
        """Whether the lease this call made on ``rec`` still runs, now that it is durable.

        A commit slower than the visibility timeout lets the lease lapse while the caller
        waits, and the message may have gone to another consumer meanwhile: such a message is
        left out of the answer (its delivery counts as an attempt), never handed out twice.
        """
        return rec.receipt == receipt and rec.lease_until > self.clock()

    async def _select(self, limit: int, per_group: int = 1) -> tuple[list[Record], Batch | None]:
        """Up to ``limit`` deliverable messages, after burying those whose last lease ran out
        of attempts; the tables of the runs they come from read back first."""
        batch = None
        attempts = self.config.max_attempts
        while True:
            await self._fill(self.state.wanted(limit, self._fair))
            now = self.clock()
            bury = self.state.expire(now, attempts)
            while bury:  # before choosing: a buried head of a group frees the next one
                batch = self._bury(bury, now)
                bury = self.state.expire(now, attempts)
            chosen, bury = self.state.select(now, limit, attempts, per_group, self._fair)
            if bury:  # (none: all expired above, at the same ``now``)
                batch = self._bury(bury, now)
            # Other callers may have taken the members read back for while they were read:
            # read on while the head holds runs without tables and nothing was chosen.
            if chosen or not limit or not self.state.wanted(limit, self._fair):
                noisy = self.state.tenants.noisy_names(now)
                for rec in chosen:
                    self.deliveries[rec.priority] = self.deliveries.get(rec.priority, 0) + 1
                    if rec.tenant in noisy:
                        self.deliveries_noisy += 1
                    else:
                        self.deliveries_quiet += 1
                return chosen, batch

    def _bury(self, recs: list[Record], now: float) -> Batch:
        error = f"lease expired after {self.config.max_attempts} attempt(s)"
        return self.commit.add(Bury([rec.id for rec in recs], error, now))

    async def _fill(self, seqs: set[int]) -> None:
        """Read back the run tables of log objects ``seqs``."""
        if seqs:
            await tables.fill(self.store, self.state, seqs)

    async def _find(self, mid: str) -> Record | None:
        seq = self.state.wanted_for(mid)
        if seq is not None:
            await self._fill({seq})
        return self.state.find(mid)

    async def _sweep(self) -> None:
        """Bury expired leases with no attempts left, so reads report them as dead."""
        _, batch = await self._select(0)
        await self.commit.durable_after(batch)

    async def complete(self, receipts: list[str]) -> None:
        self._check()
        recs = self._holders(receipts)
        batch = self.commit.add(Complete(list(dict.fromkeys(rec.id for rec in recs)), self.clock()))
        self._notify()  # a group's next message may be deliverable now
        await self.commit.durable_after(batch)

    async def fail(self, receipt: str, error: str | None) -> float | None:
        self._check()
        (rec,) = self._holders([receipt])
        now = self.clock()
        retry_at = None
        if rec.attempts < self.config.max_attempts:
            retry_at = now + self._backoff(rec.attempts)
        batch = self.commit.add(Fail(rec.id, error, retry_at, now))
        self._notify()
        await self.commit.durable_after(batch)
        return retry_at

    async def release(self, receipts: list[str]) -> None:
        self._check()
        recs = self._holders(receipts)
        batch = self.commit.add(Release(list(dict.fromkeys(rec.id for rec in recs))))
        self._notify()
        await self.commit.durable_after(batch)

    async def extend(self, receipt: str, seconds: float, revive: bool = False) -> None:
        self._check()
        (rec,) = self._holders([receipt])
        now = self.clock()
        if rec.lease_until <= now and not revive:
            raise ReceiptExpired(f"the lease of message {rec.id} has already expired")
        batch = self.commit.add(Extend(rec.id, now + seconds))
        if seconds == 0:
            self._notify()
        await self.commit.durable_after(batch)

    def _holders(self, receipts: Iterable[str]) -> list[Record]:
        recs = []
        for receipt in receipts:
            rec = self.state.receipt_holder(receipt)
            if rec is None:
                raise ReceiptExpired(
                    f"receipt {receipt!r} is unknown or stale: the message was completed, "
                    "dead-lettered, or delivered again after its lease expired"
                )
            recs.append(rec)
        return recs

    def _backoff(self, attempts: int) -> float:
        """Exponential in the attempts made, capped, with equal jitter."""
        base = self.config.retry_delay * float(2 ** min(attempts - 1, 62))
        delay = min(self.config.retry_delay_max, base)
        return delay / 2 + random.uniform(0, delay / 2)

    async def status(self, mid: str) -> MessageStatus:
        self._check()
        await self._sweep()
        rec = await self._find(mid)
        now, retention = self.clock(), self.config.completed_retention
        if rec is None:
            at = self.state.completed_at(mid)
            if at is not None and at + retention > now:
                return MessageStatus.COMPLETED
        elif rec.state != DONE or rec.finished_at + retention > now:
            return self.state.status(rec, now)
        raise MessageNotFound(f"no message {mid!r} in queue {self.store.url}")

    async def stats(self) -> QueueStats:
        self._check()
        await self._sweep()
        now = self.clock()
        counts = self.state.counts(now, self.config.completed_retention)
        quiet = self.state.quiet_counts(now)
        store = self.store.counts
        return QueueStats(
            pending=counts[MessageStatus.PENDING],
            delayed=counts[MessageStatus.DELAYED],
            processing=counts[MessageStatus.PROCESSING],
            retry=counts[MessageStatus.RETRY],
            completed=counts[MessageStatus.COMPLETED],
            dead=counts[MessageStatus.DEAD],
            total_enqueued=self.state.total_enqueued,
            commits=self.commits,
            mean_ops_per_commit=self.commit.ops_committed / self.commits if self.commits else 0.0,
            store_requests=store.requests,
            store_puts=store.puts,
            store_gets=store.gets,
            store_bytes_written=store.bytes_written,
            store_errors=store.errors,
            store_retries=store.retries,
            log_seq=self.commit.durable,
            commit_waits=self.commit.waits,
            store_lists=store.lists,
            store_deletes=store.deletes,
            buffered_answers=self.buffered_answers,
            deliveries_by_priority=dict(sorted(self.deliveries.items())),
            noisy_tenants=quiet.noisy_tenants,
            quiet_visible=quiet.visible,
            quiet_in_flight=quiet.in_flight,
            quiet_delayed=quiet.delayed,
            quiet_oldest_age=quiet.oldest_age,
            deliveries_noisy=self.deliveries_noisy,
            deliveries_quiet=self.deliveries_quiet,
        )

    async def peek(self, limit: int) -> list[Message]:
        self._check()
        await self._sweep()  # a lease run out on its last attempt is dead, not next
        await self._fill(self.state.wanted(limit, self._fair))
        recs = self.state.peek(self.clock(), limit, self.config.max_attempts, self._fair)
        payloads = await self._payloads(recs)
        return [self._message(rec, p, receipt=False) for rec, p in zip(recs, payloads, strict=True)]

    async def dead_letters(self, limit: int) -> list[Message]:
        self._check()
        await self._sweep()
        recs = list(itertools.islice(self.state.iter_dead(), limit))
        payloads = await self._payloads(recs)
        return [self._message(rec, p) for rec, p in zip(recs, payloads, strict=True)]

    async def redrive(self, ids: list[str] | None) -> int:
        self._check()
        await self._sweep()
        if ids is None:
            chosen = list(self.state.dead)
        else:
            chosen = list(dict.fromkeys(ids))
            for mid in chosen:
                if mid not in self.state.dead:
                    raise MessageNotFound(
                        f"message {mid!r} is not a dead letter of {self.store.url}"
                    )
        if not chosen:
            return 0
        batch = self.commit.add(Redrive(chosen, self.clock()))
        self._notify()
        await self.commit.durable_after(batch)
        return len(chosen)

    async def cleanup(self) -> int:
        self._check()
        pruned, batch = self._prune()
        await self.commit.durable_after(batch)
        return pruned

    async def purge(self) -> int:
        self._check()
        count = self.state.live + len(self.state.dead)
        batch = self.commit.add(Purge(self.clock()))
        self._cache.clear()
        await self.commit.durable_after(batch)
        return count

    async def discard(self, ids: list[str]) -> int:
        self._check()
        await self._sweep()
        chosen = list(dict.fromkeys(ids))
        for mid in chosen:
            if mid not in self.state.dead:
                raise MessageNotFound(f"message {mid!r} is not a dead letter of {self.store.url}")
        if not chosen:
            return 0
        await self.commit.durable_after(self.commit.add(Discard(chosen, self.clock())))
        return len(chosen)

    async def configure(self, settings: dict[str, Setting]) -> dict[str, Setting]:
        """Change persisted settings of the open queue: in force at once, logged like those
        an ``open`` gives. The persisted settings now in force."""
        self._check()
        check_settings(settings)
        config = with_settings(self.config, settings)
        changed = {k: v for k, v in settings.items() if getattr(self.config, k) != v}
        self.config = config
        if changed:
            self._notify()  # a long poll re-reads the settings it depends on
            await self.commit.durable_after(self.commit.add(Configure(changed)))
        return queue_settings(self.config)

    # -- payloads --------------------------------------------------------------------------------

    async def _payloads(self, recs: list[Record]) -> list[bytes]:
        """The payloads of ``recs``: from the batches in flight, the cache, or the store."""
        found: dict[str, bytes] = {}
        logged: dict[int, list[Span]] = {}
        wanted: dict[int, list[Span]] = {}
        staged: dict[str, list[Span]] = {}
        for rec in recs:
            span = (rec.id, rec.offset, rec.size)
            if rec.stage is not None:
                staged.setdefault(rec.stage, []).append(span)
            else:  # where it lies now: garbage collection may move it while we read
                logged.setdefault(rec.payload_seq if rec.offset >= 0 else -1, []).append(span)
        for seq, spans in logged.items():
            held = self.commit.held(seq) if seq >= 0 else None
            data = self._cache.get(seq) if seq >= 0 else None
            if held is not None and all(mid in held for mid, _, _ in spans):
                found.update((mid, held[mid]) for mid, _, _ in spans)
            elif data is not None:
                found.update((mid, data[at : at + size]) for mid, at, size in spans)
            else:
                wanted[seq] = spans
        if wanted:
            parts = await asyncio.gather(*(self.read_payloads(s, sp) for s, sp in wanted.items()))
            for part in parts:
                found.update(part)
        if staged:
            parts = await asyncio.gather(
                *(snapshot.read_spans(self.store, key, sp) for key, sp in staged.items())
            )
            for part in parts:
                found.update(part)
        return [found[rec.id] for rec in recs]

    async def read_payloads(self, seq: int, spans: list[Span]) -> dict[str, bytes]:
        """Payloads by id, given ``(id, offset, size)`` in log object ``seq``, in one ranged
        read (``seq`` -1: each in an object of its own)."""
        if seq < 0:
            blobs = await asyncio.gather(*(self.store.get(blob_key(mid)) for mid, _, _ in spans))
            return {mid: data for (mid, _, _), data in zip(spans, blobs, strict=True)}
        start = min(offset for _, offset, _ in spans)
        end = max(offset + size for _, offset, size in spans)
        data = await self.store.get_range(log.key(seq), start, end)
        return {mid: data[offset - start : offset - start + size] for mid, offset, size in spans}

    def _message(self, rec: Record, payload: bytes, receipt: bool = True) -> Message:
        return Message(
            id=rec.id,
            payload=payload,
            priority=rec.priority,
            attempts=rec.attempts,
            enqueued_at=rec.enqueued_at,
            receipt=rec.receipt if receipt else None,
            group=rec.group,
            dedup_id=rec.dedup_id,
            attributes=dict(rec.attributes or {}),
            last_error=rec.last_error,
            first_delivered_at=rec.first_leased_at or None,
            tenant=rec.tenant,
        )


def commit_window(store: Store, given: float | None) -> float:
    """The commit window of a writer of ``store``: the one given, else OBJECT_WINDOW on an
    object store (a PUT costs money and tens of ms) and none on a local directory or in
    memory (a write costs neither)."""
    if given is not None:
        return given
    if isinstance(store.base, LocalStore) or store.url.startswith("memory://"):
        return 0.0
    return OBJECT_WINDOW


T = TypeVar("T")


def _column(values: list[T], default: T) -> list[T] | None:
    """``values``, or None when every one is ``default`` (an absent column)."""
    return values if any(v != default for v in values) else None


def _runs_together(
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
