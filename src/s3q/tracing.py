"""Traces that cross the queue: OpenTelemetry spans, optional and off by default.

s3q never imports OpenTelemetry first. It traces only once the program has imported
``opentelemetry.trace`` (any program that configures tracing has): until then each enqueue pays
one dict lookup, then a look at the current span; a worker or a broker looks once, when it
starts. The spans follow the OpenTelemetry messaging conventions:

- an enqueue (embedded, or through the client) inside a valid span is a PRODUCER span
  ``send <queue>`` when a tracer provider is configured, and each message carries its W3C trace
  context in the reserved attributes ``traceparent`` and ``tracestate``; with no provider, the
  current span's context is carried as it is. A message that already has a ``traceparent``
  keeps it.
- a worker runs each handler in a CONSUMER span ``process <queue>``, the child of (and linked to)
  the context the message carries, and records how it ended (:data:`OUTCOME`).
- a broker serves each HTTP request in a SERVER span, the child of the request's ``traceparent``.
  A request that came with no trace context is traced by the broker alone: the messages it
  enqueues carry none (no ``traceparent``, and so no ``AWSTraceHeader`` for SQS consumers), as
  a message's trace is its sender's to start.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from contextvars import ContextVar
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

    from .message import Message

__all__ = [
    "OUTCOME",
    "TRACEPARENT",
    "TRACESTATE",
    "Consumer",
    "Process",
    "Publish",
    "Server",
    "consumer",
    "headers",
    "publishing",
    "server",
    "tracer",
]

TRACEPARENT = "traceparent"  # reserved message attributes: the W3C trace context
TRACESTATE = "tracestate"
SYSTEM = "s3q"  # messaging.system
OUTCOME = "messaging.s3q.outcome"  # completed, retried or dead
ATTEMPTS = "messaging.s3q.message.delivery_count"
_API = "opentelemetry.trace"

T = TypeVar("T")

_cached: tuple[object, Tracer] | None = None  # the provider and s3q's tracer from it

Asgi = Callable[[MutableMapping[str, Any], Any, Any], Awaitable[None]]


def tracer() -> Tracer | None:
    """s3q's tracer of the configured global tracer provider; None while the program has not
    imported OpenTelemetry or configured a provider (the API's default proxy, or a no-op)."""
    if _API not in sys.modules:
        return None
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    global _cached
    if _cached is None or _cached[0] is not provider:
        _cached = (provider, provider.get_tracer("s3q", _version()))
    return _cached[1]


def _version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("s3q")
    except metadata.PackageNotFoundError:
        return None


def _messaging(queue: str, operation: str) -> dict[str, Any]:
    """The attributes every messaging span of s3q has."""
    return {
        "messaging.system": SYSTEM,
        "messaging.destination.name": queue,
        "messaging.operation.name": operation,
        "messaging.operation.type": operation,
    }


def _carrier(context: Context | None = None) -> dict[str, str]:
    """The W3C trace context of the current span (or of ``context``'s): empty if not valid."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context)
    return carrier


def _extract(carrier: Mapping[str, str]) -> Context:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract(carrier)


def _failed(span: Span, error: BaseException) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.record_exception(error)
    span.set_attribute("error.type", type(error).__qualname__)
    span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))


class _Current:
    """A span made the current one while the ``with`` block runs (or from :meth:`_open` to
    :meth:`close`), then ended; an exception that escapes the block marks it failed."""

    _span: Span | None = None
    _token: Any = None

    def _open(self) -> None:
        if self._span is not None:
            from opentelemetry import context, trace

            self._token = context.attach(trace.set_span_in_context(self._span))

    def close(self, error: BaseException | None = None) -> None:
        """End the span, no longer the current one (``error``: what failed it)."""
        span = self._span
        if span is None:
            return
        from opentelemetry import context

        context.detach(self._token)
        if isinstance(error, Exception):
            _failed(span, error)
        span.end()

    def __enter__(self) -> None:
        self._open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(exc)


# ------------------------------------------------------------------------------ producers


class Publish(_Current):
    """An enqueue's PRODUCER span ``send <queue>`` (None without a provider), and the trace
    context its messages carry (:meth:`stamp`)."""

    def __init__(self, span: Span | None, context: dict[str, str], batch: bool) -> None:
        self._span = span
        self._batch = batch
        self.context = context

    def stamp(self, attributes: Any) -> Any:
        """A message's ``attributes`` with the trace context added, unless they hold one
        already or are not a mapping (which the queue refuses)."""
        if attributes is None:
            return dict(self.context)
        if isinstance(attributes, Mapping) and TRACEPARENT not in attributes:
            return {**attributes, **self.context}
        return attributes

    async def send(self, sending: Awaitable[T]) -> T:
        """``sending`` (the enqueue) awaited in the span; the id it answers recorded."""
        with self:
            answer = await sending
            if self._span is not None and not self._batch:
                ids = [answer] if isinstance(answer, str) else answer
                if isinstance(ids, list) and len(ids) == 1:
                    self._span.set_attribute("messaging.message.id", ids[0])
        return answer


def publishing(queue: str, attributes: Iterable[Any], batch: int | None = None) -> Publish | None:
    """The tracing of an enqueue of messages with these ``attributes`` (``batch``: how many, for
    ``enqueue_batch``) to ``queue`` (a name, or a queue URL): None when nothing is to trace (no
    valid current span, or every message carries a context already). Without OpenTelemetry
    loaded it costs a dict lookup, and with it but no span, a look at the current span."""
    if not _in_span() or _untraced.get():
        return None
    if all(isinstance(a, Mapping) and TRACEPARENT in a for a in attributes):
        return None
    made = tracer()
    if made is None:
        return Publish(None, _carrier(), batch is not None)
    from opentelemetry import trace

    name = _name(queue)
    attrs = _messaging(name, "send")
    if batch is not None:
        attrs["messaging.batch.message_count"] = batch
    span = made.start_span(f"send {name}", kind=trace.SpanKind.PRODUCER, attributes=attrs)
    return Publish(span, _carrier(trace.set_span_in_context(span)), batch is not None)


def _in_span() -> bool:
    """Whether the program has loaded OpenTelemetry and a valid span is the current one."""
    api = sys.modules.get(_API)
    return api is not None and bool(api.get_current_span().get_span_context().is_valid)


def _name(queue: str) -> str:
    """A queue's name, given it or its URL: the last part of its path (``memory://NAME``:
    NAME)."""
    if "/" not in queue:
        return queue
    from urllib.parse import urlsplit

    from .store import queue_name

    return queue_name(queue) or urlsplit(queue).netloc


def headers() -> dict[str, str] | None:
    """The current span's W3C trace context as HTTP headers; None without a valid one."""
    return _carrier() if _in_span() else None


# ------------------------------------------------------------------------------ consumers


class Process(_Current):
    """A handler's CONSUMER span ``process <queue>``: the current one until :meth:`close`."""

    def __init__(self, span: Span) -> None:
        self._span = span

    def ended(self, outcome: str, error: BaseException | None = None) -> None:
        """The handler's message was ``completed``, ``retried`` or is ``dead`` (``error``: what
        the handler raised)."""
        span = self._span
        assert span is not None
        span.set_attribute(OUTCOME, outcome)
        if error is not None:
            _failed(span, error)


class Consumer:
    """The spans of a worker's handlers on ``queue``."""

    def __init__(self, tracer: Tracer, queue: str) -> None:
        self._tracer = tracer
        self._queue = queue
        self._name = f"process {queue}"

    def process(self, msg: Message) -> Process:
        """The span of a handler of ``msg``, made the current one: the child of the context
        ``msg`` carries, and linked to it (the conventions' creation context)."""
        from opentelemetry import trace

        parent = None
        links = None
        if TRACEPARENT in msg.attributes:
            parent = _extract(msg.attributes)
            created = trace.get_current_span(parent).get_span_context()
            if created.is_valid:
                links = [trace.Link(created)]
            else:
                parent = None
        attributes = _messaging(self._queue, "process")
        attributes["messaging.message.id"] = msg.id
        attributes[ATTEMPTS] = msg.attempts
        span = self._tracer.start_span(
            self._name, parent, trace.SpanKind.CONSUMER, attributes, links
        )
        process = Process(span)
        process._open()
        return process


def consumer(queue: str) -> Consumer | None:
    """The spans of a worker's handlers on ``queue`` (a name, or a queue URL); None without a
    configured tracer provider."""
    made = tracer()
    return None if made is None else Consumer(made, _name(queue))


# ------------------------------------------------------------------------------ the broker

#: set while a broker serves a request that came with no trace context
_untraced: ContextVar[bool] = ContextVar("s3q_untraced", default=False)


class Server:
    """The SERVER span of each HTTP request to an ASGI app (the broker's)."""

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer

    async def serve(
        self, scope: MutableMapping[str, Any], receive: Any, send: Any, app: Asgi
    ) -> None:
        """``app`` serving one request, in a span named by its method and route."""
        from opentelemetry import trace

        method: str = scope["method"]
        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope["headers"]
            if name in (b"traceparent", b"tracestate")
        }
        span = self._tracer.start_span(
            method,
            _extract(carrier) if carrier else None,
            trace.SpanKind.SERVER,
            {"http.request.method": method, "url.path": scope["path"]},
        )
        status = 0

        async def sending(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        untraced = _untraced.set(not carrier)  # (its messages carry no context of the broker's)
        try:
            with trace.use_span(span, end_on_exit=True):
                await app(scope, receive, sending)
                route = scope.get("route")
                path = getattr(route, "path", None)
                if isinstance(path, str):
                    span.update_name(f"{method} {path}")
                    span.set_attribute("http.route", path)
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    span.set_status(trace.Status(trace.StatusCode.ERROR))
        finally:
            _untraced.reset(untraced)


def server() -> Server | None:
    """The spans of a broker's requests; None without a configured tracer provider (then the
    broker does no tracing work at all)."""
    made = tracer()
    return None if made is None else Server(made)
