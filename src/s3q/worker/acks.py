"""Acknowledgements: completions gathered and made durable in batches."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from ..errors import ReceiptExpired
from ..message import Message, MessageStatus
from ..surface import AsyncQueueSurface
from .hooks import Done, Hooks
from .leases import Leases
from .retry import Backoff, rides_out
from .stop import Stop

__all__ = ["ACK_BATCH", "Acks"]

logger = logging.getLogger("s3q.worker")

ACK_BATCH = 500  # acknowledgements that are flushed without waiting for ack_interval


class Acks:
    """Completions waiting for their acknowledgement, which one ``complete_batch`` makes durable
    once ``interval`` seconds passed or ACK_BATCH gathered, unless the next dequeue takes them
    first (``ride``: they are completed in its commit).

    A completion whose call fails on an error the worker rides out (``remote``: through a
    broker; see :func:`.retry.rides_out`) is tried again after a pause, until the worker's
    grace runs out once it is stopping; one found stale afterwards was completed by the try
    whose outcome was unknown (its status says so), or its lease ran out and the message will
    be delivered again (at least once)."""

    def __init__(
        self,
        aq: AsyncQueueSurface,
        interval: float,
        leases: Leases,
        hooks: Hooks,
        stop: Stop,
        remote: bool = False,
    ) -> None:
        self._aq = aq
        self._remote = remote
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
        durable) or raised ``error``: a stale receipt among them (nothing was done, so they
        are acknowledged as a flush would), or an error ridden out (they wait for the next
        dequeue or flush again)."""
        if error is None:
            self._hooks.completed(batch)
        elif isinstance(error, ReceiptExpired):
            await self._flush(batch)
        elif not rides_out(error, self._remote):
            self._stop.fatal(error)
        elif self._closing:
            await self._flush(batch)
        else:  # not done, or not known to be: the next dequeue (or a flush) tries them again
            self._done[:0] = batch
            self._pending.set()

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
        """Acknowledge ``batch`` in one commit, or one call per message if a receipt among
        them is stale; what fails on an error ridden out is tried again after a pause."""
        self._leases.drop(msg for msg, _, _ in batch)
        backoff = Backoff("acknowledging completions", self._stop.queue)
        while batch:
            again: list[Done] = []
            failure: BaseException | None = None
            try:
                await self._aq.complete_batch([msg for msg, _, _ in batch])
                self._hooks.completed(batch)
                return
            except ReceiptExpired:
                # All or none: find the stale ones, complete the rest in one more commit.
                results = await asyncio.gather(
                    *(self._aq.complete(msg) for msg, _, _ in batch), return_exceptions=True
                )
                done: list[Done] = []
                for item, res in zip(batch, results, strict=True):
                    if res is None:
                        done.append(item)
                    elif isinstance(res, ReceiptExpired):
                        if await self._completed(item[0], res):
                            done.append(item)
                    elif rides_out(res, self._remote):
                        again.append(item)
                        failure = res
                    else:
                        self._stop.fatal(res)
                self._hooks.completed(done)
            except Exception as exc:
                if not rides_out(exc, self._remote):
                    self._stop.fatal(exc)
                    return
                again, failure = batch, exc
            batch = again
            if not batch or failure is None:
                return
            if self._closing and time.monotonic() >= self._stop.deadline:
                logger.warning(
                    "%d completion(s) not acknowledged before the grace ran out (%s: %s): their "
                    "messages will be delivered again once their leases end",
                    len(batch),
                    type(failure).__name__,
                    failure,
                )
                return
            await backoff.pause(failure, until=self._stop.deadline if self._closing else None)

    async def _completed(self, msg: Message, stale: ReceiptExpired) -> bool:
        """Whether ``msg``, whose receipt was found stale when completing it, is completed
        (an earlier try whose outcome was unknown did it); warned about if not."""
        try:
            status = await self._aq.status(msg.id)
        except Exception as exc:  # not known: say so as for a lost lease
            status = None
            stale = ReceiptExpired(f"{stale} (its status could not be read: {exc})")
        if status is MessageStatus.COMPLETED:
            return True
        logger.warning(
            "lease of message %s was lost before its completion; it may be processed again: %s",
            msg.id,
            stale,
        )
        return False
