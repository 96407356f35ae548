"""What a request may cost the broker before it is trusted: bodies are read up to a limit.

A body is read only after the caller's credentials (a bearer token, or an SQS signature's key
and date) have been checked, and then a chunk at a time: one whose ``Content-Length`` is over
the limit is refused before a byte is read, one that streams past it is refused at the limit.
Either way the broker holds at most ``limit`` bytes of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import InvalidArgument
from .wire import BodyTooLarge

if TYPE_CHECKING:  # the broker's extra; this module's constants are read without it
    from starlette.requests import Request

#: The native API's default: a call of 1,000 messages of 64 KiB, sent as JSON (payloads in
#: base64, a third more), with room for attributes and framing.
DEFAULT_MAX_BODY = 96 * 2**20
#: The SQS endpoint's: SQS takes up to 1 MiB of messages per request (MaximumMessageSize, and
#: the sum of a batch), which a JSON encoder may escape to six times as many bytes (``\\u0001``),
#: plus the request's envelope.
SQS_MAX_BODY = 6 * 2**20 + 2**16


async def read_body(request: Request, limit: int, setting: str = "") -> bytes:
    """The request's body, or BodyTooLarge as soon as it is known to exceed ``limit`` bytes
    (``setting``: where the limit is set, for the error)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            raise InvalidArgument(f"Content-Length must be a number of bytes, got {declared!r}")
        if int(declared) > limit:
            raise BodyTooLarge(_too_large(int(declared), limit, setting))
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(_too_large(None, limit, setting))
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(size: int | None, limit: int, setting: str) -> str:
    sent = f"of {size:,} bytes " if size is not None else ""
    where = f" ({setting})" if setting else ""
    return f"request body {sent}exceeds this broker's limit of {limit:,} bytes{where}"
