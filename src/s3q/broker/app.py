"""The broker's ASGI application: the native HTTP API over every queue of one store."""

from __future__ import annotations

import contextlib
import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NamedTuple

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import InvalidArgument, S3QError, WriterFenced
from . import dashboard, guard, openapi, sqs
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
from .wire import API_PREFIX, JSON, MSGPACK, AuthError, encode, error_body, status_of

log = logging.getLogger("s3q.broker")

MSGPACK_TYPES = (MSGPACK, "application/x-msgpack", "application/vnd.msgpack")


def create_app(
    store: str,
    *,
    tokens: set[str] | None = None,
    options: dict[str, Any] | None = None,
    sqs_keys: dict[str, str] | None = None,
    address: str | None = None,
    failover_timeout: float = 30.0,
    max_body: int = DEFAULT_MAX_BODY,
    max_batch: int = DEFAULT_MAX_BATCH,
    body_timeout: float = DEFAULT_BODY_TIMEOUT,
    idle_close: float = DEFAULT_IDLE_CLOSE,
) -> Starlette:
    """The broker for every queue of ``store`` (queue ``NAME`` is ``<store>/NAME``).

    ``tokens``: when given and not empty, every ``/v1`` request needs
    ``Authorization: Bearer <one of them>``; the brokers of a cluster share them. ``options``:
    passed to ``s3q.open_async`` for every queue opened. ``address``: the URL other brokers of
    the cluster reach this one at; a queue another broker leads is served by forwarding to it,
    and taken over when that broker is gone (waiting up to ``failover_timeout`` seconds).
    ``sqs_keys``: access key id -> secret; when given, every request to the SQS endpoint
    (``POST /``) must be SigV4-signed with one of them (see docs/sqs.md). ``max_body``: the
    largest request body of the native API, in bytes (413 beyond it, read no further);
    ``max_batch``: the most entries in one of its lists (a batch's items, receipts, ids);
    ``body_timeout``: seconds a request body may take to arrive (408 beyond). ``idle_close``:
    seconds after which a queue no call used is closed (0: never); the next call reopens it.
    """
    peer_token = min(t for t in tokens) if tokens else None
    metrics = BrokerMetrics()
    registry = QueueRegistry(
        store,
        options,
        address=address,
        token=peer_token,
        failover_timeout=failover_timeout,
        on_commit=metrics.commit,
        idle_close=idle_close,
    )
    secrets = [t.encode() for t in tokens or () if t]
    metrics.serves = registry.serves

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await registry.close()

    routes = [
        Route(
            API_PREFIX + e.path,
            _endpoint(e, registry, secrets, metrics, Limits(max_body, max_batch, body_timeout)),
            methods=[e.method],
        )
        for e in ENDPOINTS
    ]
    document = encode(openapi.document(), as_json=True)

    async def openapi_json(request: Request) -> Response:
        return Response(document, media_type=JSON)

    async def metrics_text(request: Request) -> Response:
        try:
            _authorize(request, secrets)
        except S3QError as exc:
            return _answer(request, status_of(exc), error_body(exc))
        return Response(await metrics.render(registry), media_type=METRICS_TYPE)

    routes.append(Route("/openapi.json", openapi_json, methods=["GET"]))
    routes.append(Route("/metrics", metrics_text, methods=["GET"]))
    routes += dashboard.routes(
        registry, metrics, lambda request: _authorize(request, secrets), auth=bool(secrets)
    )
    routes.append(sqs.route(registry, sqs_keys, deny_unsigned=bool(secrets), metrics=metrics))
    app = Starlette(
        routes=routes, lifespan=lifespan, middleware=guard.middleware(tokens=bool(secrets))
    )
    app.state.registry = registry
    return app


def _wants_json(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return MSGPACK not in accept and ("json" in accept or "*/*" in accept or not accept)


def _answer(request: Request, status: int, body: Any) -> Response:
    as_json = _wants_json(request)
    return Response(encode(body, as_json), status, media_type=JSON if as_json else MSGPACK)


def _authorize(request: Request, secrets: list[bytes]) -> None:
    if not secrets:
        return
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthError("missing bearer token (Authorization: Bearer <token>)", 401)
    given = token.strip().encode()
    # compare with every token, so the time taken does not tell which one nearly matched
    if not any([hmac.compare_digest(given, s) for s in secrets]):
        raise AuthError("invalid bearer token", 403)


async def _body(request: Request, limits: Limits) -> dict[str, Any]:
    # a type no web page can send without the broker's consent (CORS), even for no body
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != JSON and kind not in MSGPACK_TYPES:
        raise InvalidArgument(
            f"unsupported content-type {kind or 'none'!r}: use {MSGPACK} or {JSON}"
        )
    raw = await read_body(request, limits.body, "s3q serve --max-body", limits.body_timeout)
    if not raw:
        return {}
    try:
        decoded = msgspec.json.decode(raw) if kind == JSON else msgspec.msgpack.decode(raw)
    except msgspec.DecodeError as exc:
        raise InvalidArgument(f"malformed {kind} body: {exc}") from None
    if not isinstance(decoded, dict):
        raise InvalidArgument("the request body must be a map")
    return decoded


class Limits(NamedTuple):
    body: int  # bytes
    batch: int  # entries of a list argument
    body_timeout: float  # seconds


def _check(param: Param, value: Any, max_batch: int) -> Any:
    if param.where == "query":
        if param.schema.get("type") == "integer":
            try:
                return int(value)
            except ValueError:
                raise InvalidArgument(f"{param.name} must be an integer, got {value!r}") from None
        return value
    kinds = param.schema.get("type")
    if kinds is None:  # oneOf and the like: left to the queue's own checks
        return value
    names = [kinds] if isinstance(kinds, str) else list(kinds)
    # the queue checks values; types it does not check on a list-like argument are checked here
    if "array" in names and not isinstance(value, list) and not ("null" in names and value is None):
        raise InvalidArgument(f"{param.name} must be a list, got {type(value).__name__}")
    if isinstance(value, list) and len(value) > max_batch:
        raise InvalidArgument(
            f"{param.name} has {len(value):,} entries; this broker takes at most {max_batch:,} "
            "per call (s3q serve --max-batch)"
        )
    return value


async def _arguments(endpoint: Endpoint, request: Request, limits: Limits) -> dict[str, Any]:
    needs_body = any(p.where == "body" for p in endpoint.params)
    given = await _body(request, limits) if needs_body or request.method == "POST" else {}
    declared = {p.name for p in endpoint.params if p.where == "body"}
    unknown = set(given) - declared
    if unknown:
        raise InvalidArgument(f"unknown argument(s): {', '.join(sorted(map(str, unknown)))}")
    allowed_query = {p.name for p in endpoint.params if p.where == "query"}
    unknown_query = set(request.query_params) - allowed_query
    if unknown_query:
        raise InvalidArgument(f"unknown query parameter(s): {', '.join(sorted(unknown_query))}")
    args: dict[str, Any] = {}
    for param in endpoint.params:
        if param.name == "name" and param.where == "path":
            continue
        source: Any = {
            "path": request.path_params,
            "query": request.query_params,
            "body": given,
        }[param.where]
        if param.name in source:
            args[param.name] = _check(param, source[param.name], limits.batch)
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
    async def serve(request: Request) -> Response:
        name: str | None = request.path_params.get("name")
        started = time.perf_counter()
        outcome = "ok"
        metrics.in_progress.inc()
        try:
            _authorize(request, secrets)
            call = Call(registry, request, name, await _arguments(endpoint, request, limits))
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
            return _answer(request, status_of(exc), error_body(exc))
        except Exception as exc:
            outcome = "internal"
            log.exception("%s %s failed", request.method, request.url.path)
            return _answer(request, 500, error_body(exc))
        finally:
            metrics.in_progress.dec()
            metrics.observe(name, endpoint.operation, outcome, time.perf_counter() - started)
        return _answer(request, 200, result)

    return serve
