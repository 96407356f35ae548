"""The blocking client's HTTP/1.1: kept-alive sockets to each broker, a request written as one
buffer, its answer parsed by httptools (llhttp, in C).

A call through urllib3 and http.client cost the client ~440 µs of CPU and 750 Python calls
(most of them parsing the answer's headers with the ``email`` package); here it is a few dozen.
The failures are told apart as the client's retry rules need (:mod:`.calls`): :class:`NotSent`
(no connection could be made: nothing was sent) and :class:`Broken` (the connection failed once
the request may have been sent, or no answer came in time: :class:`TimedOut`).
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Mapping
from typing import NamedTuple
from urllib.parse import urlsplit

import httptools
from urllib3.util.wait import wait_for_read

from .stalls import _await_answer

__all__ = ["Answer", "Broken", "NotSent", "TimedOut", "Transport", "TransportError"]

MAX_IDLE = 20  # connections kept per broker once their calls are done
#: seconds a connection may stay idle and still be used again: less than the broker's
#: keep-alive (uvicorn's 5 s), so that a request is never sent on a connection the broker is
#: closing at that moment (its answer would be lost, and a change is not sent twice)
REUSE_WITHIN = 2.0
READ_SIZE = 256 * 1024


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


class _Reading:
    """httptools' callbacks for one answer."""

    __slots__ = ("chunks", "done", "headers", "keep", "parser")

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.chunks: list[bytes] = []
        self.done = self.keep = False
        self.parser = httptools.HttpResponseParser(self)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        self.done = True
        self.keep = self.parser.should_keep_alive()  # (known while the message completes)

    def ended(self) -> None:
        """The broker closed the connection: the end of an answer read to its close, else
        an answer cut short."""
        delimited = "content-length" in self.headers or "transfer-encoding" in self.headers
        if not self.headers or delimited:
            raise ConnectionResetError("the broker closed the connection before its answer")
        self.done = True


class Transport:
    """Requests to the broker at ``url`` (``http://`` or ``https://``), each on a connection
    of its own while it runs; thread-safe."""

    def __init__(self, url: str, connect_timeout: float, tls: ssl.SSLContext) -> None:
        parts = urlsplit(url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or (443 if self._https else 80)
        self._tls = tls
        self._timeout = connect_timeout
        self._host_header = f"Host: {parts.netloc}\r\n".encode("latin-1")
        self._idle: list[tuple[socket.socket, float]] = []  # and since when (monotonic)
        self._lock = threading.Lock()

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: Mapping[str, str],
        read_timeout: float,
    ) -> Answer:
        """Send one request and read its answer (NotSent, Broken or TimedOut on failure)."""
        head = [f"{method} {path} HTTP/1.1\r\n".encode("latin-1"), self._host_header]
        head += [f"{name}: {value}\r\n".encode("latin-1") for name, value in headers.items()]
        if body is not None or method == "POST":
            head.append(b"Content-Length: %d\r\n" % (len(body) if body else 0))
        head.append(b"\r\n")
        if body:
            head.append(body)
        sock = self._take()
        try:
            sock.sendall(b"".join(head))
            _await_answer(sock)  # (probing a broker that may have stalled, if asked)
            sock.settimeout(read_timeout)
            answer, keep = _read(sock)
        except TimeoutError as exc:
            sock.close()
            raise TimedOut(f"no answer within {read_timeout:g} s") from exc
        except (OSError, httptools.HttpParserError) as exc:
            sock.close()
            raise Broken(f"{type(exc).__name__}: {exc}") from exc
        except BaseException:
            sock.close()
            raise
        if keep:
            self._give(sock)
        else:
            sock.close()
        return answer

    def _take(self) -> socket.socket:
        """An idle connection still open, or a new one."""
        while True:
            with self._lock:
                sock, since = self._idle.pop() if self._idle else (None, 0.0)
            if sock is None:
                return self._connect()
            if time.monotonic() - since < REUSE_WITHIN and not _dropped(sock):
                sock.settimeout(self._timeout)
                return sock
            sock.close()

    def _connect(self) -> socket.socket:
        try:
            sock = socket.create_connection((self._host, self._port), self._timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._https:
                sock = self._tls.wrap_socket(sock, server_hostname=self._host)
        except OSError as exc:
            raise NotSent(f"{type(exc).__name__}: {exc}") from exc
        return sock

    def _give(self, sock: socket.socket) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append((sock, time.monotonic()))
                return
        sock.close()

    def close(self) -> None:
        """Close the idle connections (those in use close when their call ends)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for sock, _ in idle:
            sock.close()


def _read(sock: socket.socket) -> tuple[Answer, bool]:
    """The answer on ``sock``, and whether the connection may carry another request."""
    reading = _Reading()
    while not reading.done:
        data = sock.recv(READ_SIZE)
        if data:
            reading.parser.feed_data(data)
        else:
            reading.ended()
    status = reading.parser.get_status_code()
    return Answer(status, reading.headers, b"".join(reading.chunks)), reading.keep


def _dropped(sock: socket.socket) -> bool:
    """Whether an idle connection was closed by the broker (or holds bytes it should not):
    anything to read on it says so."""
    try:
        return wait_for_read(sock, timeout=0.0)
    except OSError:
        return True
