"""The broker's limits: what a connection, a request and an idle queue may cost it.

Bodies are read up to a limit, lists of a call up to a length, and slow or silent connections
are closed (:mod:`.connections`).

A body is read only after the caller's credentials (a bearer token, or an SQS signature's key
and date) have been checked, and then a chunk at a time: one whose ``Content-Length`` is over
the limit is refused before a byte is read, one that streams past it is refused at the limit.
Either way the broker holds at most ``limit`` bytes of it.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import TYPE_CHECKING, Any, cast

from ..errors import InvalidArgument
from ..wire.codec import BodyTooLarge, RequestTimeout

if TYPE_CHECKING:  # the broker's extra; this module's constants are read without it
    from collections.abc import Coroutine

    from starlette.requests import Request
    from starlette.types import Message, Receive

#: The native API's default: a call of 1,000 messages of 64 KiB, sent as JSON (payloads in
#: base64, a third more), with room for attributes and framing.
DEFAULT_MAX_BODY = 96 * 2**20
#: The SQS endpoint's: SQS takes up to 1 MiB of messages per request (MaximumMessageSize, and
#: the sum of a batch), which a JSON encoder may escape to six times as many bytes (``\\u0001``),
#: plus the request's envelope.
SQS_MAX_BODY = 6 * 2**20 + 2**16
#: The most entries one native call may carry in a list (a batch's items, receipts or ids):
#: a call is answered in one turn of the event loop, so its length is what other requests
#: wait for (10,000 plain items: about 10 ms).
DEFAULT_MAX_BATCH = 10_000
#: Seconds a request's body may take to arrive: 96 MiB at 1.6 MB/s.
DEFAULT_BODY_TIMEOUT = 60.0
#: Seconds from a connection (or the first byte of a request) to the end of its head.
DEFAULT_HEAD_TIMEOUT = 10.0
#: Connections (and requests in progress) beyond which a request is answered 503 at once.
DEFAULT_MAX_CONNECTIONS = 1000
#: Seconds a queue may go without a call before the broker closes it (its writer lease
#: renewals stop with it); the next call reopens it.
DEFAULT_IDLE_CLOSE = 300.0


async def read_body(
    request: Request, limit: int, setting: str = "", timeout: float = DEFAULT_BODY_TIMEOUT
) -> bytes:
    """The request's body, or BodyTooLarge as soon as it is known to exceed ``limit`` bytes
    (``setting``: where the limit is set, for the error); RequestTimeout if it takes more than
    ``timeout`` seconds to arrive."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            raise InvalidArgument(f"Content-Length must be a number of bytes, got {declared!r}")
        if int(declared) > limit:
            raise BodyTooLarge(_too_large(int(declared), limit, setting))
    receive = request.receive
    message = _ready(receive) if inspect.iscoroutinefunction(receive) else None
    if (
        message is not None
        and message["type"] == "http.request"
        and not message.get("more_body", False)
    ):  # all there already: no timer to set
        body: bytes = message.get("body", b"")
        if len(body) > limit:
            raise BodyTooLarge(_too_large(None, limit, setting))
        return body
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):
            while True:  # as request.stream(), whose receive this takes over
                if message is None:
                    message = await receive()
                if message["type"] == "http.request":
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        raise BodyTooLarge(_too_large(None, limit, setting))
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
                elif message["type"] == "http.disconnect":
                    from starlette.requests import ClientDisconnect

                    raise ClientDisconnect()
                message = None
    except TimeoutError:
        raise body_late(timeout, size) from None
    return b"".join(chunks)


def body_late(timeout: float, size: int) -> RequestTimeout:
    """The refusal of a body not received within ``timeout`` seconds (``size`` bytes came)."""
    return RequestTimeout(f"request body not received within {timeout:g} s ({size:,} bytes came)")


def _ready(receive: Receive) -> Message | None:
    """The message ``receive`` (an ``async def``) has ready now (taken), or None if it would
    wait for one: it is run one step and, if it would wait, closed (as a cancelled
    ``receive`` is left)."""
    step = cast("Coroutine[Any, Any, Message]", receive())
    try:
        step.send(None)
    except StopIteration as done:
        return cast("Message", done.value)
    step.close()
    return None


def _too_large(size: int | None, limit: int, setting: str) -> str:
    sent = f"of {size:,} bytes " if size is not None else ""
    where = f" ({setting})" if setting else ""
    return f"request body {sent}exceeds this broker's limit of {limit:,} bytes{where}"


async def disconnected(request: Request) -> bool:
    """Whether the request's client has gone, as ``request.is_disconnected()`` tells it (a
    message the server has ready now that is ``http.disconnect``), without its cancel scope,
    whose cancel formats the task's repr."""
    if not inspect.iscoroutinefunction(request.receive):
        return await request.is_disconnected()
    message = _ready(request.receive)
    return message is not None and message.get("type") == "http.disconnect"
