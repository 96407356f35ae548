"""When and why a worker stops: the stop request, the running handlers' deadline, the fatal
error."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Iterable
from typing import Any

__all__ = ["Stop"]

logger = logging.getLogger("s3q.worker")


class Stop:
    """The stop of one serving on ``queue``; ``grace``: the seconds running handlers get."""

    def __init__(self, queue: str, grace: float) -> None:
        self.queue = queue
        self.grace = grace
        self.requested = asyncio.Event()
        self.hurry = asyncio.Event()  # the deadline moved closer
        self.deadline = math.inf  # when running handlers are abandoned (monotonic)
        self.error: BaseException | None = None
        self.stopping = False  # the shutdown began: no more fetching

    def request(self, grace: float | None) -> None:
        """Stop, with ``grace`` seconds for running handlers (None: the configured grace); a
        shorter grace than an earlier request's brings the deadline closer."""
        limit = time.monotonic() + (self.grace if grace is None else grace)
        if limit < self.deadline:
            self.deadline = limit
            self.hurry.set()
        self.requested.set()

    def fatal(self, exc: BaseException) -> None:
        """Something the worker cannot go on after (the queue closed, the writer fenced)."""
        if self.error is None:
            self.error = exc
            logger.error("worker on %s stopping: %s: %s", self.queue, type(exc).__name__, exc)
        self.request(None)

    @property
    def reason(self) -> str | None:
        """The fatal error as ``"ExcType: text"``, None on a stop request."""
        return None if self.error is None else f"{type(self.error).__name__}: {self.error}"

    async def outlast(self, tasks: Iterable[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
        """Wait for ``tasks`` until the deadline (which may move closer meanwhile); the ones
        still running then."""
        running: set[asyncio.Task[Any]] = set(tasks)
        while running:
            left = self.deadline - time.monotonic()
            if left <= 0:
                break
            self.hurry.clear()
            hurry: asyncio.Task[Any] = asyncio.create_task(self.hurry.wait())
            _, running = await asyncio.wait(
                {*running, hurry}, timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
            hurry.cancel()
            running.discard(hurry)
        return running
