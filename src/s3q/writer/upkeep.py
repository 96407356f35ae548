"""Upkeep of one writer's queue: pruning, checkpoints and garbage collection, beside commits.

As a batch leaves for the store, a checkpoint is taken if one is due (``checkpointer``), after
a Prune of what retention and the dedup window let go of; once the batch is durable, the
checkpoint is written in the background, then garbage is collected (``collector``), one pass
at a time. Collection copies live stragglers forward into the log (``relocate``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ..config import QueueConfig
from ..errors import S3QError
from ..index.state import QueueState
from ..log.ops import Prune, Relocate
from ..message import CompactionReport
from ..store import Store
from . import collector
from .checkpointer import Checkpointer
from .commit import Batch
from .core import Core
from .history_retention import Horizon
from .payloads import Payloads, Span
from .retirement import retire

logger = logging.getLogger("s3q")


class Upkeep:
    """Checkpoints and collection of one writer; what ``collector`` needs of the writer."""

    def __init__(self, core: Core, checkpointer: Checkpointer, payloads: Payloads) -> None:
        self.core = core
        self.checkpointer = checkpointer
        self.payloads = payloads
        self.collecting: asyncio.Task[CompactionReport] | None = None

    # -- riding the commits ----------------------------------------------------------------------

    def sealing(self, batch: Batch) -> bytearray | None:
        """``batch`` leaves for the store: messages past the queue's retention are retired
        (the Retire rides ``batch``, so a queue only written to retires too); if a checkpoint
        is due as of it, prune (the Prune rides ``batch`` too) and take that checkpoint.
        Pruning happens only here and on request, so every due checkpoint, whatever made it
        due, must prune first."""
        retire(self.core)
        if not self.checkpointer.leaving(self.core.state):
            return None
        self.prune()
        return self.checkpointer.take(batch.seq, self.core.state)

    def sealed_durable(self, batch: Batch, checkpoint: bytearray | None) -> None:
        """``batch`` is durable: keep its payloads at hand, and write its checkpoint if any."""
        if batch.size:  # payloads rode it: deliveries of them read them from here
            self.core.cache.put(batch.seq, batch.data)
        if checkpoint is not None:
            self.core.background(self.write_checkpoint(batch.seq, checkpoint))

    def prune(self) -> tuple[int, Batch | None]:
        """Forget what retention and the dedup window let go of, through the log."""
        core = self.core
        config, now = core.config, core.clock()
        if not core.state.prunable(now, config.completed_retention, config.dedup_window):
            return 0, None
        batch, pruned = core.commit.add_counted(
            Prune(now, config.completed_retention, config.dedup_window)
        )
        return pruned, batch

    async def checkpoint_now(self, replace: bool = False) -> None:
        """Checkpoint the durable log; the caller made sure nothing is in flight. Refused
        while the writer is halted: its index may hold what never reached the log."""
        if (halted := self.core.commit.halted) is not None:
            raise halted
        seq = self.core.commit.durable
        await self.checkpointer.write(seq, self.checkpointer.take(seq, self.core.state), replace)

    async def write_checkpoint(self, seq: int, data: bytearray) -> None:
        """Write the checkpoint taken at ``seq``, then collect; one that fails (a full store,
        say) is due again a little later."""
        try:
            await self.checkpointer.write(seq, data)
        except S3QError:
            self.checkpointer.missed()
            raise
        await self._collect_soon()

    async def _collect_soon(self) -> None:
        """One garbage collection pass at a time, never in the way of commits."""
        if self.collecting is None or self.collecting.done():
            self.collecting = asyncio.create_task(collector.collect(self))
            self.collecting.add_done_callback(self._collection_done)
            await asyncio.wait([self.collecting])

    def _collection_done(self, task: asyncio.Task[CompactionReport]) -> None:
        """A pass that met a store fault is one line in the log: the next pass (after the
        next checkpoint) collects what it left."""
        if task.cancelled() or (exc := task.exception()) is None:
            return
        if isinstance(exc, S3QError):
            logger.warning("garbage collection of %s stopped: %s", self.store.url, exc)
        else:  # a bug: its traceback, once
            logger.error("garbage collection of %s failed", self.store.url, exc_info=exc)

    async def collected(self) -> None:
        """Once the collection pass under way, if any, is over."""
        if self.collecting is not None and not self.collecting.done():
            await asyncio.wait([self.collecting])

    # -- on request ------------------------------------------------------------------------------

    async def cleanup(self) -> int:
        self.core.check()
        pruned, batch = self.prune()
        await self.core.commit.durable_after(batch)
        return pruned

    async def compact(self) -> CompactionReport:
        """Checkpoint now, then collect garbage: for a tidy-minded caller or a long idle spell."""
        core = self.core
        core.check()
        self.prune()
        while (pending := core.commit.latest()) is not None:
            await core.commit.durable_after(pending)
        await self.checkpoint_now()
        while core.tasks:
            await asyncio.wait(set(core.tasks))
        await self.collected()
        report = await collector.collect(self)
        if report.deleted_objects and core.commit.latest() is None:
            await self.checkpoint_now(replace=True)  # drop what was deleted from its list
        report.objects, report.bytes = await core.store.usage()
        return report

    # -- what collection needs (``collector.Writer``) ---------------------------------------------

    @property
    def store(self) -> Store:
        return self.core.store

    @property
    def config(self) -> QueueConfig:
        return self.core.config

    @property
    def clock(self) -> Callable[[], float]:
        return self.core.clock

    @property
    def state(self) -> QueueState:
        return self.core.state

    @property
    def horizon(self) -> Horizon:
        return self.core.horizon

    @property
    def staged_claims(self) -> set[str]:
        return self.core.staged_claims

    @property
    def checkpoints(self) -> dict[int, float]:
        return self.checkpointer.known

    async def checkpoint_taken_at(self, seq: int) -> float | None:
        return await self.checkpointer.taken_at(seq)

    async def read_payloads(self, seq: int, spans: list[Span]) -> dict[str, bytes]:
        return await self.payloads.read(seq, spans)

    def relocate(self, moves: list[tuple[str, bytes]]) -> None:
        """Copy live payloads forward into the batch being filled (for garbage collection)."""
        core = self.core
        if core.closed or core.commit.halted is not None:
            return
        start = offset = core.commit.filling.size
        placed = []
        for mid, payload in moves:
            placed.append((mid, offset))
            offset += len(payload)
        made, payloads = [mid for mid, _ in moves], [payload for _, payload in moves]
        core.commit.add_payloads(Relocate(placed), made, payloads, offset - start)
