"""The broker's ASGI application: the native HTTP API over every queue of one store."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Annotated, Any, NamedTuple

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ..errors import InvalidArgument, S3QError, WriterFenced
from ..prices import Prices, of_store
from ..tracing import Server
from ..tracing import server as span_server
from ..wire.answers import PARTITIONS_HEADER, WRITER_HEADER, answers
from ..wire.codec import API_PREFIX, JSON, MSGPACK, AuthError, encode, error_body, status_of
from . import dashboard, guard, heap, openapi, peerauth, redact, request_log, sqs
from .dashboard.history import History
from .fastpath import Broker
from .limits import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_IDLE_CLOSE,
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_BODY,
    read_body,
)
from .metrics import CONTENT_TYPE as METRICS_TYPE
from .metrics import BrokerMetrics
from .registry import QueueRegistry
from .routes import ENDPOINTS, Call, Endpoint, Param

log = logging.getLogger("s3q.broker")

MSGPACK_TYPES = (MSGPACK, "application/x-msgpack", "application/vnd.msgpack")
MAX_JSON_BODY = 4 * 2**20  # JSON bodies: calls of tools (payloads need msgpack)


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
    """
    peer_token = min((t for t in tokens or () if t), default=None)
    metrics = BrokerMetrics()
    registry = QueueRegistry(
        store,
        options,
        address=address,
        token=peer_token,
        peers=peers or None,
        failover_timeout=failover_timeout,
        on_commit=metrics.commit,
        idle_close=idle_close,
    )
    secrets = [t.encode() for t in tokens or () if t]
    metrics.serves = registry.serves
    metrics.prices = of_store(registry.lease.kind == "object store", prices)
    history = History(registry)
    registry.on_open = history.opened

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        every = app.state.summary_every
        work = [history.run(), heap.trim_every(), request_log.summarize(metrics.tally, every)]
        tasks = [asyncio.create_task(job) for job in work]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await registry.close()

    routes = [
        Route(
            API_PREFIX + e.path,
            _endpoint(e, registry, secrets, metrics, Limits(max_body, max_batch, body_timeout)),
            methods=[e.method],
        )
        for e in ENDPOINTS
    ]
    routes += _documents(registry, metrics, secrets)
    routes += dashboard.routes(
        registry,
        metrics,
        history,
        lambda request: _authorize(request, secrets),
        auth=bool(secrets),
    )
    routes += sqs.routes(registry, sqs_keys, deny_unsigned=bool(secrets), metrics=metrics)
    middleware = guard.middleware(tokens=bool(secrets))
    spans = span_server()  # a tracer provider is configured by now, or none is
    app = (
        Broker(routes=routes, lifespan=lifespan, middleware=middleware)
        if spans is None
        else TracedBroker(spans, routes=routes, lifespan=lifespan, middleware=middleware)
    )
    app.host_check = None if secrets else guard.HostCheck()  # as guard.middleware's
    app.state.registry = registry
    app.state.summary_every = request_log.SUMMARY_EVERY  # (s3q.broker.serve sets it)
    return app


def _documents(
    registry: QueueRegistry, metrics: BrokerMetrics, secrets: list[bytes]
) -> list[Route]:
    """``/openapi.json`` and ``/metrics`` (which needs a token, if the broker has any)."""
    document = encode(openapi.document(), as_json=True)

    async def openapi_json(request: Request) -> Response:
        return Response(document, media_type=JSON)

    async def metrics_text(request: Request) -> Response:
        try:
            _authorize(request, secrets)
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
    accept = request.headers.get("accept", "")
    return MSGPACK not in accept and ("json" in accept or "*/*" in accept or not accept)


def _answer(request: Request, status: int, body: Any) -> Response:
    as_json = _wants_json(request)
    return Response(encode(body, as_json), status, media_type=JSON if as_json else MSGPACK)


def _authorize(
    request: Request, secrets: list[bytes], registry: QueueRegistry | None = None
) -> None:
    """Check the request's bearer token, or (``registry``: on the native API) the signature
    of a call another broker of the cluster forwarded (its body is checked once read)."""
    if not secrets:
        return
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if registry is not None and scheme.lower() == peerauth.AUTH_SCHEME.lower():
        request.state.peer_digest = peerauth.verify(
            secrets,
            registry.address,
            request.method,
            request.scope["path"],
            request.query_params.multi_items(),
            token,
        )
        return
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthError("missing bearer token (Authorization: Bearer <token>)", 401)
    given = token.strip().encode()
    # compare with every token, so the time taken does not tell which one nearly matched
    if not any([hmac.compare_digest(given, s) for s in secrets]):
        raise AuthError("invalid bearer token", 403)


async def _body(request: Request, limits: Limits) -> _Body:
    # a type no web page can send without the broker's consent (CORS), even for no body
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != JSON and kind not in MSGPACK_TYPES:
        raise InvalidArgument(
            f"unsupported content-type {kind or 'none'!r}: use {MSGPACK} or {JSON}"
        )
    as_json = kind == JSON
    # JSON is for tools (payloads cannot travel in it): its smaller limit bounds its decoding,
    # which cannot refuse a long list before reaching its end
    limit, setting = (
        (min(limits.body, MAX_JSON_BODY), "JSON bodies")
        if as_json
        else (limits.body, "s3q serve --max-body")
    )
    raw = await read_body(request, limit, setting, limits.body_timeout)
    signed: str | None = getattr(request.state, "peer_digest", None)
    if signed is not None:  # a call forwarded by another broker: its body is what it signed
        peerauth.check_body(signed, raw)
    if not raw:
        return _Body(as_json, {})
    try:
        # the arguments are split, not decoded: each is decoded by _value, against its type
        fields = (msgspec.json if as_json else msgspec.msgpack).decode(raw, type=_FIELDS)
    except msgspec.ValidationError:
        raise InvalidArgument("the request body must be a map of argument names") from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise InvalidArgument(f"malformed {kind} body: {str(exc)[:200]}") from None
    return _Body(as_json, fields)


_FIELDS = dict[str, msgspec.Raw]


class _Body(NamedTuple):
    as_json: bool
    fields: dict[str, msgspec.Raw]


class Limits(NamedTuple):
    body: int  # bytes
    batch: int  # entries of a list argument
    body_timeout: float  # seconds


@functools.lru_cache(maxsize=16)
def _list_of(max_batch: int, nullable: bool) -> Any:
    """The type of a list argument: a longer list is refused at its header (msgpack)."""
    bounded = Annotated[list[Any], msgspec.Meta(max_length=max_batch)]
    return bounded | None if nullable else bounded


def _value(param: Param, raw: msgspec.Raw, as_json: bool, max_batch: int) -> Any:
    """Body argument ``param``, decoded from its ``raw`` bytes. The queue checks values; types
    it does not check on a list-like argument, and the length of lists, are checked here."""
    decoder = msgspec.json if as_json else msgspec.msgpack
    names = _kinds(param)
    try:
        if "array" in names:
            return decoder.decode(raw, type=_list_of(max_batch, "null" in names))
        return decoder.decode(raw)
    except msgspec.ValidationError as exc:
        if "length" in str(exc):
            raise InvalidArgument(
                f"{param.name} has more than {max_batch:,} entries; this broker takes at most "
                f"{max_batch:,} per call (s3q serve --max-batch)"
            ) from None
        raise InvalidArgument(f"{param.name} must be a list: {exc}") from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise InvalidArgument(f"malformed {param.name}: {str(exc)[:200]}") from None


def _kinds(param: Param) -> list[str]:
    kinds = param.schema.get("type")
    return [kinds] if isinstance(kinds, str) else list(kinds or ())


def _query(param: Param, value: str) -> Any:
    if param.schema.get("type") == "integer":
        try:
            return int(value)
        except ValueError:
            raise InvalidArgument(f"{param.name} must be an integer, got {value!r}") from None
    return value


class _Plan(NamedTuple):
    """What an endpoint takes, worked out once rather than on each request."""

    params: tuple[Param, ...]
    needs_body: bool
    declared: frozenset[str]  # body arguments
    allowed_query: frozenset[str]

    @classmethod
    def of(cls, endpoint: Endpoint) -> _Plan:
        return cls(
            endpoint.params,
            any(p.where == "body" for p in endpoint.params),
            frozenset(p.name for p in endpoint.params if p.where == "body"),
            frozenset(p.name for p in endpoint.params if p.where == "query"),
        )


async def _arguments(plan: _Plan, request: Request, limits: Limits) -> dict[str, Any]:
    body = (
        await _body(request, limits)
        if plan.needs_body or request.method == "POST"
        else _Body(False, {})
    )
    unknown = body.fields.keys() - plan.declared
    if unknown:
        raise InvalidArgument(f"unknown argument(s): {', '.join(sorted(map(str, unknown)))}")
    # no query string (the calls of s3q's client): no QueryParams to parse
    query = request.query_params if request.scope.get("query_string") else {}
    unknown_query = query.keys() - plan.allowed_query
    if unknown_query:
        raise InvalidArgument(f"unknown query parameter(s): {', '.join(sorted(unknown_query))}")
    args: dict[str, Any] = {}
    for param in plan.params:
        if param.where == "path":
            if param.name != "name":  # the queue's name is the registry's to check
                args[param.name] = request.path_params[param.name]
        elif param.where == "query" and param.name in query:
            args[param.name] = _query(param, query[param.name])
        elif param.where == "body" and param.name in body.fields:
            raw = body.fields[param.name]
            args[param.name] = _value(param, raw, body.as_json, limits.batch)
        elif param.required:
            raise InvalidArgument(f"missing argument {param.name!r}")
    return args


def _endpoint(
    endpoint: Endpoint,
    registry: QueueRegistry,
    secrets: list[bytes],
    metrics: BrokerMetrics,
    limits: Limits,
) -> Callable[[Request], Awaitable[Response]]:
    plan = _Plan.of(endpoint)

    async def serve(request: Request) -> Response:
        name: str | None = request.path_params.get("name")
        started = time.perf_counter()
        outcome = "ok"
        metrics.serving += 1
        try:
            _authorize(request, secrets, registry)
            call = Call(registry, request, name, await _arguments(plan, request, limits))
            try:
                result = await endpoint.handler(call)
            except WriterFenced:
                # the queue's writer lost it to another broker: nothing was done, so the
                # call goes once more, to the new leader (another call may have evicted the
                # stopped queue already)
                if name is None:
                    raise
                await registry.evict_stopped(name)
                result = await endpoint.handler(call)
        except S3QError as exc:
            outcome = type(exc).__name__
            await registry.evict_stopped(name)
            text = redact.message(exc, name, registry.store)
            return _answer(request, status_of(exc), error_body(exc, text))
        except Exception as exc:
            outcome = "internal"
            log.exception("%s %s failed", request.method, request.url.path)
            return _answer(request, 500, error_body(exc, redact.INTERNAL))
        finally:
            metrics.serving -= 1
            metrics.observe(name, endpoint.operation, outcome, time.perf_counter() - started)
        return _answer(request, 200, result)

    async def named(request: Request) -> Response:
        """``serve``, its answer naming the queue's writer that the call reached (noted by
        ``Call.queue``; a forwarded call's, by its leader's answer) in ``s3q-writer``."""
        with answers() as seen:
            response = await serve(request)
        if seen.writer is not None:
            response.headers[WRITER_HEADER] = seen.writer
        if seen.partitions is not None:
            response.headers[PARTITIONS_HEADER] = str(seen.partitions)
        return response

    return named
