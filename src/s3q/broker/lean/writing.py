"""An answer as the bytes the lean path writes: status line, headers, body (HTTP/1.1)."""

from __future__ import annotations

from collections.abc import Iterable
from http import HTTPStatus
from typing import Protocol


class Connection(Protocol):
    """What a call knows of its connection."""

    keep_alive: bool  # (else it is closed once answered)

    async def gone(self) -> bool:
        """Whether the client has closed it."""


def status_line(status: int) -> bytes:
    """``HTTP/1.1 <status> <phrase>`` and its line end."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f"HTTP/1.1 {status} {phrase}\r\n".encode()


_STATUS = {int(s): status_line(int(s)) for s in HTTPStatus}


def response(
    status: int,
    headers: Iterable[bytes],
    body: bytes,
    default_headers: list[tuple[bytes, bytes]],
    keep_alive: bool = True,
) -> bytes:
    """A response's bytes: ``headers`` are whole lines (``name: value\\r\\n``), after the
    server's ``default_headers`` (a ``date`` among them); a ``content-length`` is added, and
    unless ``keep_alive``, word that the connection closes."""
    parts = [_STATUS.get(status) or status_line(status)]
    for key, value in default_headers:
        parts += (key, b": ", value, b"\r\n")
    parts += headers
    parts += (b"content-length: ", str(len(body)).encode(), b"\r\n")
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    parts += (b"\r\n", body)
    return b"".join(parts)


def header_lines(headers: dict[str, str]) -> list[bytes]:
    """``headers`` as whole lines for :func:`response`."""
    return [f"{name}: {value}\r\n".encode("latin-1") for name, value in headers.items()]
