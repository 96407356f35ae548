"""The queues a kombu connection uses: served by a broker (:class:`BrokerQueues`) or opened in
this process (:class:`EmbeddedQueues`). Each offers the blocking calls kombu's threads make
(publish, size, purge, a single get and its settle) and, on the pump's loop, the sources the
consumers' feeds read from.

Through a broker a publish is one call of s3q's blocking client, made in the publishing thread
(thread-safe, its connections kept alive), durable when it returns; a consumer's messages are
pushed on a subscription holding Celery's prefetch (long polls of ``dequeue`` if the broker
offers no subscriptions). Embedded, every queue is opened by this process as its writer, on
the pump's loop, and consumed by long polls that a publish in this process wakes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..api import open_async
from ..errors import InvalidArgument
from ..message import Message
from ..store import queue_url
from ..surface import AsyncQueueSurface
from .envelope import Outgoing
from .place import Place
from .pump import shared_loop
from .sources import Polled, Pushed, Settle, Source, settled

if TYPE_CHECKING:
    from ..client import AsyncClient, Client

__all__ = ["DEFAULT_MAX_DELAY", "BrokerQueues", "EmbeddedQueues", "Queues", "embedded"]

T = TypeVar("T")

log = logging.getLogger("s3q.celery")

DEFAULT_MAX_DELAY = 900.0  # a queue's max_delay unless configured (s3q.config)


class Queues(Protocol):
    """What the transport's channels and its pump call."""

    def check(self) -> None:
        """Raise if the queues cannot be reached now (a broker down, a wrong token)."""

    def enqueue(self, name: str, out: Outgoing) -> None:
        """Enqueue one message, durable when this returns."""

    def enqueue_batch(self, name: str, outs: Sequence[Outgoing]) -> None:
        """Enqueue messages in one commit, all or none."""

    def get(self, name: str, visibility_timeout: float) -> Message | None:
        """Lease one message now, if there is one."""

    def settle(self, name: str, op: Settle, receipt: str, error: str | None = None) -> None:
        """Settle a lease :meth:`get` took."""

    def size(self, name: str) -> int:
        """Messages ready for delivery."""

    def purge(self, name: str) -> int:
        """Remove every message not completed; how many."""

    def exists(self, name: str) -> bool:
        """Whether the queue was ever made."""

    def close(self) -> None:
        """Let go of what the blocking calls opened."""

    async def source(
        self,
        name: str,
        prefetch: int,
        visibility_timeout: float,
        roomy: Callable[[], Awaitable[None]],
    ) -> Source:
        """Where a feed of queue ``name`` takes messages from (on the pump's loop)."""

    async def aclose(self) -> None:
        """Let go of everything opened on the pump's loop."""


def _items(outs: Sequence[Outgoing], delays: Sequence[float]) -> list[dict[str, Any]]:
    return [
        {"payload": out.payload, "priority": out.priority, "delay": delay}
        for out, delay in zip(outs, delays, strict=True)
    ]


class Delays:
    """The longest delay each queue takes (its ``max_delay``), learnt when an enqueue asked for
    more and was refused: it is then sent again with that (Celery's worker holds such a message
    until its ``eta``, its lease renewed meanwhile), and later ones are cut to it at once."""

    def __init__(self) -> None:
        self._most: dict[str, float] = {}

    def cut(self, name: str, delays: list[float]) -> list[float]:
        most = self._most.get(name)
        return delays if most is None else [min(d, most) for d in delays]

    def may_learn(self, name: str, exc: InvalidArgument, delays: list[float]) -> bool:
        """Whether refusal ``exc`` of an enqueue asking for ``delays`` may be their length."""
        return type(exc) is InvalidArgument and any(delays) and name not in self._most

    def learnt(self, name: str, settings: dict[str, Any], delays: list[float]) -> list[float]:
        """The delays to send again, now that the queue's settings are known; the same ones
        if they were not too long (the refusal was about something else)."""
        value = settings.get("max_delay")
        most = float(value) if isinstance(value, int | float) else DEFAULT_MAX_DELAY
        self._most[name] = most
        return self.cut(name, delays)


class BrokerQueues:
    """Queues served by ``s3q serve`` at ``place``."""

    def __init__(self, place: Place, timeout: float) -> None:
        self._place = place
        self._timeout = timeout
        self._client = self._make()
        self._pid = os.getpid()
        self._aclient: AsyncClient | None = None  # on the pump's loop
        self._delays = Delays()

    def _make(self) -> Client:
        from ..client import Client

        return Client(list(self._place.brokers), self._place.token, self._timeout)

    @property
    def client(self) -> Client:
        """The blocking client (a new one in a forked child: a socket is never shared)."""
        if os.getpid() != self._pid:
            self._client, self._pid = self._make(), os.getpid()
        return self._client

    def check(self) -> None:
        self.client.queues()

    def _sent(
        self, name: str, outs: Sequence[Outgoing], send: Callable[[list[float]], Any]
    ) -> None:
        """``send(delays)``, again with delays cut to the queue's max_delay if it refused them."""
        delays = self._delays.cut(name, [out.delay for out in outs])
        try:
            send(delays)
        except InvalidArgument as exc:
            if not self._delays.may_learn(name, exc, delays):
                raise
            again = self._delays.learnt(name, self.client.queue(name).configure(), delays)
            if again == delays:
                raise
            send(again)

    def enqueue(self, name: str, out: Outgoing) -> None:
        q = self.client.queue(name)
        self._sent(name, [out], lambda d: q.enqueue(out.payload, priority=out.priority, delay=d[0]))

    def enqueue_batch(self, name: str, outs: Sequence[Outgoing]) -> None:
        q = self.client.queue(name)
        self._sent(name, outs, lambda d: q.enqueue_batch(_items(outs, d)))

    def get(self, name: str, visibility_timeout: float) -> Message | None:
        got: list[Message] = self.client.queue(name).dequeue(1, visibility_timeout)
        return got[0] if got else None

    def settle(self, name: str, op: Settle, receipt: str, error: str | None = None) -> None:
        q = self.client.queue(name)
        if op == "complete":
            q.complete(receipt)
        elif op == "release":
            q.release(receipt)
        elif op == "fail":
            q.fail(receipt, error)
        else:
            raise AssertionError(op)

    def size(self, name: str) -> int:
        from ..client import QueueNotFound

        try:
            return int(self.client.queue(name).stats().pending)
        except QueueNotFound:
            return 0

    def purge(self, name: str) -> int:
        from ..client import QueueNotFound

        try:
            return int(self.client.queue(name).purge())
        except QueueNotFound:
            return 0

    def exists(self, name: str) -> bool:
        from ..client import QueueNotFound

        try:
            self.client.queue(name).stats()
        except QueueNotFound:
            return False
        return True

    def close(self) -> None:
        if os.getpid() == self._pid:
            self._client.close()

    def _async(self) -> AsyncClient:
        if self._aclient is None:
            from ..client import AsyncClient

            place = self._place
            self._aclient = AsyncClient(list(place.brokers), place.token, self._timeout)
        return self._aclient

    async def source(
        self,
        name: str,
        prefetch: int,
        visibility_timeout: float,
        roomy: Callable[[], Awaitable[None]],
    ) -> Source:
        from ..client import SubscriptionsUnsupported

        queue = self._async().queue(name)
        subscription = queue.subscribe(prefetch, visibility_timeout)
        try:
            await subscription.open()
        except SubscriptionsUnsupported as exc:
            log.info("long polls of %s: %s", name, exc)
            return Polled(queue, visibility_timeout, roomy)
        return Pushed(subscription, queue)

    async def aclose(self) -> None:
        if self._aclient is not None:
            await self._aclient.close()
            self._aclient = None


class EmbeddedQueues:
    """Queues of the store ``place.store``, each opened by this process (its writer) on the
    process's loop thread with ``options`` (``s3q.open``'s). Shared by every connection of the
    process to the same store (:func:`embedded`): a queue has one writer, and a worker's
    consumer must see what a producer of the same process publishes."""

    def __init__(self, store: str, options: dict[str, Any]) -> None:
        self._store = store
        self._options = options
        self._queues: dict[str, AsyncQueueSurface] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        self._delays = Delays()
        self.users = 0

    async def queue(self, name: str) -> AsyncQueueSurface:
        """Queue ``name``, opened on first use (QueueLocked if another process holds it)."""
        found = self._queues.get(name)
        if found is not None:
            return found
        async with self._opening.setdefault(name, asyncio.Lock()):
            if name not in self._queues:
                url = queue_url(self._store, name)
                self._queues[name] = await open_async(url, **self._options)
            return self._queues[name]

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return shared_loop().call(coro)

    def check(self) -> None:
        return None  # (a queue is opened by its first use: QueueLocked then, if held)

    async def _sent(
        self,
        name: str,
        outs: Sequence[Outgoing],
        send: Callable[[AsyncQueueSurface, list[float]], Awaitable[Any]],
    ) -> None:
        """``send(queue, delays)``, again with delays cut to the queue's max_delay if it
        refused them (as :meth:`BrokerQueues._sent`)."""
        queue = await self.queue(name)
        delays = self._delays.cut(name, [out.delay for out in outs])
        try:
            await send(queue, delays)
        except InvalidArgument as exc:
            if not self._delays.may_learn(name, exc, delays):
                raise
            again = self._delays.learnt(name, await queue.configure(), delays)
            if again == delays:
                raise
            await send(queue, again)

    def enqueue(self, name: str, out: Outgoing) -> None:
        def send(queue: AsyncQueueSurface, delays: list[float]) -> Awaitable[str]:
            return queue.enqueue(out.payload, priority=out.priority, delay=delays[0])

        self._run(self._sent(name, [out], send))

    def enqueue_batch(self, name: str, outs: Sequence[Outgoing]) -> None:
        def send(queue: AsyncQueueSurface, delays: list[float]) -> Awaitable[list[str]]:
            return queue.enqueue_batch(_items(outs, delays))

        self._run(self._sent(name, outs, send))

    def get(self, name: str, visibility_timeout: float) -> Message | None:
        async def get() -> list[Message]:
            return await (await self.queue(name)).dequeue(1, visibility_timeout)

        got: list[Message] = self._run(get())
        return got[0] if got else None

    def settle(self, name: str, op: Settle, receipt: str, error: str | None = None) -> None:
        async def settle() -> None:
            await settled(await self.queue(name), op, [receipt], error)

        self._run(settle())

    def size(self, name: str) -> int:
        async def size() -> int:
            return (await (await self.queue(name)).stats()).pending

        return int(self._run(size()))

    def purge(self, name: str) -> int:
        async def purge() -> int:
            return await (await self.queue(name)).purge()

        return int(self._run(purge()))

    def exists(self, name: str) -> bool:
        return True  # (opening a queue of the store makes it)

    def close(self) -> None:
        """A connection lets go: the queues close when the last one does."""
        with _embedded_lock:
            self.users -= 1
            if self.users > 0:
                return
            _embedded.pop((os.getpid(), self._store, repr(self._options)), None)
        if shared_loop().alive:
            self._run(self._close_queues())

    async def _close_queues(self) -> None:
        queues, self._queues = list(self._queues.values()), {}
        for queue in queues:
            await queue.close()

    async def source(
        self,
        name: str,
        prefetch: int,
        visibility_timeout: float,
        roomy: Callable[[], Awaitable[None]],
    ) -> Source:
        return Polled(await self.queue(name), visibility_timeout, roomy)

    async def aclose(self) -> None:
        return None  # (shared: closed by the last connection's close)


_embedded: dict[tuple[int, str, str], EmbeddedQueues] = {}
_embedded_lock = threading.Lock()


def embedded(place: Place, options: dict[str, Any]) -> EmbeddedQueues:
    """This process's queues of ``place.store`` opened with ``options``, for one more
    connection (which calls their ``close`` when it closes)."""
    assert place.store is not None
    key = (os.getpid(), place.store, repr(options))
    with _embedded_lock:
        queues = _embedded.get(key)
        if queues is None:
            queues = _embedded[key] = EmbeddedQueues(place.store, options)
        queues.users += 1
        return queues
