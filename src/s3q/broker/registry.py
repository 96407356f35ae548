"""The queues a broker serves: opened lazily on first use, one writer each, closed together."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..api import AsyncQueue, open_async
from ..errors import QueueClosed
from .wire import check_name

log = logging.getLogger("s3q.broker")


def queue_url(store: str, name: str) -> str:
    """The URL of queue ``name`` in ``store``; a store URL's query (its options) stays last."""
    if "://" in store:
        parts = urlsplit(store)
        return urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}/{name}"))
    return f"{store.rstrip('/')}/{name}"


class QueueRegistry:
    """Every queue of ``store`` the broker has opened, as ``<store>/<name>``.

    One :class:`~s3q.AsyncQueue` per queue, opened with ``s3q.open_async`` in the server's event
    loop, so the operations of all clients of a queue share its group commits. Must be used from
    that one loop.
    """

    def __init__(self, store: str, options: dict[str, Any] | None = None) -> None:
        self.store = store
        self.options = dict(options or {})
        self._queues: dict[str, AsyncQueue] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        self._closed = False

    def names(self) -> list[str]:
        """The names of the queues open now, sorted."""
        return sorted(self._queues)

    async def get(self, name: str) -> AsyncQueue:
        """The queue ``name``, opened on first use (InvalidArgument for a bad name)."""
        check_name(name)
        queue = self._queues.get(name)
        if queue is not None:
            return queue
        if self._closed:
            raise QueueClosed("the broker is shutting down")
        lock = self._opening.setdefault(name, asyncio.Lock())
        async with lock:
            queue = self._queues.get(name)
            if queue is None:
                if self._closed:
                    raise QueueClosed("the broker is shutting down")
                url = queue_url(self.store, name)
                queue = await open_async(url, **self.options)
                self._queues[name] = queue
                log.info("opened queue %s", url)
        return queue

    async def evict(self, name: str, queue: AsyncQueue) -> None:
        """Forget a queue whose writer stopped (fenced, or a failed commit): the next request
        reopens it from what is durable."""
        if self._queues.get(name) is queue:
            del self._queues[name]
            log.warning("evicted queue %s after a writer failure", queue.url)
            with contextlib.suppress(Exception):
                await queue.close()

    async def close_queue(self, name: str) -> None:
        """Close queue ``name`` if it is open here, and forget it (e.g. before deleting it)."""
        queue = self._queues.pop(name, None)
        if queue is not None:
            await queue.close()

    async def close(self) -> None:
        """Close every queue: pending commits finish and the writer leases are released."""
        self._closed = True
        queues, self._queues = list(self._queues.values()), {}
        results = await asyncio.gather(*(q.close() for q in queues), return_exceptions=True)
        for queue, result in zip(queues, results, strict=True):
            if isinstance(result, BaseException):
                log.error("closing %s failed: %s", queue.url, result)
