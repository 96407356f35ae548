"""uvicorn's HTTP/1.1 protocol (httptools), with the hot calls answered without the ASGI stack.

uvicorn takes each request through a scope, a request-response cycle, a task running the ASGI
application, Starlette's middleware and router, a ``Request`` and a ``Response``: some 300 µs
of a broker's CPU per call on this kind of machine, several times what the queue spends on a
single enqueue. Here a request the lean path may answer (:class:`.native.NativeCalls.admit`)
is read straight from the parser's callbacks: its body is kept as it arrives and, once whole,
decoded and answered by one task, whose answer is written to the transport as bytes.

Anything else, and a lean request whose arguments the generic stack would refuse, is handed to
uvicorn's own handling with the bytes received, as if it had never been looked at. A body
that stops coming is refused as the generic stack refuses it (408, after the broker's body
timeout), and its connection closed. A lean call is only taken while no other request of the
connection is being answered, so pipelined requests are answered in order (uvicorn queues
those behind it as behind any request).

This relies on uvicorn's ``HttpToolsProtocol`` members (``cycle``, ``on_response_complete``,
``flow``, ``tasks``, ``server_state``), the same that :mod:`..connections` relies on; the tests
of the broker's limits and answers run through both paths.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from ..limits import body_late
from .routes import Admitted, LeanRoutes

if TYPE_CHECKING:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _Base
else:
    _Base = object


class _Nothing:
    def set(self) -> None:
        pass


class LeanCycle:
    """What uvicorn's protocol reads of the request being answered, for a lean call."""

    message_event = _Nothing()  # (uvicorn's wakes the ASGI task's receive; none here)

    def __init__(self, keep_alive: bool) -> None:
        self.keep_alive = keep_alive
        self.response_complete = False
        self.disconnected = False

    async def gone(self) -> bool:
        """Whether the client has closed the connection."""
        return self.disconnected


class LeanProtocol(_Base):
    """The mixin that takes lean calls (before uvicorn's ``HttpToolsProtocol`` in the bases)."""

    lean: LeanRoutes | None = None
    _head: Admitted | None = None
    _chunks: list[bytes]
    _body_timer: asyncio.TimerHandle | None = None

    def on_headers_complete(self) -> None:
        lean = self.lean
        if lean is not None and (self.cycle is None or self.cycle.response_complete):
            head = lean.admit(self.parser.get_method(), self.url, self.headers, self.client)
            if head is not None and self._free() and self.parser.get_http_version() == "1.1":
                self._head, self._chunks = head, []
                return
        super().on_headers_complete()

    def _free(self) -> bool:
        limit = self.limit_concurrency
        return limit is None or (len(self.connections) < limit and len(self.tasks) < limit)

    def on_body(self, body: bytes) -> None:
        if self._head is not None:
            self._chunks.append(body)
        else:
            super().on_body(body)

    def on_message_complete(self) -> None:
        head = self._head
        if head is None:
            super().on_message_complete()
            return
        self._head = None
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        body = b"".join(self._chunks)
        cycle = LeanCycle(self.parser.should_keep_alive())
        answering = head.take(body, cycle, self.server_state.default_headers)
        if answering is None:
            self._generic(body, complete=True)
            return
        self.cycle = cycle  # type: ignore[assignment]
        self._start(self._write(cycle, answering))

    def _start(self, answering: Coroutine[Any, Any, None]) -> None:
        task = self.loop.create_task(answering)
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)  # (awaited by a graceful shutdown, counted against the limit)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._head is not None and self._body_timer is None:
            # the body goes on in later reads: it has the generic stack's time to arrive
            assert self.lean is not None
            timeout = self.lean.body_timeout
            self._body_timer = self.loop.call_later(timeout, self._body_late, self._head)

    def _body_late(self, head: Admitted) -> None:
        self._body_timer = None
        if self._head is not head or self.transport.is_closing():
            return
        self._head = None
        self.flow.pause_reading()  # (the rest of the body is not read)
        assert self.lean is not None
        late = body_late(self.lean.body_timeout, sum(map(len, self._chunks)))
        cycle = LeanCycle(keep_alive=False)
        self.cycle = cycle  # type: ignore[assignment]
        self._start(self._write(cycle, head.refuse(late, self.server_state.default_headers)))

    def connection_lost(self, exc: Exception | None) -> None:
        self._head = None
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().connection_lost(exc)

    def _generic(self, body: bytes, complete: bool) -> None:
        """The request the parser is in, handed to uvicorn's handling as it stands."""
        super().on_headers_complete()
        cycle = self.cycle
        if body:
            cycle.body += body
        if complete:
            cycle.more_body = False
        cycle.message_event.set()

    async def _write(self, cycle: LeanCycle, answering: Coroutine[Any, Any, bytes]) -> None:
        answer = await answering
        if self.transport.is_closing():
            return
        if self.flow.write_paused:
            await self.flow.drain()
        self.transport.write(answer)
        cycle.response_complete = True
        if not cycle.keep_alive:
            self.transport.close()
        self.on_response_complete()
