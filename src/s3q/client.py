"""A Python client of the s3q broker, with exactly the embedded queue's API.

``connect(url, token=None)`` gives a :class:`Client`; ``client.queue(name)`` a
:class:`RemoteQueue` whose methods, arguments, return types and exceptions are those of
:class:`s3q.Queue`. ``connect_async`` and :class:`AsyncRemoteQueue` mirror :class:`s3q.AsyncQueue`.

Retries: a request that could not connect (nothing was sent) is retried with exponential
backoff, whatever it is. A read (GET: ``status``, ``stats``, ``peek``, ``dead_letters``) is also
retried on 503 and on timeouts and dropped connections. Changes (``enqueue``, ``dequeue``,
``complete``, …) are *not* retried once sent: an enqueue whose answer was lost may well be
durable, and sending it again would enqueue it twice (unless it has a ``dedup_id``); a dequeue
sent twice would lease messages nobody receives until their lease expires. Those errors reach
the caller, who knows whether repeating is safe.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import random
import ssl
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar
from urllib.parse import quote

import aiohttp
import certifi
import httpx
import msgspec

from . import validate
from .blocking import blocking, run_in_place
from .broker.wire import (
    API_PREFIX,
    MSGPACK,
    AuthError,
    BodyTooLarge,
    BrokerError,
    BrokerUnreachable,
    QueueNotFound,
    RequestTimeout,
    check_name,
    exception_of,
    is_broker_url,
    split_queue_url,
)
from .collector import CompactionReport
from .config import Setting
from .errors import InvalidArgument, QueueClosed, S3QError, StoreError, Unavailable
from .message import Message, MessageStatus, QueueStats
from .staging import StagedObject
from .surface import AsyncQueueSurface, Target, documented

__all__ = [
    "TOKEN_ENV",
    "AsyncClient",
    "AsyncRemoteQueue",
    "AuthError",
    "BodyTooLarge",
    "BrokerError",
    "BrokerUnreachable",
    "Client",
    "QueueNotFound",
    "RemoteQueue",
    "RequestTimeout",
    "connect",
    "connect_async",
    "is_broker_url",
    "split_queue_url",
]

#: the bearer token ``s3q worker`` and the CLI send to a broker given by URL
TOKEN_ENV = "S3Q_TOKEN"

T = TypeVar("T")

RETRIES = 4  # attempts after the first
BACKOFF = 0.1  # seconds before the first retry, doubled each time, jittered
BACKOFF_MAX = 2.0
WAIT_MARGIN = 10.0  # seconds added to a long poll's wait for the answer to arrive


class _Messages(msgspec.Struct):
    messages: list[Message]


class _Id(msgspec.Struct):
    id: str


class _Ids(msgspec.Struct):
    ids: list[str]


class _MaybeIds(msgspec.Struct):
    ids: list[str] | None


class _Status(msgspec.Struct):
    status: MessageStatus


class _Moved(msgspec.Struct):
    moved: int


class _Removed(msgspec.Struct):
    removed: int


class _Settings(msgspec.Struct):
    settings: dict[str, Setting]


class _Queues(msgspec.Struct):
    queues: list[str]


class _Empty(msgspec.Struct):
    pass


class _RetryAt(msgspec.Struct):
    retry_at: float | None = None


@dataclass
class _Call(Generic[T]):
    """One request of the native API and how to read its answer."""

    method: str
    path: str
    answer: type[Any]
    pick: Any = None  # a function of the decoded answer; None: the answer itself
    body: dict[str, Any] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    extra_timeout: float = 0.0

    @property
    def idempotent(self) -> bool:
        return self.method == "GET"

    @property
    def queue(self) -> str | None:
        """The queue the call is about (``/v1/queues/NAME/...``), if any."""
        parts = self.path.split("/", 4)
        return parts[3] if len(parts) > 3 and parts[2] == "queues" else None

    def content(self) -> bytes | None:
        if self.body is None:
            return None
        try:
            return msgspec.msgpack.encode(self.body)
        except (TypeError, msgspec.EncodeError) as exc:
            raise InvalidArgument(f"cannot send argument: {exc}") from None

    def result(self, content: bytes) -> T:
        try:
            decoded = msgspec.msgpack.decode(content, type=self.answer)
        except msgspec.DecodeError as exc:
            raise BrokerError(f"unreadable answer from the broker: {exc}", 200) from None
        value: T = decoded if self.pick is None else self.pick(decoded)
        return value


def _error(status: int, content: bytes) -> S3QError:
    try:
        body = msgspec.msgpack.decode(content)
    except msgspec.DecodeError:
        try:
            body = msgspec.json.decode(content)
        except msgspec.DecodeError:
            body = None
    return exception_of(status, body)


def _delay(attempt: int) -> float:
    return float(min(BACKOFF_MAX, BACKOFF * 2.0**attempt)) * random.uniform(0.5, 1.0)


#: failures of a connection attempt: the request was not sent (httpx: the blocking client;
#: aiohttp: the async one)
NOT_SENT = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    aiohttp.ClientConnectorError,
    aiohttp.ConnectionTimeoutError,
)
#: failures of the transport: the request may or may not have been received
TRANSPORT = (httpx.HTTPError, aiohttp.ClientError, asyncio.TimeoutError)


def _retryable(call: _Call[Any], failure: Exception, status: int | None) -> bool:
    """Whether sending ``call`` again is safe and may help."""
    if isinstance(failure, (*NOT_SENT, Unavailable, QueueClosed)):
        return True  # nothing was done
    if not call.idempotent:
        return False
    return status == 503 or isinstance(failure, TRANSPORT)


class _Nodes:
    """The brokers a client may send to (one, or several of one cluster), in the order to try
    them for each queue.

    Any broker of a cluster serves any queue, but each queue is led by one of them, the first
    asked for it. Every client orders the brokers for a queue the same way (rendezvous hashing
    of the queue's name and the brokers' URLs), so each queue is first asked of, and then led
    by, one broker, queues spread evenly over the brokers, and calls mostly reach the leader
    without being forwarded. A broker that cannot serve a call sends that queue's calls on to
    the next one in its order.
    """

    def __init__(self, url: str | Sequence[str]) -> None:
        given = [url] if isinstance(url, str) else list(url)
        self.urls = [u.strip().rstrip("/") for part in given for u in part.split(",") if u.strip()]
        if not self.urls:
            raise InvalidArgument("no broker URL given")
        self._orders: dict[str | None, list[str]] = {None: self.urls}
        self._moved: dict[str | None, int] = {}  # how often a queue's calls moved on

    @property
    def url(self) -> str:
        return self.url_for(None)

    def url_for(self, queue: str | None) -> str:
        """The broker to send ``queue``'s calls to now."""
        order = self._orders.get(queue)
        if order is None:
            order = self._orders[queue] = sorted(self.urls, key=lambda u: _rank(queue or "", u))
        return order[self._moved.get(queue, 0) % len(order)]

    def raise_or_move_on(
        self,
        call: _Call[Any],
        node: str,
        answer: tuple[int, bytes] | None,
        exc: BaseException | None,
        *,
        last: bool,
    ) -> None:
        """After a failed attempt at ``call`` on ``node`` (an error ``answer``: status and body,
        or a transport failure ``exc``): raise its error, unless trying again is safe and
        allowed; then the next broker is the one to try."""
        error: S3QError
        if exc is not None:
            assert isinstance(exc, Exception)
            error, retry = _transport_error(exc, node), _retryable(call, exc, None)
        else:
            assert answer is not None
            error = _error(*answer)
            retry = _retryable(call, error, answer[0])
        if last or not retry:
            raise error from exc
        if self.url_for(call.queue) == node:  # unless another caller moved on already
            self._moved[call.queue] = self._moved.get(call.queue, 0) + 1


def _rank(queue: str, url: str) -> bytes:
    """Where broker ``url`` comes in ``queue``'s order: the same in every process."""
    return hashlib.blake2b(f"{queue}\0{url}".encode(), digest_size=8).digest()


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every client: loading the CA bundle costs ~40 ms each time."""
    return ssl.create_default_context(cafile=certifi.where())


def _headers(token: str | None) -> dict[str, str]:
    headers = {"accept": MSGPACK, "content-type": MSGPACK}
    if token:
        headers["authorization"] = f"Bearer {token}"
    return headers


def _timeout(call: _Call[Any], timeout: float) -> httpx.Timeout:
    return httpx.Timeout(timeout, read=timeout + call.extra_timeout)


def _transport_error(exc: Exception, url: str) -> StoreError:
    if isinstance(exc, NOT_SENT):
        return BrokerUnreachable(f"broker {url} unreachable: {type(exc).__name__}: {exc}")
    return StoreError(f"broker {url} failed mid-request: {type(exc).__name__}: {exc}")


# --------------------------------------------------------------------------- the requests, once


def _queue_path(name: str) -> str:
    """Where queue ``name``'s calls go (below the broker's URL)."""
    return f"{API_PREFIX}/queues/{name}"


def _durability(durability: str | None) -> dict[str, str]:
    """The ``durability`` of an enqueue's body: none for the queue's (as older brokers know)."""
    checked = validate.durability(durability)
    return {} if checked is None else {"durability": checked}


class _Requests:
    """The requests of one queue's methods; shared by the blocking and the async queue."""

    def __init__(self, name: str) -> None:
        self.name = check_name(name)
        self.base = _queue_path(self.name)

    def enqueue(
        self,
        payload: bytes,
        priority: int,
        delay: float,
        dedup_id: str | None,
        group: str | None,
        attributes: dict[str, str] | None,
        durability: str | None = None,
        tenant: str | None = None,
    ) -> _Call[str]:
        body: dict[str, Any] = {
            "payload": payload,
            "priority": priority,
            "delay": delay,
            "dedup_id": dedup_id,
            "group": group,
            "attributes": attributes,
            **_durability(durability),
        }
        if tenant is not None:  # only when given: a broker before tenants refuses no request
            body["tenant"] = tenant
        return _Call("POST", f"{self.base}/enqueue", _Id, lambda a: a.id, body)

    def enqueue_batch(
        self, items: Iterable[bytes | dict[str, Any]], durability: str | None = None
    ) -> _Call[list[str]]:
        if isinstance(items, bytes | str | dict):
            raise InvalidArgument("enqueue_batch takes a list of payloads or dicts")
        body = {"items": list(items), **_durability(durability)}
        return _Call("POST", f"{self.base}/enqueue-batch", _Ids, lambda a: a.ids, body)

    def enqueue_staged(
        self, objects: Iterable[StagedObject], token: str | None
    ) -> _Call[list[str] | None]:
        body = {"objects": list(objects), "token": token}
        return _Call("POST", f"{self.base}/enqueue-staged", _MaybeIds, lambda a: a.ids, body)

    def dequeue(
        self, max_messages: int, visibility_timeout: float | None, wait: float, per_group: int
    ) -> _Call[list[Message]]:
        body: dict[str, Any] = {"max_messages": max_messages, "wait": wait}
        if visibility_timeout is not None:
            body["visibility_timeout"] = visibility_timeout
        if per_group != 1:  # only when asked: a broker before it refuses no request
            body["per_group"] = per_group
        extra = wait + WAIT_MARGIN if isinstance(wait, int | float) else 0.0
        return _Call(
            "POST",
            f"{self.base}/dequeue",
            _Messages,
            lambda a: a.messages,
            body,
            extra_timeout=max(0.0, extra),
        )

    def complete(self, targets: Iterable[Target]) -> _Call[None]:
        receipts = [validate.receipt_of(t) for t in targets]
        return _Call(
            "POST", f"{self.base}/complete", _Empty, lambda a: None, {"receipts": receipts}
        )

    def fail(self, target: Target, error: str | None) -> _Call[float | None]:
        body = {"receipt": validate.receipt_of(target), "error": error}
        return _Call("POST", f"{self.base}/fail", _RetryAt, lambda a: a.retry_at, body)

    def release(self, targets: Target | Iterable[Target]) -> _Call[None]:
        items = [targets] if isinstance(targets, Message | str) else list(targets)
        body = {"receipts": [validate.receipt_of(t) for t in items]}
        return _Call("POST", f"{self.base}/release", _Empty, lambda a: None, body)

    def extend(self, target: Target, seconds: float, revive: bool) -> _Call[None]:
        body: dict[str, Any] = {"receipt": validate.receipt_of(target), "seconds": seconds}
        if validate.flag("revive", revive):
            body["revive"] = True  # only when asked: a broker before it refuses no request
        return _Call("POST", f"{self.base}/extend", _Empty, lambda a: None, body)

    def status(self, id: str) -> _Call[MessageStatus]:
        if not isinstance(id, str):
            raise InvalidArgument(f"id must be a string, got {type(id).__name__}")
        if not id:
            from .errors import MessageNotFound

            raise MessageNotFound("message '' not found")
        path = f"{self.base}/messages/{quote(id, safe='')}/status"
        return _Call("GET", path, _Status, lambda a: a.status)

    def stats(self) -> _Call[QueueStats]:
        return _Call("GET", f"{self.base}/stats", QueueStats)

    def peek(self, limit: int) -> _Call[list[Message]]:
        validate.count("limit", limit, 1, 10**9)
        return _Call(
            "GET", f"{self.base}/peek", _Messages, lambda a: a.messages, None, {"limit": limit}
        )

    def dead_letters(self, limit: int) -> _Call[list[Message]]:
        validate.count("limit", limit, 1, 10**9)
        return _Call(
            "GET",
            f"{self.base}/dead-letters",
            _Messages,
            lambda a: a.messages,
            None,
            {"limit": limit},
        )

    def redrive(self, ids: Iterable[str] | None) -> _Call[int]:
        if isinstance(ids, str):
            raise InvalidArgument("redrive takes a list of ids, not a single string")
        body = {"ids": None if ids is None else list(ids)}
        return _Call("POST", f"{self.base}/redrive", _Moved, lambda a: a.moved, body)

    def discard(self, ids: Iterable[str]) -> _Call[int]:
        if isinstance(ids, str):
            raise InvalidArgument("discard takes a list of ids, not a single string")
        body = {"ids": list(ids)}
        return _Call("POST", f"{self.base}/discard", _Removed, lambda a: a.removed, body)

    def configure(self, settings: dict[str, Any]) -> _Call[dict[str, Setting]]:
        body = {"settings": settings}
        return _Call("POST", f"{self.base}/configure", _Settings, lambda a: a.settings, body)

    def cleanup(self) -> _Call[int]:
        return _Call("POST", f"{self.base}/cleanup", _Removed, lambda a: a.removed, {})

    def purge(self) -> _Call[int]:
        return _Call("POST", f"{self.base}/purge", _Removed, lambda a: a.removed, {})

    def compact(self) -> _Call[CompactionReport]:
        return _Call("POST", f"{self.base}/compact", CompactionReport, None, {})


@documented
class _RemoteQueueBase:
    """The coroutines of a queue a broker serves, whatever makes its requests (``_send``):
    :class:`AsyncRemoteQueue` awaits them over aiohttp; :class:`RemoteQueue` runs the
    coroutines of an :class:`_InPlaceQueue`, whose requests block in place (httpx), to their
    end without an event loop (:func:`s3q.blocking.run_in_place`)."""

    def __init__(self, name: str) -> None:
        self._requests = _Requests(name)
        self._closed = False

    @property
    def _broker(self) -> str:
        """The broker calls go to now."""
        raise NotImplementedError

    async def _send(self, call: _Call[T]) -> T:
        raise NotImplementedError

    async def _run(self, call: _Call[T]) -> T:
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
        call = self._requests.enqueue(
            payload, priority, delay, dedup_id, group, attributes, durability, tenant
        )
        return await self._run(call)

    async def enqueue_batch(
        self, items: Iterable[bytes | dict[str, Any]], *, durability: str | None = None
    ) -> list[str]:
        return await self._run(self._requests.enqueue_batch(items, durability))

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
    ) -> list[Message]:
        call = self._requests.dequeue(max_messages, visibility_timeout, wait, per_group)
        return await self._run(call)

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


# --------------------------------------------------------------------------- blocking


class Client:
    """A connection pool to a broker (or to the brokers of a cluster, tried in turn).
    Thread-safe; a context manager."""

    def __init__(
        self,
        url: str | Sequence[str],
        token: str | None = None,
        timeout: float = 30.0,
        retries: int = RETRIES,
    ) -> None:
        self._nodes = _Nodes(url)
        self.timeout, self.retries = timeout, retries
        self._http = httpx.Client(
            headers=_headers(token),
            timeout=timeout,
            limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
            verify=_tls(),
        )

    @property
    def url(self) -> str:
        """The broker calls go to now."""
        return self._nodes.url

    def queue(self, name: str) -> RemoteQueue:
        """The queue ``name`` of the broker's store (opened by the broker on first use)."""
        return RemoteQueue(self, name)

    def queues(self) -> list[str]:
        """The names of the queues the broker has open."""
        call: _Call[list[str]] = _Call("GET", f"{API_PREFIX}/queues", _Queues, lambda a: a.queues)
        return self._run(call)

    def _run(self, call: _Call[T]) -> T:
        content = call.content()
        for attempt in range(self.retries + 1):
            node = self._nodes.url_for(call.queue)
            try:
                response = self._http.request(
                    call.method,
                    node + call.path,
                    content=content,
                    params=call.params,
                    timeout=_timeout(call, self.timeout),
                )
            except httpx.HTTPError as exc:
                self._nodes.raise_or_move_on(call, node, None, exc, last=attempt == self.retries)
            else:
                if response.status_code == 200:
                    return call.result(response.content)
                answer = (response.status_code, response.content)
                self._nodes.raise_or_move_on(call, node, answer, None, last=attempt == self.retries)
            time.sleep(_delay(attempt))
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<s3q.client.Client {self.url}>"


def connect(url: str | Sequence[str], token: str | None = None, timeout: float = 30.0) -> Client:
    """A client of the broker at ``url`` (e.g. ``http://127.0.0.1:8765``), or of a cluster:
    several URLs (a list, or comma-separated), tried in turn when one cannot serve."""
    return Client(url, token, timeout)


@documented
class _InPlaceQueue(_RemoteQueueBase):
    """The coroutines of :class:`AsyncRemoteQueue` over a blocking :class:`Client`: each
    request is made in place, so they never suspend (:class:`RemoteQueue` runs them)."""

    def __init__(self, client: Client, name: str) -> None:
        super().__init__(name)
        self._client = client

    @property
    def _broker(self) -> str:
        return self._client.url

    async def _send(self, call: _Call[T]) -> T:
        return self._client._run(call)


@documented
class RemoteQueue:
    """A queue served by a broker; the same methods as :class:`s3q.Queue`, over HTTP (those of
    :class:`AsyncRemoteQueue`, blocking: see :mod:`s3q.blocking`)."""

    def __init__(self, client: Client, name: str) -> None:
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


# --------------------------------------------------------------------------- async


#: headers of one request from (broker URL, method, path, query parameters, body)
Signer = Callable[[str, str, str, Mapping[str, Any], bytes | None], Mapping[str, str]]


class AsyncClient:
    """An async connection pool to a broker (or to the brokers of a cluster, tried in turn);
    an async context manager. ``headers``: sent with every request, besides the token.
    ``sign``: more headers for each request sent, made from it (brokers of a cluster sign the
    calls they forward to each other with it)."""

    def __init__(
        self,
        url: str | Sequence[str],
        token: str | None = None,
        timeout: float = 30.0,
        retries: int = RETRIES,
        *,
        headers: Mapping[str, str] | None = None,
        sign: Signer | None = None,
    ) -> None:
        self._nodes = _Nodes(url)
        self.timeout, self.retries = timeout, retries
        self._headers = {**_headers(token), **(headers or {})}
        self._sign = sign
        self._session: aiohttp.ClientSession | None = None  # made in the loop that uses it

    @property
    def url(self) -> str:
        """The broker calls go to now."""
        return self._nodes.url

    def queue(self, name: str) -> AsyncRemoteQueue:
        """The queue ``name`` of the broker's store (opened by the broker on first use)."""
        return AsyncRemoteQueue(self, name)

    async def queues(self) -> list[str]:
        """The names of the queues the broker has open."""
        call: _Call[list[str]] = _Call("GET", f"{API_PREFIX}/queues", _Queues, lambda a: a.queues)
        return await self._run(call)

    def _open(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(limit=100, ssl=_tls())
        self._session = aiohttp.ClientSession(headers=self._headers, connector=connector)
        return self._session

    async def _run(self, call: _Call[T]) -> T:
        content = call.content()
        session = self._session or self._open()
        timeout = aiohttp.ClientTimeout(
            connect=self.timeout, sock_read=self.timeout + call.extra_timeout
        )
        for attempt in range(self.retries + 1):
            node = self._nodes.url_for(call.queue)
            signed = None
            if self._sign is not None:
                signed = self._sign(node, call.method, call.path, call.params, content)
            try:
                async with session.request(
                    call.method,
                    node + call.path,
                    data=content,
                    params=call.params or None,
                    headers=signed,
                    timeout=timeout,
                ) as response:
                    status, body = response.status, await response.read()
            except TRANSPORT as exc:
                self._nodes.raise_or_move_on(call, node, None, exc, last=attempt == self.retries)
            else:
                if status == 200:
                    return call.result(body)
                self._nodes.raise_or_move_on(
                    call, node, (status, body), None, last=attempt == self.retries
                )
            await asyncio.sleep(_delay(attempt))
        raise AssertionError("unreachable")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<s3q.client.AsyncClient {self.url}>"


def connect_async(
    url: str | Sequence[str], token: str | None = None, timeout: float = 30.0
) -> AsyncClient:
    """An async client of the broker at ``url``, or of a cluster (as :func:`connect`)."""
    return AsyncClient(url, token, timeout)


@documented
class AsyncRemoteQueue(_RemoteQueueBase):
    """A queue served by a broker; the same coroutines as :class:`s3q.AsyncQueue`."""

    def __init__(self, client: AsyncClient, name: str) -> None:
        super().__init__(name)
        self._client = client

    @property
    def _broker(self) -> str:
        return self._client.url

    async def _send(self, call: _Call[T]) -> T:
        return await self._client._run(call)

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
