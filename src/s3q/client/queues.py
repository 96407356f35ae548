"""The queues a broker serves, as the client sees them: :class:`AsyncRemoteQueue` and
:class:`RemoteQueue`, with the methods of :class:`s3q.AsyncQueue` and :class:`s3q.Queue`."""

from __future__ import annotations

from collections.abc import Coroutine, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .. import tracing
from ..blocking import blocking, run_in_place
from ..config import Setting
from ..errors import InvalidArgument, QueueClosed
from ..log.staging import StagedObject
from ..message import CompactionReport, Message, MessageStatus, QueueStats
from ..surface import AsyncQueueSurface, Target, documented
from ..wire.pages import Pages
from .calls import Call
from .requests import QueueRequests
from .subscriptions import AsyncChannels, AsyncSubscription, Channels, Subscription

T = TypeVar("T")


class Broker(Protocol):
    """A blocking client (:class:`~s3q.client.Client`), as a queue sees it."""

    @property
    def url(self) -> str:
        """The broker calls go to now."""

    def _run(self, call: Call[T], /) -> T:
        """Send ``call``; its answer."""


class AsyncBroker(Protocol):
    """An async client (:class:`~s3q.client.AsyncClient`), as a queue sees it."""

    @property
    def url(self) -> str:
        """The broker calls go to now."""

    async def _run(self, call: Call[T], /) -> T:
        """Send ``call``; its answer."""


@documented
class _RemoteQueueBase:
    """The coroutines of a queue a broker serves, whatever makes its requests (``_send``):
    :class:`AsyncRemoteQueue` awaits them over aiohttp; :class:`RemoteQueue` runs the
    coroutines of an :class:`_InPlaceQueue`, whose requests block in place (urllib3), to their
    end without an event loop (:func:`s3q.blocking.run_in_place`)."""

    def __init__(self, name: str) -> None:
        self._requests = QueueRequests(name)
        self._closed = False

    @property
    def _broker(self) -> str:
        """The broker calls go to now."""
        raise NotImplementedError

    async def _send(self, call: Call[T]) -> T:
        raise NotImplementedError

    async def _run(self, call: Call[T]) -> T:
        if self._closed:
            raise QueueClosed(f"queue {self.url} is closed")
        return await self._send(call)

    @property
    def name(self) -> str:
        """The queue's name at the broker."""
        return self._requests.name

    @property
    def url(self) -> str:
        return f"{self._broker}{self._requests.base}"

    async def enqueue(
        self,
        payload: bytes,
        priority: int = 0,
        delay: float = 0.0,
        dedup_id: str | None = None,
        group: str | None = None,
        attributes: dict[str, str] | None = None,
        *,
        durability: str | None = None,
        tenant: str | None = None,
    ) -> str:
        publish = tracing.publishing(self.name, (attributes,))
        if publish is not None:
            attributes = publish.stamp(attributes)
        call = self._requests.enqueue(
            payload, priority, delay, dedup_id, group, attributes, durability, tenant
        )
        return await (self._run(call) if publish is None else publish.send(self._run(call)))

    async def enqueue_batch(
        self, items: Iterable[bytes | dict[str, Any]], *, durability: str | None = None
    ) -> list[str]:
        call = self._requests.enqueue_batch(items, durability)
        assert call.body is not None
        entries: list[Any] = call.body["items"]
        publish = tracing.publishing(self.name, map(_attributes_of, entries), len(entries))
        if publish is None:
            return await self._run(call)
        call.body["items"] = [_stamped(entry, publish) for entry in entries]
        return await publish.send(self._run(call))

    async def enqueue_staged(
        self, objects: Iterable[StagedObject], token: str | None = None
    ) -> list[str] | None:
        return await self._run(self._requests.enqueue_staged(objects, token))

    async def dequeue(
        self,
        max_messages: int = 1,
        visibility_timeout: float | None = None,
        wait: float = 0.0,
        *,
        per_group: int = 1,
        complete: Iterable[Target] = (),
    ) -> list[Message]:
        complete = list(complete)
        requests = self._requests
        call = requests.dequeue(max_messages, visibility_timeout, wait, per_group, complete)
        try:
            return await self._run(call)
        except InvalidArgument as exc:
            if not requests.paged or "pages" not in str(exc):
                raise
        # A broker from before pages refused the request (and so did nothing): ask it for
        # messages one by one from now on.
        requests.paged = False
        call = requests.dequeue(max_messages, visibility_timeout, wait, per_group, complete)
        return await self._run(call)

    async def dequeue_pages(
        self,
        max_messages: int = 1,
        visibility_timeout: float | None = None,
        wait: float = 0.0,
        *,
        per_group: int = 1,
        complete: Iterable[Target] = (),
    ) -> Pages:
        """``dequeue``, the broker's answer kept as it came: each stretch of consecutive
        messages one page (``s3q.wire.pages``), for a caller that passes it on (a broker)."""
        complete = list(complete)
        requests = self._requests
        if requests.paged:
            call = requests.dequeue_pages(
                max_messages, visibility_timeout, wait, per_group, complete
            )
            try:
                return await self._run(call)
            except InvalidArgument as exc:
                if "pages" not in str(exc):
                    raise
        return Pages(
            await self.dequeue(
                max_messages, visibility_timeout, wait, per_group=per_group, complete=complete
            )
        )

    async def complete(self, target: Target) -> None:
        await self._run(self._requests.complete([target]))

    async def complete_batch(self, targets: Iterable[Target]) -> None:
        call = self._requests.complete(targets)
        if call.body and call.body["receipts"]:
            await self._run(call)

    async def fail(self, target: Target, error: str | None = None) -> float | None:
        return await self._run(self._requests.fail(target, error))

    async def release(self, targets: Target | Iterable[Target]) -> None:
        call = self._requests.release(targets)
        if call.body and call.body["receipts"]:
            await self._run(call)

    async def extend(self, target: Target, seconds: float, *, revive: bool = False) -> None:
        await self._run(self._requests.extend(target, seconds, revive))

    async def status(self, id: str) -> MessageStatus:
        return await self._run(self._requests.status(id))

    async def stats(self) -> QueueStats:
        return await self._run(self._requests.stats())

    async def peek(self, limit: int = 10) -> list[Message]:
        return await self._run(self._requests.peek(limit))

    async def dead_letters(self, limit: int = 100) -> list[Message]:
        return await self._run(self._requests.dead_letters(limit))

    async def redrive(self, ids: Iterable[str] | None = None) -> int:
        return await self._run(self._requests.redrive(ids))

    async def discard(self, ids: Iterable[str]) -> int:
        return await self._run(self._requests.discard(ids))

    async def configure(self, /, **settings: Any) -> dict[str, Setting]:
        return await self._run(self._requests.configure(settings))

    async def cleanup(self) -> int:
        return await self._run(self._requests.cleanup())

    async def purge(self) -> int:
        return await self._run(self._requests.purge())

    async def compact(self) -> CompactionReport:
        return await self._run(self._requests.compact())

    async def close(self) -> None:
        self._closed = True


def _attributes_of(entry: object) -> object:
    """The attributes of an item of ``enqueue_batch``."""
    return entry.get("attributes") if isinstance(entry, dict) else None


def _stamped(entry: Any, publish: tracing.Publish) -> Any:
    """An item of ``enqueue_batch`` carrying ``publish``'s trace context."""
    if isinstance(entry, dict):
        return {**entry, "attributes": publish.stamp(entry.get("attributes"))}
    return {"payload": entry, "attributes": publish.stamp(None)}


@documented
class _InPlaceQueue(_RemoteQueueBase):
    """The coroutines of :class:`AsyncRemoteQueue` over a blocking :class:`~s3q.client.Client`: each
    request is made in place, so they never suspend (:class:`RemoteQueue` runs them)."""

    def __init__(self, client: Broker, name: str) -> None:
        super().__init__(name)
        self._client = client

    @property
    def _broker(self) -> str:
        return self._client.url

    async def _send(self, call: Call[T]) -> T:
        return self._client._run(call)


@documented
class RemoteQueue:
    """A queue served by a broker; the same methods as :class:`s3q.Queue`, over HTTP (those of
    :class:`AsyncRemoteQueue`, blocking: see :mod:`s3q.blocking`)."""

    def __init__(self, client: Broker, name: str) -> None:
        self._aq = _InPlaceQueue(client, name)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return run_in_place(coro)

    @property
    def name(self) -> str:
        """The queue's name at the broker."""
        return self._aq.name

    @property
    def url(self) -> str:
        return self._aq.url

    # the coroutines of AsyncRemoteQueue, blocking (s3q.blocking): parameters, results, docstrings
    enqueue = blocking(_InPlaceQueue.enqueue)
    enqueue_batch = blocking(_InPlaceQueue.enqueue_batch)
    enqueue_staged = blocking(_InPlaceQueue.enqueue_staged)
    dequeue = blocking(_InPlaceQueue.dequeue)
    complete = blocking(_InPlaceQueue.complete)
    complete_batch = blocking(_InPlaceQueue.complete_batch)
    fail = blocking(_InPlaceQueue.fail)
    release = blocking(_InPlaceQueue.release)
    extend = blocking(_InPlaceQueue.extend)
    status = blocking(_InPlaceQueue.status)
    stats = blocking(_InPlaceQueue.stats)
    peek = blocking(_InPlaceQueue.peek)
    dead_letters = blocking(_InPlaceQueue.dead_letters)
    redrive = blocking(_InPlaceQueue.redrive)
    discard = blocking(_InPlaceQueue.discard)
    configure = blocking(_InPlaceQueue.configure)
    cleanup = blocking(_InPlaceQueue.cleanup)
    purge = blocking(_InPlaceQueue.purge)
    compact = blocking(_InPlaceQueue.compact)

    def subscribe(
        self, prefetch: int = 100, visibility_timeout: float | None = None, *, per_group: int = 1
    ) -> Subscription:
        """A channel on which the broker pushes this queue's messages, leased for
        ``visibility_timeout`` seconds (None: the queue's), while fewer than ``prefetch`` are
        unsettled; settle them on it. Use it with ``with``; see :mod:`s3q.client.subscriptions`."""
        client: Channels = self._aq._client  # type: ignore[assignment]
        return Subscription(client, self.name, prefetch, visibility_timeout, per_group=per_group)

    def close(self) -> None:
        self._run(self._aq.close())

    def __enter__(self) -> RemoteQueue:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<s3q.client.RemoteQueue {self.url}>"


@documented
class AsyncRemoteQueue(_RemoteQueueBase):
    """A queue served by a broker; the same coroutines as :class:`s3q.AsyncQueue`."""

    def __init__(self, client: AsyncBroker, name: str) -> None:
        super().__init__(name)
        self._client = client

    @property
    def _broker(self) -> str:
        return self._client.url

    async def _send(self, call: Call[T]) -> T:
        return await self._client._run(call)

    def subscribe(
        self, prefetch: int = 100, visibility_timeout: float | None = None, *, per_group: int = 1
    ) -> AsyncSubscription:
        """A channel on which the broker pushes this queue's messages, leased for
        ``visibility_timeout`` seconds (None: the queue's), while fewer than ``prefetch`` are
        unsettled; settle them on it. Use it with ``async with``; see
        :mod:`s3q.client.subscriptions`."""
        client: AsyncChannels = self._client  # type: ignore[assignment]
        return AsyncSubscription(
            client, self.name, prefetch, visibility_timeout, per_group=per_group
        )

    async def __aenter__(self) -> AsyncRemoteQueue:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<s3q.client.AsyncRemoteQueue {self.url}>"


if TYPE_CHECKING:  # mypy checks that AsyncRemoteQueue offers the whole surface
    _remote: type[AsyncQueueSurface] = AsyncRemoteQueue
