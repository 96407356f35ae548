"""HTTP/1.1 as the clients speak it to a broker, without I/O: a request's bytes, and an answer
parsed by httptools (llhttp, in C) as it arrives. :mod:`.transport` (sockets, blocking) and
:mod:`.async_transport` (asyncio) do the I/O around it.

The failures are told apart as the client's retry rules need (:mod:`.calls`): :class:`NotSent`
(no connection could be made: nothing was sent) and :class:`Broken` (the connection failed once
the request may have been sent, or no answer came in time: :class:`TimedOut`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple
from urllib.parse import urlsplit

import httptools

__all__ = [
    "REUSE_WITHIN",
    "Answer",
    "Broken",
    "NotSent",
    "Reading",
    "Target",
    "TimedOut",
    "TransportError",
    "request",
]

MAX_IDLE = 20  # connections kept per broker once their calls are done
#: seconds a connection may stay idle and still be used again: less than the broker's
#: keep-alive (uvicorn's 5 s), so that a request is never sent on a connection the broker is
#: closing at that moment (its answer would be lost, and a change is not sent twice)
REUSE_WITHIN = 2.0


class TransportError(Exception):
    """A call's HTTP exchange with a broker failed."""


class NotSent(TransportError):
    """No connection to the broker could be made: the request was not sent."""


class Broken(TransportError):
    """The connection failed after the request may have been sent (or before its answer)."""


class TimedOut(Broken):
    """No answer came within the timeout."""


class Answer(NamedTuple):
    """A broker's answer: its status, headers (lower-case names) and body."""

    status: int
    headers: dict[str, str]
    body: bytes


class Target(NamedTuple):
    """Where a broker listens, from its URL (``http://`` or ``https://``)."""

    https: bool
    host: str
    port: int
    host_header: bytes  # ``Host: ...\r\n``

    @classmethod
    def of(cls, url: str) -> Target:
        parts = urlsplit(url)
        https = parts.scheme == "https"
        port = parts.port or (443 if https else 80)
        header = f"Host: {parts.netloc}\r\n".encode("latin-1")
        return cls(https, parts.hostname or "127.0.0.1", port, header)


def request(
    target: Target, method: str, path: str, body: bytes | None, headers: Mapping[str, str]
) -> bytes:
    """The bytes of one request (``path`` with its query string, if any)."""
    head = [f"{method} {path} HTTP/1.1\r\n".encode("latin-1"), target.host_header]
    head += [f"{name}: {value}\r\n".encode("latin-1") for name, value in headers.items()]
    if body is not None or method == "POST":
        head.append(b"Content-Length: %d\r\n" % (len(body) if body else 0))
    head.append(b"\r\n")
    if body:
        head.append(body)
    return b"".join(head)


class Reading:
    """One answer as it arrives: :meth:`feed` it bytes until :attr:`done`, or :meth:`ended`
    when the connection closed."""

    __slots__ = ("chunks", "done", "headers", "keep", "parser")

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.chunks: list[bytes] = []
        self.done = self.keep = False
        self.parser = httptools.HttpResponseParser(self)

    def feed(self, data: bytes) -> None:
        """Parse ``data`` (httptools.HttpParserError if it is not HTTP)."""
        self.parser.feed_data(data)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        self.done = True
        self.keep = self.parser.should_keep_alive()  # (known while the message completes)

    def ended(self) -> None:
        """The broker closed the connection: the end of an answer read to its close, else
        (ConnectionResetError) an answer cut short."""
        delimited = "content-length" in self.headers or "transfer-encoding" in self.headers
        if not self.headers or delimited:
            raise ConnectionResetError("the broker closed the connection before its answer")
        self.done = True

    def answer(self) -> Answer:
        return Answer(self.parser.get_status_code(), self.headers, b"".join(self.chunks))
