"""The blocking client's HTTP/1.1 (:mod:`.http11`) over kept-alive sockets to each broker.

A call through urllib3 and http.client cost the client ~440 µs of CPU and 750 Python calls
(most of them parsing the answer's headers with the ``email`` package); here it is a few dozen.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Mapping

import httptools
from urllib3.util.wait import wait_for_read

from . import http11
from .http11 import MAX_IDLE, REUSE_WITHIN, Answer, Broken, NotSent, Reading, Target, TimedOut
from .stalls import _await_answer

__all__ = ["Transport"]

READ_SIZE = 256 * 1024


class Transport:
    """Requests to the broker at ``url`` (``http://`` or ``https://``), each on a connection
    of its own while it runs; thread-safe."""

    def __init__(self, url: str, connect_timeout: float, tls: ssl.SSLContext) -> None:
        self._target = Target.of(url)
        self._tls = tls
        self._timeout = connect_timeout
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
        data = http11.request(self._target, method, path, body, headers)
        sock = self._take()
        try:
            sock.sendall(data)
            _await_answer(sock)  # (probing a broker that may have stalled, if asked)
            sock.settimeout(read_timeout)
            reading = _read(sock)
        except TimeoutError as exc:
            sock.close()
            raise TimedOut(f"no answer within {read_timeout:g} s") from exc
        except (OSError, httptools.HttpParserError) as exc:
            sock.close()
            raise Broken(f"{type(exc).__name__}: {exc}") from exc
        except BaseException:
            sock.close()
            raise
        if reading.keep:
            self._give(sock)
        else:
            sock.close()
        return reading.answer()

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
        target = self._target
        try:
            sock = socket.create_connection((target.host, target.port), self._timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if target.https:
                sock = self._tls.wrap_socket(sock, server_hostname=target.host)
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


def _read(sock: socket.socket) -> Reading:
    """The answer on ``sock``, read whole."""
    reading = Reading()
    while not reading.done:
        data = sock.recv(READ_SIZE)
        if data:
            reading.feed(data)
        else:
            reading.ended()
    return reading


def _dropped(sock: socket.socket) -> bool:
    """Whether an idle connection was closed by the broker (or holds bytes it should not):
    anything to read on it says so."""
    try:
        return wait_for_read(sock, timeout=0.0)
    except OSError:
        return True
