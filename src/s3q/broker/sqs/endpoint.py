"""The SQS endpoint: ``POST /`` on the broker's port, authenticated, dispatched to an action.

Authentication: with access keys, every request must carry a valid SigV4 signature made with
one of them. Without keys, a broker that has bearer tokens refuses every SQS request (it could
not tell who sent it); a broker with neither accepts any request, signed or not (loopback
development mode, like the native API without tokens).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...errors import (
    InvalidArgument,
    MessageNotFound,
    QueueClosed,
    QueueFull,
    QueueLocked,
    ReceiptExpired,
    S3QError,
    StoreError,
    Unavailable,
    WriterFenced,
)
from ...wire.codec import BodyTooLarge, RequestTimeout
from .. import redact
from ..limits import SQS_MAX_BODY, read_body
from ..metrics import BrokerMetrics
from ..registry import QueueRegistry
from . import query, sigv4
from .actions import ACTIONS, UNSUPPORTED, Call, Service
from .catalog import Catalog
from .protocol import (
    SqsError,
    decode,
    encode,
    error_response,
    json_action,
    response_headers,
)
from .shapes import Shape

log = logging.getLogger("s3q.broker.sqs")


def sqs_error(exc: S3QError, text: str | None = None) -> SqsError:
    """The SQS error that stands for an s3q error (``text``, if given, for its own)."""
    if isinstance(exc, SqsError):
        return exc
    text = str(exc) if text is None else text
    if isinstance(exc, BodyTooLarge):
        return SqsError("RequestEntityTooLarge", text, 413)
    if isinstance(exc, RequestTimeout):
        return SqsError("RequestTimeout", text, 408)
    if isinstance(exc, InvalidArgument):
        return SqsError("InvalidParameterValue", text)
    if isinstance(exc, QueueFull):
        return SqsError("OverLimit", text, 403)
    if isinstance(exc, ReceiptExpired | MessageNotFound):
        return SqsError("ReceiptHandleIsInvalid", text)
    if isinstance(exc, StoreError | WriterFenced | QueueClosed | QueueLocked | Unavailable):
        return SqsError("ServiceUnavailable", text, 503)
    return SqsError("InternalFailure", text, 500)


def _answer(status: int, headers: dict[str, str], body: bytes) -> Response:
    return Response(body, status, headers=headers)


class Endpoint:
    """The ``POST /`` handler of one broker."""

    def __init__(
        self,
        registry: QueueRegistry,
        keys: Mapping[str, str] | None,
        deny_unsigned: bool,
        metrics: BrokerMetrics | None = None,
    ) -> None:
        self.registry = registry
        self.keys = dict(keys or {})
        self.deny_unsigned = deny_unsigned and not self.keys
        self.metrics = metrics
        self.service = Service(registry, Catalog(registry.store, registry.store_options))

    async def authenticated_body(self, request: Request) -> bytes:
        """The request's body, read only once the caller is known: with access keys, the
        signature's key and date are checked first and the signature over the body after."""
        if self.deny_unsigned:
            raise SqsError(
                "AccessDenied",
                "This broker has bearer tokens but no SQS access keys: the SQS endpoint is "
                "closed (give --sqs-credentials).",
                403,
            )
        if not self.keys:
            return await read_body(request, SQS_MAX_BODY)
        headers: dict[str, list[str]] = {}
        for name, value in request.scope["headers"]:  # as request.headers.items() gives them
            key = name.decode("latin-1").lower()
            if key in headers:
                headers[key].append(value.decode("latin-1"))
            else:
                headers[key] = [value.decode("latin-1")]
        checked = sigv4.credential(headers, self.keys)
        body = await read_body(request, SQS_MAX_BODY)
        raw_path = request.scope.get("raw_path") or request.url.path.encode()
        # request.url is built only for a query string (the SQS protocols send none)
        query = request.url.query if request.scope.get("query_string") else ""
        sigv4.verify_body(checked, request.method, raw_path.decode("latin-1"), query, headers, body)
        return body

    async def handle(self, request: Request) -> Response:
        started = time.perf_counter()
        call = Call(request)
        action = "unknown"
        outcome = "ok"
        target = request.headers.get("x-amz-target")
        as_query = query.is_query(request.headers.get("content-type"), target)
        try:
            body = await self.authenticated_body(request)
            arguments: Callable[[type[Shape]], Shape]
            if as_query:
                parsed = query.QueryRequest(body, _queue_url(request))
                action, arguments = str(parsed.action), parsed.arguments
            else:
                action, arguments = json_action(target), partial(decode, body)
            if action in UNSUPPORTED:
                raise SqsError("UnsupportedOperation", f"{action} is not supported by s3q.")
            if action not in ACTIONS:
                raise SqsError("InvalidAction", f"The action {action} is not valid.")
            shape, handler = ACTIONS[action]
            result: Any = await handler(self.service, call, arguments(shape))
        except S3QError as exc:
            error = sqs_error(exc, redact.message(exc, call.queue, self.registry.store))
            outcome = error.name
            await self.registry.evict_stopped(call.queue)
            return _answer(*(query.error_response if as_query else error_response)(error))
        except Exception:
            outcome = "internal"
            log.exception("SQS %s failed", action)
            error = SqsError("InternalFailure", redact.INTERNAL, 500)
            return _answer(*(query.error_response if as_query else error_response)(error))
        finally:
            if self.metrics is not None:
                label = action if action in ACTIONS else "invalid"
                self.metrics.observe(
                    call.queue, f"sqs.{label}", outcome, time.perf_counter() - started
                )
        if as_query:
            return _answer(*query.answer(action, result))
        return _answer(200, response_headers(), encode(result))


def _queue_url(request: Request) -> str | None:
    """The queue a request posted to a queue's URL names (the query protocol allows it)."""
    if request.url.path.rstrip("/") in ("", "/"):
        return None
    return str(request.url.replace(query="", fragment=""))


def routes(
    registry: QueueRegistry,
    keys: Mapping[str, str] | None = None,
    deny_unsigned: bool = False,
    metrics: BrokerMetrics | None = None,
) -> list[Route]:
    """The SQS endpoint's Starlette routes: ``POST /``, and ``POST`` to a queue's URL."""
    endpoint = Endpoint(registry, keys, deny_unsigned, metrics)
    return [
        Route("/", endpoint.handle, methods=["POST"]),
        Route("/{account:int}/{queue}", endpoint.handle, methods=["POST"]),
    ]
