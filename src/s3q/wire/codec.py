"""What travels between the broker and its clients: body encodings and the error mapping.

Shared by the server (:mod:`s3q.broker.app`) and the client (:mod:`s3q.client`), and free of
server dependencies, so a client-only install needs nothing but ``urllib3`` and ``msgspec``.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from ..errors import (
    InvalidArgument,
    InvalidConfig,
    InvalidPriority,
    MessageNotFound,
    MessageTooLarge,
    OutcomeUnknown,
    QueueClosed,
    QueueFull,
    QueueLocked,
    ReceiptExpired,
    S3QError,
    StoreError,
    StoreFull,
    TransientError,
    Unavailable,
    UnsupportedFormat,
    WriterFenced,
)

MSGPACK = "application/msgpack"
JSON = "application/json"
API_PREFIX = "/v1"
# 1 to 80 of A-Z a-z 0-9 _ -, or up to 75 of them and ".fifo" (an SQS FIFO queue's name)
QUEUE_NAME_PATTERN = r"^(?:[A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$"
#: a queue's name, or one of its partitions' (``NAME@i``, ``s3q.partitions``): what the native
#: API serves (one broker forwards a partition's calls to the broker that leads it)
SERVED_NAME_PATTERN = QUEUE_NAME_PATTERN.removesuffix("$") + r"(?:@(?:0|[1-9][0-9]?))?$"
QUEUE_NAME = re.compile(QUEUE_NAME_PATTERN)
SERVED_NAME = re.compile(SERVED_NAME_PATTERN)


class BrokerError(S3QError):
    """The broker answered with an error that is not one of s3q's own (e.g. a 500)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class BrokerUnreachable(StoreError):
    """No connection to the broker could be made: the request was not sent."""


class AuthError(BrokerError):
    """The broker refused the request: no bearer token (401), a wrong one (403), or a call its
    principal's grants do not allow (403, naming the action and the queue)."""


class BodyTooLarge(BrokerError):
    """The request body is larger than the broker accepts (413): it was refused at the limit,
    unread past it, and nothing was done."""

    def __init__(self, message: str, status: int = 413) -> None:
        super().__init__(message, status)


class RequestTimeout(BrokerError):
    """The request's body did not arrive in time (408); nothing was done."""

    def __init__(self, message: str, status: int = 408) -> None:
        super().__init__(message, status)


class QueueNotFound(BrokerError, LookupError):
    """No queue of that name: a call that only reads or changes an existing queue's messages
    does not create it (404). Enqueue, dequeue and configure create a queue."""

    def __init__(self, message: str, status: int = 404) -> None:
        super().__init__(message, status)


# Most specific class first: the first match decides the HTTP status.
STATUS_OF: tuple[tuple[type[S3QError], int], ...] = (
    (MessageTooLarge, 413),
    (InvalidArgument, 400),  # InvalidConfig, InvalidPriority too
    (MessageNotFound, 404),
    (ReceiptExpired, 409),
    (QueueLocked, 409),
    (QueueFull, 429),
    (AuthError, 401),
    (StoreFull, 507),  # Insufficient Storage: nothing was done; not retried by the client
    (StoreError, 503),
    (WriterFenced, 503),
    (QueueClosed, 503),
    (Unavailable, 503),
)

ERRORS: dict[str, type[S3QError]] = {
    cls.__name__: cls
    for cls in (
        InvalidArgument,
        InvalidConfig,
        InvalidPriority,
        MessageTooLarge,
        MessageNotFound,
        ReceiptExpired,
        QueueLocked,
        QueueFull,
        OutcomeUnknown,
        TransientError,
        UnsupportedFormat,
        StoreFull,
        StoreError,
        WriterFenced,
        QueueClosed,
        Unavailable,
        AuthError,
        BodyTooLarge,
        QueueNotFound,
        RequestTimeout,
        BrokerError,
    )
}


def check_name(name: object) -> str:
    """A queue name: 1 to 80 of ``A-Z a-z 0-9 _ -``, the last 5 possibly ``.fifo`` (as SQS
    names FIFO queues), or a partition of one (``NAME@i``); InvalidArgument otherwise."""
    if not isinstance(name, str) or not SERVED_NAME.fullmatch(name):
        raise InvalidArgument(
            f"queue name must be 1 to 80 of A-Z a-z 0-9 _ - (the last 5 may be .fifo), got {name!r}"
        )
    return name


def is_broker_url(url: str) -> bool:
    """Whether ``url`` names a queue of a broker (``http(s)://host:port/NAME``)."""
    return url.lower().startswith(("http://", "https://"))


def split_queue_url(url: str) -> tuple[str, str]:
    """``http://host:port/NAME`` as the broker's URL and the queue's name."""
    base, _, name = url.rstrip("/").rpartition("/")
    if "://" not in base or not base.split("://", 1)[1]:
        raise InvalidArgument(f"a broker queue URL looks like http://host:port/NAME, got {url!r}")
    return base, check_name(name)


def status_of(exc: BaseException) -> int:
    """The HTTP status that carries ``exc``."""
    if isinstance(exc, BrokerError) and exc.status:
        return exc.status
    for cls, status in STATUS_OF:
        if isinstance(exc, cls):
            return status
    return 500


def error_body(exc: BaseException, message: str | None = None) -> dict[str, Any]:
    """``{"error": ClassName, "message": text}`` (``message``, if given, for ``exc``'s own
    text), plus what QueueLocked carries."""
    # the nearest class a client knows (an internal subclass travels as its public parent)
    name = next((c.__name__ for c in type(exc).__mro__ if c.__name__ in ERRORS), "InternalError")
    body: dict[str, Any] = {"error": name, "message": str(exc) if message is None else message}
    if isinstance(exc, QueueLocked):
        body["holder"] = exc.holder
        body["expires_at"] = exc.expires_at
        body["address"] = exc.address
    return body


def exception_of(status: int, body: object) -> S3QError:
    """The exception an error answer stands for: the same s3q class the broker raised."""
    if not isinstance(body, dict):
        return BrokerError(f"broker answered HTTP {status}", status)
    name, message = str(body.get("error", "")), str(body.get("message", ""))
    cls = ERRORS.get(name)
    if cls is QueueLocked:
        expires, address = body.get("expires_at"), body.get("address")
        return QueueLocked(
            message,
            str(body.get("holder", "")),
            float(expires) if isinstance(expires, int | float) else None,
            address if isinstance(address, str) else None,
        )
    if cls is not None and issubclass(cls, BrokerError):
        return cls(message, status)
    if cls is not None:
        return cls(message)
    if status in (401, 403):
        return AuthError(message or f"HTTP {status}", status)
    return BrokerError(f"{name or 'HTTP ' + str(status)}: {message}", status)


def encode(obj: Any, as_json: bool = False) -> bytes:
    """A body: msgpack (bytes stay raw) or, for JSON clients, JSON (bytes in base64)."""
    return msgspec.json.encode(obj) if as_json else msgspec.msgpack.encode(obj)
