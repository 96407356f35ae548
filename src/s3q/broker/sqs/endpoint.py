"""The SQS endpoint: ``POST /`` on the broker's port, authenticated, dispatched to an action.

Authentication: with access keys, every request must carry a valid SigV4 signature made with
one of them. Without keys, a broker that has bearer tokens refuses every SQS request (it could
not tell who sent it); a broker with neither accepts any request, signed or not (loopback
development mode, like the native API without tokens).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
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
from .. import redact
from ..limits import SQS_MAX_BODY, read_body
from ..metrics import BrokerMetrics
from ..registry import QueueRegistry
from ..wire import BodyTooLarge, RequestTimeout
from . import sigv4
from .actions import ACTIONS, UNSUPPORTED, Call, Service
from .catalog import Catalog
from .protocol import TARGET_PREFIX, SqsError, decode, encode, error_response, response_headers

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


def _error(error: SqsError) -> Response:
    return _answer(*error_response(error))


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
        for name, value in request.headers.items():
            headers.setdefault(name.lower(), []).append(value)
        checked = sigv4.credential(headers, self.keys)
        body = await read_body(request, SQS_MAX_BODY)
        raw_path = request.scope.get("raw_path") or request.url.path.encode()
        sigv4.verify_body(
            checked, request.method, raw_path.decode("latin-1"), request.url.query, headers, body
        )
        return body

    async def handle(self, request: Request) -> Response:
        started = time.perf_counter()
        call = Call(request)
        action = "unknown"
        outcome = "ok"
        try:
            body = await self.authenticated_body(request)
            target = request.headers.get("x-amz-target", "")
            if not target.startswith(TARGET_PREFIX):
                raise SqsError(
                    "InvalidAction",
                    "Only the AWS JSON 1.0 protocol of SQS is served here "
                    f"(X-Amz-Target: {TARGET_PREFIX}<Action>).",
                )
            action = target[len(TARGET_PREFIX) :]
            if action in UNSUPPORTED:
                raise SqsError("UnsupportedOperation", f"{action} is not supported by s3q.")
            if action not in ACTIONS:
                raise SqsError("InvalidAction", f"The action {action} is not valid.")
            shape, handler = ACTIONS[action]
            result: Any = await handler(self.service, call, decode(body, shape))
        except S3QError as exc:
            error = sqs_error(exc, redact.message(exc, call.queue, self.registry.store))
            outcome = error.name
            await self.registry.evict_stopped(call.queue)
            return _error(error)
        except Exception:
            outcome = "internal"
            log.exception("SQS %s failed", action)
            return _error(SqsError("InternalFailure", redact.INTERNAL, 500))
        finally:
            if self.metrics is not None:
                label = action if action in ACTIONS else "invalid"
                self.metrics.observe(
                    call.queue, f"sqs.{label}", outcome, time.perf_counter() - started
                )
        return _answer(200, response_headers(), encode(result))


def route(
    registry: QueueRegistry,
    keys: Mapping[str, str] | None = None,
    deny_unsigned: bool = False,
    metrics: BrokerMetrics | None = None,
) -> Route:
    """The SQS endpoint as a Starlette route (``POST /``)."""
    endpoint = Endpoint(registry, keys, deny_unsigned, metrics)
    return Route("/", endpoint.handle, methods=["POST"])
