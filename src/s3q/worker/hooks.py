"""The hook stream a worker reports to as it runs, and its built-in subscribers: the tally of
outcomes (for :class:`WorkerStopped`) and the user's ``on_event`` hook. Metrics subscribe in
``prometheus.py``."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Sequence
from typing import Any, TypeAlias

from ..message import Message
from .events import (
    Completed,
    Dead,
    Event,
    EventHook,
    Retry,
    WorkerStarted,
    WorkerStopped,
    WorkerStopping,
)

__all__ = ["Done", "Fanout", "Hooks", "OnEvent", "Tally"]

logger = logging.getLogger("s3q.worker")

Done: TypeAlias = tuple[Message, float, Any]  # a message, its handler's run time and result


class Hooks:
    """What a worker reports, one method per happening; each does nothing here, and a
    subscriber overrides those it wants."""

    def lifecycle(self, event: WorkerStarted | WorkerStopping | WorkerStopped) -> None:
        """The worker started, began stopping, or stopped."""

    def fetched(self, count: int) -> None:
        """``count`` messages were leased for the buffer."""

    def handler_started(self) -> None:
        """A handler began on a message."""

    def handler_ended(self, duration: float) -> None:
        """A handler returned, raised or was cancelled after ``duration`` seconds."""

    def completed(self, done: Sequence[Done]) -> None:
        """These completions are durable."""

    def failed(self, event: Retry | Dead) -> None:
        """A handler raised and the failure is durable: the message is retried later, or dead."""

    def extended(self) -> None:
        """A lease was renewed."""

    def released(self, count: int) -> None:
        """``count`` leases were given back unprocessed."""


class Fanout(Hooks):
    """Each hook passed on to every subscriber, in order."""

    def __init__(self, subscribers: Sequence[Hooks]) -> None:
        self._subscribers = tuple(subscribers)

    def lifecycle(self, event: WorkerStarted | WorkerStopping | WorkerStopped) -> None:
        for sub in self._subscribers:
            sub.lifecycle(event)

    def fetched(self, count: int) -> None:
        for sub in self._subscribers:
            sub.fetched(count)

    def handler_started(self) -> None:
        for sub in self._subscribers:
            sub.handler_started()

    def handler_ended(self, duration: float) -> None:
        for sub in self._subscribers:
            sub.handler_ended(duration)

    def completed(self, done: Sequence[Done]) -> None:
        for sub in self._subscribers:
            sub.completed(done)

    def failed(self, event: Retry | Dead) -> None:
        for sub in self._subscribers:
            sub.failed(event)

    def extended(self) -> None:
        for sub in self._subscribers:
            sub.extended()

    def released(self, count: int) -> None:
        for sub in self._subscribers:
            sub.released(count)


class Tally(Hooks):
    """The outcomes counted for :class:`WorkerStopped`."""

    def __init__(self) -> None:
        self.counts = {"completed": 0, "retried": 0, "dead": 0, "released": 0}

    def completed(self, done: Sequence[Done]) -> None:
        self.counts["completed"] += len(done)

    def failed(self, event: Retry | Dead) -> None:
        self.counts["dead" if isinstance(event, Dead) else "retried"] += 1

    def released(self, count: int) -> None:
        self.counts["released"] += count


class OnEvent(Hooks):
    """The ``on_event`` hook called with each :data:`Event`. An awaitable it returns runs in the
    background (:meth:`drain` awaits those left); a hook that raises is logged."""

    def __init__(self, hook: EventHook) -> None:
        self._hook = hook
        self._pending: set[asyncio.Future[Any]] = set()

    def lifecycle(self, event: WorkerStarted | WorkerStopping | WorkerStopped) -> None:
        self._emit(event)

    def completed(self, done: Sequence[Done]) -> None:
        for msg, duration, result in done:
            self._emit(Completed(msg.id, duration, msg.attempts, result, msg))

    def failed(self, event: Retry | Dead) -> None:
        self._emit(event)

    async def drain(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the hooks still running in the background."""
        if self._pending:
            await asyncio.wait(set(self._pending), timeout=timeout)

    def _emit(self, event: Event) -> None:
        try:
            result = self._hook(event)
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                self._pending.add(task)
                task.add_done_callback(self._done)
        except Exception:
            logger.exception("on_event hook raised on %s", type(event).__name__)

    def _done(self, task: asyncio.Future[Any]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("on_event hook raised", exc_info=task.exception())
