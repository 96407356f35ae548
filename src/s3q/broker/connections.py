"""What a slow or silent connection may hold: a request's head must arrive in time.

uvicorn closes a kept-alive connection that goes silent between requests, but not one that
never completes a request head: a client that connects and sends nothing, or a byte every few
seconds ("slowloris"), would hold its connection, and a slot of ``limit_concurrency``, for
ever. Here a request head must be complete within ``head_timeout`` seconds of the connection
being made, or of the first byte of the next request on a kept-alive connection; otherwise
the connection is closed. (A body is held to its own limit by :func:`.limits.read_body`.)

HTTP/1.1 is parsed by httptools (llhttp, in C) when it is installed (the ``broker`` extra
brings it), else by h11 (pure Python, several times the CPU per request). h11 refuses a head
over 16 KiB (400, connection closed); uvicorn's httptools protocol would keep any head its
timeout lets arrive, so the same limit is kept here.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.h11_impl import H11Protocol

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools missing: h11 it is
    HttpToolsProtocol = None  # type: ignore[assignment,misc]

from .lean import LeanProtocol, LeanRoutes
from .limits import DEFAULT_HEAD_TIMEOUT

log = logging.getLogger("s3q.broker")


if TYPE_CHECKING:  # what the mixins are mixed into (both protocols have the same members)
    _Protocol = H11Protocol
    _HttpTools = HttpToolsProtocol
else:
    _Protocol = _HttpTools = object

#: The largest request head, in bytes: h11's default (``max_incomplete_event_size``).
HEAD_LIMIT = 16 * 1024


class _HeadTimeout(_Protocol):
    """What both HTTP protocols get: the request head's timer (a mixin before the protocol)."""

    head_timeout = DEFAULT_HEAD_TIMEOUT
    _head_timer: asyncio.TimerHandle | None = None
    _head_since: float | None = None  # when the head awaited began to arrive (None: none)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_began()

    def data_received(self, data: bytes) -> None:
        before = self.cycle
        if self._head_since is None and (before is None or before.response_complete):
            self._head_began()
        super().data_received(data)
        if self.cycle is not before:  # the head arrived
            self._head_since = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_since = None
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def handle_websocket_upgrade(self, *event: Any) -> None:
        """The connection becomes a WebSocket (a subscription): no more request heads."""
        self._head_since = None
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().handle_websocket_upgrade(*event)

    def _head_began(self) -> None:
        # one timer per connection, not one per request: when it fires, it looks at the head
        # awaited then (if any), and is set again for what that head has left
        self._head_since = self.loop.time()
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout, self._head_check)

    def _head_check(self) -> None:
        self._head_timer = None
        if self._head_since is None:
            return  # no head awaited: the next one sets the timer
        left = self._head_since + self.head_timeout - self.loop.time()
        if left > 0:
            self._head_timer = self.loop.call_later(left, self._head_check)
        elif not self.transport.is_closing():
            log.info("closed a connection whose request head took over %g s", self.head_timeout)
            self.transport.close()


class _HeadLimit(_HttpTools):
    """A head over ``HEAD_LIMIT`` bytes is refused as h11 refuses it: 400, connection closed.
    Bytes are counted from the first chunk received once a head has begun to the chunk that
    ends it (so a head is never refused below the limit; it may pass it by one chunk)."""

    _in_head = False
    _head_bytes = 0

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._in_head and self._head_bytes > HEAD_LIMIT and not self.transport.is_closing():
            self._in_head = False
            message = "Invalid HTTP request received."
            self.logger.warning(message)
            self.send_400_response(message)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_bytes = True, 0

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()


class _UpgradeOnGet(_Protocol):
    """Only a GET becomes a WebSocket (a subscription, :mod:`.subscriptions`): a request of
    another method that asks for one is answered as the request it is (uvicorn would hand it
    to its WebSocket protocol, which never answers it)."""

    def _should_upgrade(self) -> bool:
        parser = getattr(self, "parser", None)  # (httptools; h11 has set the scope by now)
        method = parser.get_method() if parser is not None else self.scope["method"].encode()
        return method == b"GET" and bool(super()._should_upgrade())


def protocol(
    head_timeout: float = DEFAULT_HEAD_TIMEOUT,
    parser: str = "auto",
    lean: LeanRoutes | None = None,
) -> type[Any]:
    """uvicorn's HTTP/1.1 protocol (``uvicorn.Config(http=...)``) with ``head_timeout``:
    ``parser`` "httptools", "h11", or "auto" (httptools if installed). ``lean``: the calls
    answered by the lean path (:mod:`.lean`; with httptools only)."""
    fast = parser == "httptools" or (parser == "auto" and HttpToolsProtocol is not None)
    if fast and HttpToolsProtocol is None:
        raise ImportError("httptools is not installed")
    if not fast:
        bases: tuple[type, ...] = (_HeadTimeout, _UpgradeOnGet, H11Protocol)
        return type("HeadTimeoutProtocol", bases, {"head_timeout": head_timeout})
    bases = (_HeadTimeout, _HeadLimit, _UpgradeOnGet, LeanProtocol, HttpToolsProtocol)
    return type("BrokerProtocol", bases, {"head_timeout": head_timeout, "lean": lean})
