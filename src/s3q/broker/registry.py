"""The queues a broker serves: led here (opened on first use, one writer each) or forwarded."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from typing import Any

from ..api import AsyncQueue, open_async
from ..config import QueueConfig
from ..errors import QueueLocked, Unavailable
from ..store import queue_url
from .forward import RETRY_PAUSE, ForwardedQueue, Peers
from .wire import check_name

DEFAULT_LEASE_TTL = QueueConfig().lease_ttl

log = logging.getLogger("s3q.broker")

DOWN_FOR = 5.0  # seconds a broker that failed a forwarded call is not sent more


class QueueRegistry:
    """Every queue of ``store`` the broker serves, as ``<store>/<name>``.

    A queue this broker leads is one :class:`~s3q.AsyncQueue`, opened with ``s3q.open_async`` in
    the server's event loop, so the operations of all clients of a queue share its group commits.
    A queue another broker of the cluster leads (its writer lease names that broker's
    ``address``) is a :class:`~s3q.broker.forward.ForwardedQueue` to it. Must be used from the
    server's one loop.
    """

    def __init__(
        self,
        store: str,
        options: dict[str, Any] | None = None,
        *,
        address: str | None = None,
        token: str | None = None,
        failover_timeout: float = 30.0,
        on_commit: Callable[[str, float, int], None] | None = None,
    ) -> None:
        self.store = store
        self.on_commit = on_commit  # (queue, seconds, operations) after each commit here
        self.address: str | None = None
        self.options = dict(options or {})
        if address is not None:
            self.advertise(address)
        self.failover_timeout = failover_timeout
        self.peers = Peers(token)
        self._queues: dict[str, AsyncQueue] = {}
        self._forwarded: dict[str, ForwardedQueue] = {}
        self._down: dict[str, float] = {}  # broker address -> until when it counts as down
        self._opening: dict[str, asyncio.Lock] = {}
        self._closed = False

    def advertise(self, address: str) -> None:
        """Name this broker ``address`` in the writer leases of the queues it opens from now on,
        so the other brokers of the cluster forward to it."""
        self.address = address
        self.options["writer_address"] = address

    def names(self) -> list[str]:
        """The names of the queues this broker leads now, sorted."""
        return sorted(self._queues)

    def local(self, name: str) -> AsyncQueue | None:
        """Queue ``name`` if this broker leads it."""
        return self._queues.get(name)

    async def get(self, name: str, *, forwarded: bool = False) -> AsyncQueue | ForwardedQueue:
        """The queue ``name`` (InvalidArgument for a bad name): opened here on first use, or
        forwarded to the broker that leads it. ``forwarded``: the call came from another broker,
        which believes this one leads the queue; Unavailable if it does not."""
        check_name(name)
        queue = self._queues.get(name)
        if queue is not None:
            return queue
        if forwarded:
            try:
                return await self._open(name)
            except QueueLocked as exc:
                raise Unavailable(
                    f"queue {name} is led by {exc.address or exc.holder}, not by this broker"
                ) from None
        proxy = self._forwarded.get(name)
        if proxy is not None:
            return proxy
        loop = asyncio.get_running_loop()
        leader = await self.leader(name, loop.time() + self.failover_timeout)
        if isinstance(leader, str):
            proxy = self._forwarded.setdefault(name, ForwardedQueue(self, name, leader))
            return proxy
        return leader

    async def leader(self, name: str, deadline: float) -> AsyncQueue | str:
        """This broker's queue ``name``, or the address of the broker that leads it.

        A queue whose leader is down (or is this broker's previous life, whose lease has not
        lapsed) is waited for until ``deadline`` (loop time), then Unavailable. A queue held by
        a writer that is not a broker raises QueueLocked.
        """
        loop = asyncio.get_running_loop()
        while True:
            try:
                return await self._open(name)
            except QueueLocked as exc:
                address = exc.address
                if address is None:
                    raise
                if address != self.address and self._down.get(address, 0.0) <= loop.time():
                    return address
                if loop.time() >= deadline:
                    raise Unavailable(
                        f"queue {name} is held by {exc.holder}, which cannot be reached; "
                        "its lease has not lapsed yet: try again"
                    ) from None
                await asyncio.sleep(min(RETRY_PAUSE, max(0.0, deadline - loop.time())))

    @property
    def lease_ttl(self) -> float:
        """The writer lease length of the queues this broker opens."""
        return float(self.options.get("lease_ttl", DEFAULT_LEASE_TTL))

    async def take_over(self, name: str) -> AsyncQueue:
        """Open queue ``name`` here: QueueLocked while another writer's lease runs."""
        return await self._open(name)

    def unreachable(self, address: str, error: Exception) -> None:
        """A broker did not serve a forwarded call: look for the queue's leader elsewhere (or
        wait for its lease to lapse) instead of going back to it for a while."""
        now = asyncio.get_running_loop().time()
        if self._down.get(address, 0.0) <= now:
            log.warning("broker %s did not serve a forwarded call: %s", address, error)
        self._down[address] = now + DOWN_FOR

    async def _open(self, name: str) -> AsyncQueue:
        queue = self._queues.get(name)
        if queue is not None:
            return queue
        if self._closed:
            raise Unavailable("the broker is shutting down")
        lock = self._opening.setdefault(name, asyncio.Lock())
        async with lock:
            queue = self._queues.get(name)
            if queue is None:
                if self._closed:
                    raise Unavailable("the broker is shutting down")
                url = queue_url(self.store, name)
                queue = await open_async(url, **self.options)
                if self.on_commit is not None:
                    queue.on_commit(functools.partial(self.on_commit, name))
                self._queues[name] = queue
                self._forwarded.pop(name, None)
                log.info("opened queue %s", url)
        return queue

    async def evict_stopped(self, name: str | None) -> bool:
        """Evict queue ``name`` if it is open here and its writer stopped; whether it was."""
        queue = self._queues.get(name) if name is not None else None
        if queue is None or queue.stopped is None:
            return False
        assert name is not None
        await self.evict(name, queue)
        return True

    async def evict(self, name: str, queue: AsyncQueue) -> None:
        """Forget a queue whose writer stopped (fenced, or a failed commit): the next request
        reopens it from what is durable, or finds the broker that took it over."""
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
        self._forwarded.clear()
        await self.peers.close()
