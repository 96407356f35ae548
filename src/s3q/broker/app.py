"""The broker's ASGI application: the native HTTP API over every queue of one store."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from ..errors import S3QError
from ..prices import Prices, of_store
from ..tracing import Server
from ..tracing import server as span_server
from ..wire.answers import PARTITIONS_HEADER, WRITER_HEADER
from ..wire.codec import API_PREFIX, JSON, MSGPACK, AuthError, encode, error_body, status_of
from . import calls, dashboard, guard, heap, openapi, request_log, sqs, subscriptions
from .access import OPERATIONS, Access, Caller
from .arguments import Limits, Plan, arguments
from .audit import Audit
from .dashboard.history import History
from .fastpath import Broker
from .forward import FORWARDED
from .lean import LeanRoutes, NativeCalls, SqsCalls
from .limits import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_IDLE_CLOSE,
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_BODY,
    disconnected,
)
from .metrics import CONTENT_TYPE as METRICS_TYPE
from .metrics import BrokerMetrics
from .registry import QueueRegistry
from .routes import ENDPOINTS, Call, Endpoint

log = logging.getLogger("s3q.broker")


def create_app(
    store: str,
    *,
    tokens: set[str] | None = None,
    options: dict[str, Any] | None = None,
    sqs_keys: dict[str, str] | None = None,
    address: str | None = None,
    peers: Iterable[str] | None = None,
    failover_timeout: float = 30.0,
    max_body: int = DEFAULT_MAX_BODY,
    max_batch: int = DEFAULT_MAX_BATCH,
    body_timeout: float = DEFAULT_BODY_TIMEOUT,
    idle_close: float = DEFAULT_IDLE_CLOSE,
    prices: Prices | None = None,
    principals: str | os.PathLike[str] | None = None,
    audit_log: str | None = None,
    audit_all: bool = False,
) -> Starlette:
    """The broker for every queue of ``store`` (queue ``NAME`` is ``<store>/NAME``).

    ``tokens``: when given and not empty, every ``/v1`` request needs
    ``Authorization: Bearer <one of them>``; the brokers of a cluster share them. ``options``:
    passed to ``s3q.open_async`` for every queue opened. ``address``: the URL other brokers of
    the cluster reach this one at; a queue another broker leads is served by forwarding to it,
    and taken over when that broker is gone (waiting up to ``failover_timeout`` seconds).
    ``peers``: the URLs of the brokers calls may be forwarded to; none given: with tokens,
    none, without, those on this machine (docs/broker.md, "A cluster's trust model"). A
    forwarded call is signed with a token (``s3q.broker.peerauth``), which is never sent.
    ``sqs_keys``: access key id -> secret; when given, every request to the SQS endpoint
    (``POST /``) must be SigV4-signed with one of them (see docs/sqs.md). ``max_body``: the
    largest request body of the native API, in bytes (413 beyond it, read no further);
    ``max_batch``: the most entries in one of its lists (a batch's items, receipts, ids);
    ``body_timeout``: seconds a request body may take to arrive (408 beyond). ``idle_close``:
    seconds after which a queue no call used is closed (0: never); the next call reopens it.
    ``prices``: what the store charges per request, for the spend the dashboard and
    ``/metrics`` reckon (default: S3's list prices on an object store, nothing on a local
    directory or in memory).
    ``principals``: a principals file (docs/broker.md, "Principals and grants"), read again on
    SIGHUP and when it changes (``tokens`` and ``sqs_keys`` have every grant). ``audit_log``:
    the audit trail's file (``-``: standard output), ``audit_all``: of every call.
    """
    metrics = BrokerMetrics()
    audit = None if audit_log is None else Audit(audit_log, audit_all)
    access = Access(tokens or (), sqs_keys, principals, audit=audit, refusals=metrics.refusals)
    registry = QueueRegistry(
        store,
        options,
        address=address,
        token=access.cluster_token,
        peers=access.forwarding(peers),
        failover_timeout=failover_timeout,
        on_commit=metrics.commit,
        idle_close=idle_close,
    )
    metrics.serves = registry.serves
    metrics.prices = of_store(registry.lease.kind == "object store", prices)
    history = History(registry)
    registry.on_open = history.opened
    lifespan = functools.partial(_lifespan, registry, metrics, history, access)
    limits = Limits(max_body, max_batch, body_timeout)
    routes = _api(registry, access, metrics, limits)
    routes += _documents(registry, metrics, access)
    routes += dashboard.routes(registry, metrics, history, access)
    sqs_endpoint = sqs.Endpoint(registry, access, metrics=metrics)
    routes += sqs.routes(sqs_endpoint)
    middleware = guard.middleware(tokens=access.authenticated)
    spans = span_server()  # a tracer provider is configured by now, or none is
    app = (
        Broker(routes=routes, lifespan=lifespan, middleware=middleware)
        if spans is None
        else TracedBroker(spans, routes=routes, lifespan=lifespan, middleware=middleware)
    )
    app.host_check = None if access.authenticated else guard.HostCheck()  # as guard.middleware's
    app.state.registry, app.state.access = registry, access
    # the lean path takes no span: a traced broker answers every call through the generic stack
    native = NativeCalls(registry, metrics, access, limits, app.host_check)
    lean = LeanRoutes(native, SqsCalls(sqs_endpoint, app.host_check), body_timeout)
    app.state.lean = lean if spans is None else None
    app.state.summary_every, app.state.max_frame = request_log.SUMMARY_EVERY, max_body
    return app


@contextlib.asynccontextmanager
async def _lifespan(
    registry: QueueRegistry,
    metrics: BrokerMetrics,
    history: History,
    access: Access,
    app: Starlette,
) -> AsyncIterator[None]:
    """What runs beside the broker's requests while it serves (the principals file watched,
    and read again on SIGHUP); its queues closed at its end."""
    every = app.state.summary_every
    work = [history.run(), heap.trim_every(), request_log.summarize(metrics.tally, every)]
    tasks = [asyncio.create_task(job) for job in [*work, access.watch()]]
    loop = asyncio.get_running_loop()
    try:  # (only in the main thread: a broker run on another thread reloads on change alone)
        loop.add_signal_handler(signal.SIGHUP, access.hangup)
        hangup = True
    except (ValueError, RuntimeError, NotImplementedError, AttributeError):
        hangup = False
    try:
        yield
    finally:
        if hangup:
            loop.remove_signal_handler(signal.SIGHUP)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await registry.close()
        if access.audit is not None:
            access.audit.close()


def _api(
    registry: QueueRegistry, access: Access, metrics: BrokerMetrics, limits: Limits
) -> list[BaseRoute]:
    """The native API's routes, under ``/v1``: its calls and its subscriptions."""
    routes: list[BaseRoute] = [
        Route(
            API_PREFIX + e.path,
            _endpoint(e, registry, access, metrics, limits),
            methods=[e.method],
        )
        for e in ENDPOINTS
    ]
    return [*routes, subscriptions.route(registry, metrics, access, limits)]


def _documents(registry: QueueRegistry, metrics: BrokerMetrics, access: Access) -> list[Route]:
    """``/openapi.json`` and ``/metrics`` (which needs a token, if the broker has any, of a
    principal that may read every queue)."""
    document = encode(openapi.document(), as_json=True)

    async def openapi_json(request: Request) -> Response:
        return Response(document, media_type=JSON)

    async def metrics_text(request: Request) -> Response:
        try:
            caller = access.identify(request, "metrics", None)
            if not caller.principal.reads_all():
                text = (
                    f"principal {caller.principal.name} may not read /metrics (it needs read "
                    'of every queue: a grant { allow = "read", queues = "*" } and no deny of read)'
                )
                raise access.refused(
                    AuthError(text, 403),
                    "not-granted",
                    caller,
                    caller.credential,
                    caller.source,
                    "metrics",
                    None,
                    "read",
                )
        except S3QError as exc:
            return _answer(request, status_of(exc), error_body(exc))
        return Response(await metrics.render(registry), media_type=METRICS_TYPE)

    return [
        Route("/openapi.json", openapi_json, methods=["GET"]),
        Route("/metrics", metrics_text, methods=["GET"]),
    ]


class TracedBroker(Broker):
    """The broker serving each HTTP request in a SERVER span (``s3q.tracing``); a broker
    without a tracer provider is a plain :class:`Broker`, which does no tracing work."""

    def __init__(self, spans: Server, **options: Any) -> None:
        super().__init__(**options)
        self.spans = spans

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self.spans.serve(scope, receive, send, super().__call__)
        else:
            await super().__call__(scope, receive, send)


def _wants_json(request: Request) -> bool:
    return calls.wants_json(request.headers.get("accept", ""))


def _answer(request: Request, status: int, body: Any) -> Response:
    as_json = _wants_json(request)
    return Response(encode(body, as_json), status, media_type=JSON if as_json else MSGPACK)


def _endpoint(
    endpoint: Endpoint,
    registry: QueueRegistry,
    access: Access,
    metrics: BrokerMetrics,
    limits: Limits,
) -> Callable[[Request], Awaitable[Response]]:
    plan = Plan.of(endpoint)
    operation = endpoint.operation
    action = OPERATIONS[operation]

    async def serve(request: Request) -> Response:
        name: str | None = request.path_params.get("name")
        caller: Caller | None = None

        async def checked() -> Call:
            nonlocal caller
            who = access.identify(request, operation, name, registry.address, peers=True)
            access.check(who, action, name, operation)  # before the body is read
            caller = who
            who.acting(action)
            args = await arguments(plan, request, limits)
            gone = functools.partial(disconnected, request)
            sees = functools.partial(access.allows, who, "read")
            return Call(registry, name, args, FORWARDED in request.headers, gone, sees)

        def done(outcome: str) -> None:
            access.done(caller, action, operation, name, outcome)

        found = await calls.answer(endpoint, registry, metrics, name, checked, done)
        response = _answer(request, found.status, found.body)
        if found.writer is not None:
            response.headers[WRITER_HEADER] = found.writer
        if found.partitions is not None:
            response.headers[PARTITIONS_HEADER] = str(found.partitions)
        return response

    return serve
