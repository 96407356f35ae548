"""The async client's HTTP/1.1 (:mod:`.http11`) over kept-alive asyncio connections to each
broker: a request written as one buffer, its answer parsed as it arrives, no task or stream
object per call.

A call through aiohttp cost the client ~440 µs of CPU and ~390 Python calls on this machine;
here it is a few dozen.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Mapping

import httptools

from . import http11
from .http11 import MAX_IDLE, REUSE_WITHIN, Answer, Broken, NotSent, Reading, Target, TimedOut

__all__ = ["AsyncTransport"]


class _Connection(asyncio.Protocol):
    """One connection: at most one request in flight, its answer parsed as bytes come."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reading: Reading | None = None
        self.answered: asyncio.Future[None] | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        reading, answered = self.reading, self.answered
        if reading is None or answered is None or answered.done():
            self.lost = True  # bytes nobody asked for: not used again
            return
        try:
            reading.feed(data)
        except httptools.HttpParserError as exc:
            answered.set_exception(Broken(f"not an HTTP answer: {exc}"))
            return
        if reading.done:
            answered.set_result(None)

    def eof_received(self) -> bool:
        self._ended()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._ended(exc)

    def _ended(self, exc: Exception | None = None) -> None:
        self.lost = True
        reading, answered = self.reading, self.answered
        if reading is None or answered is None or answered.done():
            return
        try:
            reading.ended()
        except ConnectionResetError as cut:
            answered.set_exception(Broken(str(exc or cut)))
            return
        answered.set_result(None)

    async def exchange(self, data: bytes, timeout: float) -> Reading:
        """Send ``data`` and await the answer (Broken or TimedOut)."""
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self.reading, self.answered = Reading(), loop.create_future()
        self.transport.write(data)
        timer = loop.call_later(timeout, _expire, self.answered, timeout)
        try:
            await self.answered
        finally:
            timer.cancel()
        return self.reading

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.close()


def _expire(answered: asyncio.Future[None], timeout: float) -> None:
    if not answered.done():
        answered.set_exception(TimedOut(f"no answer within {timeout:g} s"))


class AsyncTransport:
    """Requests to the broker at ``url``, each on a connection of its own while it runs; made
    and used on one event loop."""

    def __init__(self, url: str, connect_timeout: float, tls: ssl.SSLContext) -> None:
        self._target = Target.of(url)
        self._tls = tls
        self._timeout = connect_timeout
        self._idle: list[tuple[_Connection, float]] = []  # and since when (monotonic)

    async def request(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: Mapping[str, str],
        read_timeout: float,
    ) -> Answer:
        """Send one request and await its answer (NotSent, Broken or TimedOut on failure).
        Cancelled, its connection is closed."""
        data = http11.request(self._target, method, path, body, headers)
        conn = self._take() or await self._connect()
        try:
            reading = await conn.exchange(data, read_timeout)
        except BaseException:
            conn.close()
            raise
        if reading.keep and not conn.lost and len(self._idle) < MAX_IDLE:
            conn.reading = conn.answered = None
            self._idle.append((conn, time.monotonic()))
        else:
            conn.close()
        return reading.answer()

    def _take(self) -> _Connection | None:
        """An idle connection still open and not idle too long, if any."""
        now = time.monotonic()
        while self._idle:
            conn, since = self._idle.pop()
            if not conn.lost and now - since < REUSE_WITHIN:
                return conn
            conn.close()
        return None

    async def _connect(self) -> _Connection:
        target, loop = self._target, asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    _Connection,
                    target.host,
                    target.port,
                    ssl=self._tls if target.https else None,
                ),
                self._timeout,
            )
        except (OSError, TimeoutError) as exc:
            raise NotSent(f"{type(exc).__name__}: {exc}") from exc
        return conn

    def close(self) -> None:
        """Close the idle connections (those in use close when their call ends)."""
        idle, self._idle = self._idle, []
        for conn, _ in idle:
            conn.close()
