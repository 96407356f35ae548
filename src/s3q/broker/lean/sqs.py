"""The SQS endpoint's requests the lean path takes: ``POST /`` (either SQS protocol), from a
caller whose credential passes before its body is kept, answered by the endpoint itself
(:meth:`..sqs.endpoint.Endpoint.answer`), so every answer is the one Starlette's route gives.

A request is taken only when nothing about it needs the generic stack: no query string, a
``Content-Length`` within the endpoint's limit, a ``Host``, and no ``Origin``, ``Expect`` or
chunked body; a credential that does not pass is refused by the generic stack.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, NamedTuple

from ...errors import S3QError
from ..guard import HostCheck
from ..limits import SQS_MAX_BODY
from ..sqs import sigv4
from ..sqs.endpoint import Endpoint, SqsRequest, header_lists
from ..sqs.protocol import SqsError
from . import writing
from .native import GENERIC_ONLY, LEAN_BODY
from .writing import Connection


class SqsHead(NamedTuple):
    """An SQS request the lean path takes, once its head is read."""

    calls: SqsCalls
    headers: dict[str, list[str]]
    checked: sigv4.Credential | None
    origin: str
    source: str | None

    def asked(self, gone: Callable[[], Awaitable[bool]]) -> SqsRequest:
        """The request as the endpoint reads it (``POST /``, no query string)."""
        return SqsRequest("POST", "/", "", self.headers, None, self.origin, gone, self.source)

    def take(
        self, body: bytes, connection: Connection, default_headers: list[tuple[bytes, bytes]]
    ) -> Coroutine[Any, Any, bytes] | None:
        """The request's answer to await, once its ``body`` is in."""
        return self.calls.answer(self, body, connection, default_headers)

    def refuse(
        self, error: S3QError, default_headers: list[tuple[bytes, bytes]]
    ) -> Coroutine[Any, Any, bytes]:
        """The request refused with ``error``, in a response that closes the connection."""
        return self.calls.refuse(self, error, default_headers)


class SqsCalls:
    """``POST /`` of the SQS endpoint, as the lean path takes it."""

    def __init__(self, endpoint: Endpoint, host_check: HostCheck | None) -> None:
        self.endpoint = endpoint
        self.host_check = host_check
        self.taken = 0  # requests answered here

    def admit(
        self,
        method: bytes,
        url: bytes,
        headers: list[tuple[bytes, bytes]],
        source: str | None = None,
    ) -> SqsHead | None:
        """The request a head makes, if the lean path may answer it (``source``: the caller's
        address); None: the generic stack answers it."""
        if method != b"POST" or url != b"/":
            return None
        length = -1
        host = b""
        for key, value in headers:
            if key == b"content-length":
                length = int(value)
            elif key == b"host":
                host = host or value
            elif key in GENERIC_ONLY:
                return None
        if not 0 < length <= min(SQS_MAX_BODY, LEAN_BODY) or not host:
            return None
        if self.host_check is not None and not self.host_check.allows(host):
            return None
        lists = header_lists(headers)
        try:
            checked = self.endpoint.credential(lists)
        except SqsError:
            return None  # refused by the generic stack, before its body is read
        return SqsHead(self, lists, checked, "http://" + host.decode("latin-1"), source)

    async def answer(
        self,
        head: SqsHead,
        body: bytes,
        connection: Connection,
        default_headers: list[tuple[bytes, bytes]],
    ) -> bytes:
        """The request answered: the response's bytes."""
        self.taken += 1
        asked = head.asked(connection.gone)

        async def read() -> bytes:
            return body

        status, headers, out = await self.endpoint.answer(asked, read, head.checked)
        lines = writing.header_lines(headers)
        return writing.response(status, lines, out, default_headers, connection.keep_alive)

    async def refuse(
        self, head: SqsHead, error: S3QError, default_headers: list[tuple[bytes, bytes]]
    ) -> bytes:
        """The request refused with ``error`` as the endpoint refuses a body it could not
        read (counted as it counts it), in a response that closes the connection."""

        async def read() -> bytes:
            raise error

        self.taken += 1
        asked = head.asked(_staying)
        status, headers, out = await self.endpoint.answer(asked, read, head.checked)
        lines = writing.header_lines(headers)
        return writing.response(status, lines, out, default_headers, keep_alive=False)


async def _staying() -> bool:
    return False
