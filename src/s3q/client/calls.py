"""One request of the broker's native API: what it sends, how its answer is read, and
whether it may be sent again (see :mod:`s3q.client` for the rules)."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import aiohttp
import msgspec

from ..errors import (
    InvalidArgument,
    OutcomeUnknown,
    QueueClosed,
    S3QError,
    StoreError,
    Unavailable,
)
from ..wire.codec import BrokerError, BrokerUnreachable, exception_of
from .http11 import Broken, NotSent
from .stalls import BrokerStalled

T = TypeVar("T")

RETRIES = 4  # attempts after the first
BACKOFF = 0.1  # seconds before the first retry, doubled each time, jittered
BACKOFF_MAX = 2.0


@dataclass
class Call(Generic[T]):
    """One request of the native API and how to read its answer."""

    method: str
    path: str
    answer: type[Any]
    pick: Any = None  # a function of the decoded answer; None: the answer itself
    body: dict[str, Any] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    extra_timeout: float = 0.0

    @property
    def idempotent(self) -> bool:
        return self.method == "GET"

    @property
    def queue(self) -> str | None:
        """The queue the call is about (``/v1/queues/NAME/...``), if any."""
        parts = self.path.split("/", 4)
        return parts[3] if len(parts) > 3 and parts[2] == "queues" else None

    def content(self) -> bytes | None:
        if self.body is None:
            return None
        try:
            return msgspec.msgpack.encode(self.body)
        except (TypeError, msgspec.EncodeError) as exc:
            raise InvalidArgument(f"cannot send argument: {exc}") from None

    def result(self, content: bytes) -> T:
        try:
            decoded = msgspec.msgpack.decode(content, type=self.answer)
        except msgspec.DecodeError as exc:
            raise BrokerError(f"unreadable answer from the broker: {exc}", 200) from None
        value: T = decoded if self.pick is None else self.pick(decoded)
        return value


def error_of(status: int, content: bytes) -> S3QError:
    try:
        body = msgspec.msgpack.decode(content)
    except msgspec.DecodeError:
        try:
            body = msgspec.json.decode(content)
        except msgspec.DecodeError:
            body = None
    return exception_of(status, body)


def delay(attempt: int) -> float:
    return float(min(BACKOFF_MAX, BACKOFF * 2.0**attempt)) * random.uniform(0.5, 1.0)


#: failures of a connection attempt: the request was not sent (.transport: the blocking client;
#: aiohttp: the async one)
NOT_SENT = (NotSent, aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
#: failures of the transport: the request may or may not have been received (or acted on)
TRANSPORT = (NotSent, Broken, aiohttp.ClientError, asyncio.TimeoutError, BrokerStalled)


def retryable(call: Call[Any], failure: Exception, status: int | None) -> bool:
    """Whether sending ``call`` again is safe and may help."""
    if isinstance(failure, (*NOT_SENT, Unavailable, QueueClosed)):
        return True  # nothing was done
    if not call.idempotent:
        return False
    return status == 503 or isinstance(failure, TRANSPORT)


def transport_error(exc: Exception, url: str) -> StoreError:
    if isinstance(exc, NOT_SENT):
        return BrokerUnreachable(f"broker {url} unreachable: {type(exc).__name__}: {exc}")
    if isinstance(exc, BrokerStalled):
        return OutcomeUnknown(
            f"broker {url} stopped answering while the call was in flight ({exc}); it may "
            "have applied it, or may yet: the queue's calls go to the next broker now"
        )
    return StoreError(f"broker {url} failed mid-request: {type(exc).__name__}: {exc}")
