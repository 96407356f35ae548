"""An HTTP proxy in front of an S3 server that fails the way S3 does, for the real client.

    with FaultProxy("http://127.0.0.1:9000", REALISTIC, seed=7, hang=1.5) as proxy:
        store = open_store("s3://bucket/queue", endpoint_url=proxy.endpoint, ...)

Every request draws its fault from a :class:`~s3q.faults.schedule.Schedule`, as a
:class:`~s3q.faults.store.FaultyStore` does, but the faults happen on the wire: a 500 or
503 SlowDown answer with S3's XML error body, a connection reset, a request that hangs past the
client's timeout, a body cut short after its headers promised more, a request forwarded and
applied whose answer never comes. The proxy runs its own event loop on a thread, so sync and
async callers alike can use it. Needs aiohttp (in the ``test`` extra).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from types import TracebackType
from urllib.parse import urlsplit

from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

from .schedule import FaultProfile, Schedule

#: Headers that belong to one connection, not to the request or answer forwarded.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "host",
        "content-length",
    }
)

_ERRORS = {
    500: ("InternalError", "We encountered an internal error. Please try again."),
    503: ("SlowDown", "Please reduce your request rate."),
}


class FaultProxy:
    """A proxy on 127.0.0.1 forwarding to ``upstream`` (an S3 endpoint URL), failing on the
    schedule drawn from ``profile`` and ``seed``. ``hang`` is how long a hung request or a
    lost answer hangs before the proxy drops its connection: longer than the client's
    timeout, so the client gives up first."""

    def __init__(
        self, upstream: str, profile: FaultProfile, seed: int = 0, hang: float = 2.0
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.schedule = Schedule(profile, seed)
        self.hang = hang
        self.endpoint = ""
        self.forwarded = 0  # requests that reached the upstream server
        #: seconds each forwarded request took the upstream server to answer (the store's own
        #: time, apart from the faults'); whoever reads it may empty it
        self.upstream_seconds: list[float] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> str:
        """Start serving; returns the endpoint URL to give the client."""
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        self.endpoint = asyncio.run_coroutine_threadsafe(self._serve(), loop).result(30)
        return self.endpoint

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def _serve(self) -> str:
        self._session = ClientSession(
            connector=TCPConnector(limit=256),
            timeout=ClientTimeout(total=60),
            auto_decompress=False,
        )
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{path:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        return f"http://{host}:{port}"

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    # -- one request ---------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        kind, key = _describe(request)
        read = request.method in ("GET", "HEAD")
        schedule = self.schedule
        if latency := schedule.latency():
            await asyncio.sleep(latency)
        fault = schedule.draw(kind, key, read)
        if fault == "partition":
            schedule.struck(fault)
            return _reset(request)
        if fault == "delay":
            schedule.struck(fault)
            await asyncio.sleep(schedule.delay())
        elif fault == "before":
            schedule.struck(fault)
            how = schedule.choose("500", "503", "reset")
            return _reset(request) if how == "reset" else _error(int(how))
        elif fault == "hang":
            schedule.struck(fault)
            if schedule.chance(0.5):
                await self._forward(request, body)
            await asyncio.sleep(self.hang)
            return _reset(request)
        status, headers, answer = await self._forward(request, body)
        if fault == "after":
            schedule.struck(fault)
            how = schedule.choose("500", "reset", "timeout")
            if how == "500":
                return _error(500)
            if how == "timeout":
                await asyncio.sleep(self.hang)
            return _reset(request)
        if fault == "truncate" and request.method == "GET" and len(answer) > 1:
            schedule.struck(fault)
            return await _truncated(request, status, headers, answer)
        return web.Response(status=status, body=answer, headers=headers)

    async def _forward(
        self, request: web.Request, body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        url = self.upstream + request.rel_url.raw_path_qs
        started = time.monotonic()
        async with self._session.request(
            request.method, url, data=body, headers=headers, allow_redirects=False
        ) as answer:
            data = await answer.read()
            out = {k: v for k, v in answer.headers.items() if k.lower() not in HOP_BY_HOP}
            self.forwarded += 1
            self.upstream_seconds.append(time.monotonic() - started)
            return answer.status, out, data


def _describe(request: web.Request) -> tuple[str, str]:
    """The store request this HTTP request makes (a name from ``schedule.REQUESTS``) and
    the object key it names, for path-style S3 URLs (``/bucket/key``)."""
    _, _, key = urlsplit(request.path).path.lstrip("/").partition("/")
    method, headers = request.method, request.headers
    if method == "GET" and ("list-type" in request.query or not key):
        return "list", request.query.get("prefix", "")
    if method in ("GET", "HEAD"):
        return ("get_versioned" if "If-None-Match" in headers else "get"), key
    if method == "PUT":
        if "If-Match" in headers:
            return "put_versioned", key
        return ("put_new" if "If-None-Match" in headers else "put"), key
    if method in ("DELETE", "POST"):
        return "delete", key
    return method.lower(), key


def _error(status: int) -> web.Response:
    code, message = _ERRORS[status]
    xml = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        "<RequestId>fault-proxy</RequestId></Error>"
    )
    return web.Response(status=status, text=xml, content_type="application/xml")


def _reset(request: web.Request) -> web.Response:
    """Drop the client's connection without an answer, as a reset or a dead peer does."""
    transport = request.transport
    if transport is not None:
        transport.abort()
    return web.Response(status=599)  # never sent: the connection is gone


async def _truncated(
    request: web.Request, status: int, headers: dict[str, str], body: bytes
) -> web.StreamResponse:
    """Headers promising the whole body, part of it, then the connection dropped."""
    response = web.StreamResponse(status=status, headers=headers)
    response.content_length = len(body)
    await response.prepare(request)
    with contextlib.suppress(ConnectionError):
        await response.write(body[: len(body) // 2])
    await asyncio.sleep(0)
    return _reset(request)
