"""Acknowledgements: completions gathered and made durable in batches."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from ..errors import ReceiptExpired
from ..message import Message
from ..surface import AsyncQueueSurface
from .hooks import Done, Hooks
from .leases import Leases
from .stop import Stop

__all__ = ["ACK_BATCH", "Acks"]

logger = logging.getLogger("s3q.worker")

ACK_BATCH = 500  # acknowledgements that are flushed without waiting for ack_interval


class Acks:
    """Completions waiting for their acknowledgement, which one ``complete_batch`` makes durable
    once ``interval`` seconds passed or ACK_BATCH gathered, unless the next dequeue takes them
    first (``ride``: they are completed in its commit)."""

    def __init__(
        self, aq: AsyncQueueSurface, interval: float, leases: Leases, hooks: Hooks, stop: Stop
    ) -> None:
        self._aq = aq
        self._interval = interval
        self._leases = leases
        self._hooks = hooks
        self._stop = stop
        self._done: list[Done] = []
        self._pending = asyncio.Event()
        self._now = asyncio.Event()
        self._closing = False

    def add(self, msg: Message, duration: float, result: Any) -> None:
        """A handler returned ``result`` after ``duration`` seconds: acknowledge ``msg``."""
        self._done.append((msg, duration, result))
        self._pending.set()
        if len(self._done) >= ACK_BATCH:
            self._now.set()

    def ride(self) -> list[Done]:
        """The completions waiting, taken to be acknowledged by a dequeue (``dequeue``'s
        ``complete``); the caller reports its outcome with ``rode``."""
        batch, self._done = self._done, []
        self._leases.drop([msg for msg, _, _ in batch])
        return batch

    async def rode(self, batch: list[Done], error: BaseException | None) -> None:
        """The dequeue that carried ``batch`` returned (``error`` None: the completions are
        durable) or raised ``error`` (a stale receipt among them: nothing was done, so they
        are acknowledged as a flush would)."""
        if error is None:
            self._hooks.completed(batch)
        elif isinstance(error, ReceiptExpired):
            await self._flush(batch)
        else:
            self._stop.fatal(error)

    def close(self) -> None:
        """Flush what is left at once; :meth:`run` then returns."""
        self._closing = True
        self._pending.set()
        self._now.set()

    async def run(self) -> None:
        """Acknowledge completions in batches until :meth:`close`."""
        while True:
            if not self._done:
                if self._closing:
                    return
                self._pending.clear()
                await self._pending.wait()
                continue
            if len(self._done) < ACK_BATCH and not self._closing and self._interval:
                self._now.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._interval):
                        await self._now.wait()
            batch, self._done = self._done, []
            await self._flush(batch)

    async def _flush(self, batch: list[Done]) -> None:
        msgs = [msg for msg, _, _ in batch]
        self._leases.drop(msgs)
        try:
            await self._aq.complete_batch(msgs)
            done = batch
        except ReceiptExpired:
            # All or none: find the stale ones, complete the rest in one more commit.
            results = await asyncio.gather(
                *(self._aq.complete(msg) for msg in msgs), return_exceptions=True
            )
            done = []
            for item, res in zip(batch, results, strict=True):
                if res is None:
                    done.append(item)
                elif isinstance(res, ReceiptExpired):
                    logger.warning(
                        "lease of message %s was lost before its completion; "
                        "it may be processed again: %s",
                        item[0].id,
                        res,
                    )
                else:
                    self._stop.fatal(res)
        except Exception as exc:
            self._stop.fatal(exc)
            return
        self._hooks.completed(done)
