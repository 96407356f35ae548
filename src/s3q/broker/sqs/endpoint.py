"""The SQS endpoint: ``POST /`` on the broker's port, authenticated, dispatched to an action.

Authentication: with access keys, every request must carry a valid SigV4 signature made with
one of them. Without keys, a broker that has other credentials (bearer tokens, a principals
file) refuses every SQS request (it could not tell who sent it); a broker with none accepts
any request, signed or not (loopback development mode, like the native API without tokens).

Authorization: the access key's principal (:mod:`..principals`) must be granted the action's
class (:data:`.actions.CLASS_OF`) on each queue the action names, checked as the action learns
the name, before the queue is read (else ``AccessDenied``, 403).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from functools import partial
from typing import Any, NamedTuple

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
from ...wire.codec import AuthError, BodyTooLarge, RequestTimeout
from .. import redact
from ..access import NO_CREDENTIAL, Access, Caller
from ..limits import SQS_MAX_BODY, disconnected, read_body
from ..metrics import BrokerMetrics
from ..registry import QueueRegistry
from . import query, sigv4
from .actions import ACTIONS, CLASS_OF, UNSUPPORTED, Call, Service
from .catalog import Catalog
from .protocol import (
    SqsError,
    decode,
    encode,
    error_response,
    json_action,
    response_headers,
)
from .queues import arn
from .shapes import Shape

log = logging.getLogger("s3q.broker.sqs")


def sqs_error(exc: S3QError, text: str | None = None) -> SqsError:
    """The SQS error that stands for an s3q error (``text``, if given, for its own)."""
    if isinstance(exc, SqsError):
        return exc
    text = str(exc) if text is None else text
    if isinstance(exc, AuthError):  # a leader refused a call forwarded for the caller
        return SqsError("AccessDenied", text, 403)
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


class SqsRequest(NamedTuple):
    """What the endpoint reads of an HTTP request, whichever path brought it (Starlette's
    route, or the lean path's parser)."""

    method: str
    raw_path: str  # as sent (still percent-encoded)
    query: str
    headers: dict[str, list[str]]  # every value of each header, by lower-case name
    queue_url: str | None  # the queue a request posted to a queue's URL names
    origin: str  # ``scheme://host`` it was sent to (queue URLs begin with it)
    gone: Callable[[], Awaitable[bool]]  # whether its client has left by now
    source: str | None = None  # the caller's address


def header_lists(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, list[str]]:
    """Raw headers as :class:`SqsRequest` holds them (as ``request.headers.items()`` gives)."""
    headers: dict[str, list[str]] = {}
    for name, value in raw:
        key = name.decode("latin-1").lower()
        if key in headers:
            headers[key].append(value.decode("latin-1"))
        else:
            headers[key] = [value.decode("latin-1")]
    return headers


#: ``Endpoint.answer``'s caller has not checked the credential
UNCHECKED: Any = object()
Answer = tuple[int, dict[str, str], bytes]


class Endpoint:
    """The ``POST /`` handler of one broker."""

    def __init__(
        self,
        registry: QueueRegistry,
        access: Access | None = None,
        metrics: BrokerMetrics | None = None,
    ) -> None:
        self.registry = registry
        self.access = access or Access()
        self.metrics = metrics
        self.service = Service(registry, Catalog(registry.store, registry.store_options))

    def credential(self, headers: Mapping[str, list[str]]) -> sigv4.Credential | None:
        """What can be checked of the caller before its body is read: SqsError if it may not
        call; its credential (None: this broker takes unsigned requests)."""
        keys = self.access.sqs_keys()
        if keys is None:
            return None
        if not keys:
            raise SqsError(
                "AccessDenied",
                "This broker has bearer tokens but no SQS access keys: the SQS endpoint is "
                "closed (give --sqs-credentials, or sqs_keys in the principals file).",
                403,
            )
        return sigv4.credential(headers, keys)

    async def _caller(
        self,
        asked: SqsRequest,
        body: Callable[[], Awaitable[bytes]],
        checked: sigv4.Credential | None,
    ) -> tuple[Caller, bytes]:
        """The caller and the body of a request whose signature checks out; else its refusal
        (SqsError 403), counted and audited (and the body, unless it was signed, unread)."""
        try:
            if checked is UNCHECKED:
                checked = self.credential(asked.headers)
            raw = await body()
            key_id = None
            if checked is not None:
                method, path, headers = asked.method, asked.raw_path, asked.headers
                key_id = sigv4.verify_body(checked, method, path, asked.query, headers, raw)
            caller = self.access.sqs_caller(key_id, asked.source)
            if caller is None:  # its principal left with a reload, meanwhile
                raise SqsError("InvalidClientTokenId", "The security token is invalid.", 403)
        except SqsError as exc:
            if exc.status != 403:
                raise
            why = NO_CREDENTIAL if exc.name == "MissingAuthenticationToken" else "bad-credential"
            raise self.access.refused(exc, why, None, "sqs", asked.source, "sqs", None) from None
        return caller, raw

    def _guard(self, caller: Caller, call: Call, action: str) -> None:
        """Make ``call`` check its caller's grant of ``action``'s class on each queue it names
        (AccessDenied, audited, if not granted), and act for its caller."""
        cls = CLASS_OF[action]
        operation = "sqs." + action

        def check(queue: str) -> None:
            def refuse(text: str) -> SqsError:
                call.denied = True
                return SqsError(
                    "AccessDenied",
                    f"User: {caller.principal.name} is not authorized to perform: sqs:{action} "
                    f"on resource: {arn(queue)} ({text})",
                    403,
                )

            self.access.check(caller, cls, queue, operation, refuse)

        call.guard = check
        call.sees = partial(self.access.allows, caller, "read")
        caller.acting(cls)

    async def handle(self, request: Request) -> Response:
        """Starlette's route: ``request`` answered."""
        # request.url is built only for a query string (the SQS protocols send none)
        query = request.url.query if request.scope.get("query_string") else ""
        raw_path = request.scope.get("raw_path") or request.url.path.encode()
        host = request.headers.get("host") or f"{request.url.hostname}:{request.url.port}"
        asked = SqsRequest(
            request.method,
            raw_path.decode("latin-1"),
            query,
            header_lists(request.scope["headers"]),
            _queue_url(request),
            f"{request.url.scheme}://{host}",
            partial(disconnected, request),
            None if request.client is None else request.client.host,
        )
        return _answer(*await self.answer(asked, partial(read_body, request, SQS_MAX_BODY)))

    async def answer(
        self,
        asked: SqsRequest,
        body: Callable[[], Awaitable[bytes]],
        checked: sigv4.Credential | None = UNCHECKED,
    ) -> Answer:
        """``asked`` answered: status, headers, body. ``body`` reads the request's body; it
        is called only once the caller's credential has passed (``checked``: already)."""
        started = time.perf_counter()
        call = Call(asked.origin, asked.gone)
        action = "unknown"
        outcome = "ok"
        caller: Caller | None = None
        target = _first(asked.headers, "x-amz-target")
        as_query = query.is_query(_first(asked.headers, "content-type"), target)
        try:
            caller, raw = await self._caller(asked, body, checked)
            arguments: Callable[[type[Shape]], Shape]
            if as_query:
                parsed = query.QueryRequest(raw, asked.queue_url)
                action, arguments = str(parsed.action), parsed.arguments
            else:
                action, arguments = json_action(target), partial(decode, raw)
            if action in UNSUPPORTED:
                raise SqsError("UnsupportedOperation", f"{action} is not supported by s3q.")
            if action not in ACTIONS:
                raise SqsError("InvalidAction", f"The action {action} is not valid.")
            shape, handler = ACTIONS[action]
            self._guard(caller, call, action)
            result: Any = await handler(self.service, call, arguments(shape))
        except S3QError as exc:
            error = sqs_error(exc, redact.message(exc, call.queue, self.registry.store))
            outcome = error.name
            await self.registry.evict_stopped(call.queue)
            return (query.error_response if as_query else error_response)(error)
        except Exception:
            outcome = "internal"
            log.exception("SQS %s failed", action)
            error = SqsError("InternalFailure", redact.INTERNAL, 500)
            return (query.error_response if as_query else error_response)(error)
        finally:
            label = action if action in ACTIONS else "invalid"
            if self.metrics is not None:
                seconds = time.perf_counter() - started
                self.metrics.observe(call.queue, f"sqs.{label}", outcome, seconds)
            if not call.denied:
                self.access.done(caller, CLASS_OF.get(action), f"sqs.{label}", call.queue, outcome)
        if as_query:
            return query.answer(action, result)
        return 200, response_headers(), encode(result)


def _first(headers: Mapping[str, list[str]], name: str) -> str | None:
    values = headers.get(name)
    return values[0] if values else None


def _queue_url(request: Request) -> str | None:
    """The queue a request posted to a queue's URL names (the query protocol allows it)."""
    if request.url.path.rstrip("/") in ("", "/"):
        return None
    return str(request.url.replace(query="", fragment=""))


def routes(endpoint: Endpoint) -> list[Route]:
    """The SQS endpoint's Starlette routes: ``POST /``, and ``POST`` to a queue's URL."""
    return [
        Route("/", endpoint.handle, methods=["POST"]),
        Route("/{account:int}/{queue}", endpoint.handle, methods=["POST"]),
    ]
