"""Connection pools to a broker, or to the brokers of a cluster: :class:`Client` (blocking:
:mod:`.transport`) and :class:`AsyncClient` (asyncio: :mod:`.async_transport`), both speaking
:mod:`.http11`. Each sends a call, retries it as allowed, and moves on to the next broker of
the queue's order when one cannot serve it. (aiohttp carries subscriptions' WebSockets.)"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import urlencode

import aiohttp
import certifi

from .. import tracing
from ..wire.answers import PARTITIONS_HEADER, WRITER_HEADER, heard, spread
from ..wire.codec import MSGPACK
from .async_transport import AsyncTransport
from .calls import RETRIES, TRANSPORT, Call, delay
from .http11 import Answer, TransportError
from .nodes import Nodes
from .queues import AsyncRemoteQueue, RemoteQueue
from .requests import cluster, list_queues, queue_path
from .stalls import STALL_TIMEOUT, BrokerStalled, awaited, watching
from .transport import Transport

T = TypeVar("T")


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every client: loading the CA bundle costs ~40 ms each time."""
    return ssl.create_default_context(cafile=certifi.where())


def _headers(token: str | None) -> dict[str, str]:
    headers = {"accept": MSGPACK, "content-type": MSGPACK}
    if token:
        headers["authorization"] = f"Bearer {token}"
    return headers


def _ws_url(node: str, name: str) -> str:
    """The address of queue ``name``'s subscriptions at broker ``node``."""
    return "ws" + node.removeprefix("http") + queue_path(name) + "/subscribe"


def _with(headers: dict[str, str], more: dict[str, str] | None) -> dict[str, str]:
    """``headers`` and ``more`` (the trace context, say), if any."""
    return headers if not more else {**headers, **more}


def _spread(nodes: Nodes, call: Call[Any], partitions: str | None) -> None:
    """An answer's ``s3q-partitions`` header (if any): noted, and the queue's calls spread."""
    if partitions and partitions.isdigit():
        spread(int(partitions))
        nodes.spread(call.queue, partitions)


class Client:
    """A connection pool to a broker (or to the brokers of a cluster, tried in turn).
    Thread-safe; a context manager. ``follow``: also learn the cluster's other brokers from
    the given ones, and turn to them when these cannot answer."""

    def __init__(
        self,
        url: str | Sequence[str],
        token: str | None = None,
        timeout: float = 30.0,
        retries: int = RETRIES,
        *,
        follow: bool = True,
    ) -> None:
        self._nodes = Nodes(url, follow=follow)
        self.timeout, self.retries = timeout, retries
        # its own HTTP/1.1 (.transport): a call costs this process a fraction of urllib3's
        # CPU (benchmarks/client_cpu.py), which single calls and a consumer on the broker's
        # own cores feel
        self._headers = _headers(token)
        self._transports: dict[str, Transport] = {}  # by broker URL
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        """The broker calls go to now."""
        return self._nodes.url

    def queue(self, name: str) -> RemoteQueue:
        """The queue ``name`` of the broker's store (opened by the broker on first use)."""
        return RemoteQueue(self, name)

    def queues(self) -> list[str]:
        """The names of the queues the broker has open."""
        return self._run(list_queues())

    def _run(self, call: Call[T]) -> T:
        content = call.content()
        path = call.path if not call.params else f"{call.path}?{urlencode(call.params)}"
        if not self._nodes.asked:
            self._learn()
        for attempt in range(self.retries + 1):
            node = self._nodes.url_for(call.queue)
            probe = functools.partial(self._answers, node)
            try:
                with watching(probe) if self._nodes.several else contextlib.nullcontext():
                    answer = self._transport(node).request(
                        call.method,
                        path,
                        content,
                        _with(self._headers, tracing.headers()),
                        self.timeout + call.extra_timeout,
                    )
            except (TransportError, BrokerStalled) as exc:
                self._nodes.raise_or_move_on(call, node, None, exc, last=attempt == self.retries)
            else:
                heard(answer.headers.get(WRITER_HEADER))
                _spread(self._nodes, call, answer.headers.get(PARTITIONS_HEADER))
                if answer.status == 200:
                    return call.result(answer.body)
                failed = (answer.status, answer.body)
                self._nodes.raise_or_move_on(call, node, failed, None, last=attempt == self.retries)
            time.sleep(delay(attempt))
        raise AssertionError("unreachable")

    def _channel(self, name: str) -> Any:
        """A WebSocket to the broker serving queue ``name``'s subscriptions (websockets)."""
        from websockets.sync.client import connect

        if not self._nodes.asked:
            self._learn()
        auth = {k: v for k, v in self._headers.items() if k == "authorization"}
        for attempt in range(self._nodes.count):  # (a broker not reached: the next one)
            node = self._nodes.url_for(name)
            url = _ws_url(node, name)
            try:
                return connect(
                    url,
                    additional_headers=auth,
                    ssl=_tls() if url.startswith("wss:") else None,
                    open_timeout=self.timeout,
                    max_size=None,  # (a push is as large as a dequeue's answer)
                    compression=None,
                )
            except OSError:
                self._nodes.move_on(name, node)
                if attempt == self._nodes.count - 1:
                    raise
        raise AssertionError("unreachable")

    def _learn(self) -> None:
        """Ask the given brokers for the cluster's (once one answers)."""
        for node in self._nodes.urls:
            try:
                answer = self._get(node, cluster().path, self.timeout)
            except TransportError:
                continue  # asked again before the next call
            self._nodes.learn(answer)
            return

    def _answers(self, node: str) -> bool:
        """Whether broker ``node`` answers a probe within ``STALL_TIMEOUT``."""
        try:
            self._get(node, cluster().path, STALL_TIMEOUT)
        except TransportError:
            return False
        return True

    def _get(self, node: str, path: str, timeout: float) -> tuple[int, bytes]:
        answer = self._transport(node).request("GET", path, None, self._headers, timeout)
        return answer.status, answer.body

    def _transport(self, node: str) -> Transport:
        """The connections to broker ``node``."""
        transport = self._transports.get(node)
        if transport is None:
            with self._lock:
                transport = self._transports.get(node)
                if transport is None:
                    transport = self._transports[node] = Transport(node, self.timeout, _tls())
        return transport

    def close(self) -> None:
        for transport in list(self._transports.values()):
            transport.close()

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


#: headers of one request from (broker URL, method, path, query parameters, body)
Signer = Callable[[str, str, str, Mapping[str, Any], bytes | None], Mapping[str, str]]


class AsyncClient:
    """An async connection pool to a broker (or to the brokers of a cluster, tried in turn;
    its own HTTP/1.1: :mod:`.async_transport`);
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
        follow: bool = True,
    ) -> None:
        self._nodes = Nodes(url, follow=follow)
        self.timeout, self.retries = timeout, retries
        self._headers = {**_headers(token), **(headers or {})}
        self._sign = sign
        self._transports: dict[str, AsyncTransport] = {}  # by broker URL, on the loop using them
        self._session: aiohttp.ClientSession | None = None  # subscriptions' WebSockets

    @property
    def url(self) -> str:
        """The broker calls go to now."""
        return self._nodes.url

    def queue(self, name: str) -> AsyncRemoteQueue:
        """The queue ``name`` of the broker's store (opened by the broker on first use)."""
        return AsyncRemoteQueue(self, name)

    async def queues(self) -> list[str]:
        """The names of the queues the broker has open."""
        return await self._run(list_queues())

    def _open(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(limit=100, ssl=_tls())
        self._session = aiohttp.ClientSession(headers=self._headers, connector=connector)
        return self._session

    async def _run(self, call: Call[T]) -> T:
        content = call.content()
        path = call.path if not call.params else f"{call.path}?{urlencode(call.params)}"
        if not self._nodes.asked:
            await self._learn()
        for attempt in range(self.retries + 1):
            node = self._nodes.url_for(call.queue)
            headers: Mapping[str, str] = _with(self._headers, tracing.headers())
            if self._sign is not None:
                signed = self._sign(node, call.method, call.path, call.params, content)
                headers = {**headers, **signed}
            try:
                sent = self._transport(node).request(
                    call.method, path, content, headers, self.timeout + call.extra_timeout
                )
                if self._nodes.several:
                    sent = awaited(sent, functools.partial(self._answers, node))
                answer = await sent
            except TRANSPORT as exc:
                self._nodes.raise_or_move_on(call, node, None, exc, last=attempt == self.retries)
            else:
                heard(answer.headers.get(WRITER_HEADER))
                _spread(self._nodes, call, answer.headers.get(PARTITIONS_HEADER))
                if answer.status == 200:
                    return call.result(answer.body)
                failed = (answer.status, answer.body)
                self._nodes.raise_or_move_on(call, node, failed, None, last=attempt == self.retries)
            await asyncio.sleep(delay(attempt))
        raise AssertionError("unreachable")

    def _transport(self, node: str) -> AsyncTransport:
        """The connections to broker ``node``."""
        transport = self._transports.get(node)
        if transport is None:
            transport = self._transports[node] = AsyncTransport(node, self.timeout, _tls())
        return transport

    async def _channel(self, name: str) -> aiohttp.ClientWebSocketResponse:
        """A WebSocket to the broker serving queue ``name``'s subscriptions."""
        if not self._nodes.asked:
            await self._learn()
        session = self._session or self._open()
        for attempt in range(self._nodes.count):  # (a broker not reached: the next one)
            node = self._nodes.url_for(name)
            try:
                return await session.ws_connect(
                    _ws_url(node, name),
                    timeout=aiohttp.ClientWSTimeout(ws_close=self.timeout),
                    max_msg_size=0,  # (a push is as large as a dequeue's answer)
                    autoping=True,
                )
            except aiohttp.ClientConnectorError:
                self._nodes.move_on(name, node)
                if attempt == self._nodes.count - 1:
                    raise
        raise AssertionError("unreachable")

    async def _learn(self) -> None:
        """Ask the given brokers for the cluster's (once one answers)."""
        for node in self._nodes.urls:
            try:
                answer = await self._get(node, self.timeout)
            except TRANSPORT:
                continue  # asked again before the next call
            self._nodes.learn((answer.status, answer.body))
            return

    async def _answers(self, node: str) -> bool:
        """Whether broker ``node`` answers a probe within ``STALL_TIMEOUT``."""
        try:
            await self._get(node, STALL_TIMEOUT)
        except TRANSPORT:
            return False
        return True

    async def _get(self, node: str, timeout: float) -> Answer:
        """The broker's answer to ``GET /v1/cluster`` (served without the store)."""
        return await self._transport(node).request(
            "GET", cluster().path, None, self._headers, timeout
        )

    async def close(self) -> None:
        for transport in self._transports.values():
            transport.close()
        self._transports.clear()
        if self._session is not None:  # (subscriptions' WebSockets)
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
