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
import functools
import logging
import secrets
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from .. import validate
from ..config import (
    OBJECT_WINDOW,
    QueueConfig,
    Setting,
    check_settings,
    queue_settings,
    with_settings,
)
from ..lease import WriterLease, describe_holder, writer_lease
from ..log import stamps
from ..log.ops import Configure
from ..log.staging import StagedObject
from ..message import CompactionReport, Message, MessageStatus, QueueStats
from ..snapshot import Located
from ..store import Store, store_kind
from ..wire.pages import Pages
from .checkpointer import Checkpointer
from .commit import GroupCommit
from .core import Core
from .dead_letters import DeadLetters
from .intake import Intake
from .leasing import Leasing, Take
from .lifecycle import Lifecycle
from .payloads import Payloads
from .reads import Reads
from .upkeep import Upkeep

logger = logging.getLogger("s3q")

P = ParamSpec("P")
R = TypeVar("R")


def _counted(
    method: Callable[Concatenate[Engine, P], Awaitable[R]],
) -> Callable[Concatenate[Engine, P], Coroutine[Any, Any, R]]:
    """An operation that may change the queue, counted as a call under way while it runs
    (``Core.call_began``), and answered only while the writer's lease runs (``_still_leading``)."""
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
        await self._core.call_began()
        try:
            result = await method(self, *args, **kwargs)
            if not self._lease.runs():
                await self._still_leading(reads)
            return result
        finally:
            self._core.call_ended()

    return counted


class Engine(Lifecycle):
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
            self,  # (its hooks: Lifecycle's)
            config.commit_timeout,
            window=commit_window(store, config.commit_window),
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
        if not config.retention:
            self.state.ages.stop()  # (its ages are kept again once it has retention)
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
