"""Which requests the lean path takes: the native API's calls (:mod:`.native`) and the SQS
endpoint's (:mod:`.sqs`). Each is admitted by its head, and answered once its body is in."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Protocol

from ...errors import S3QError
from .native import NativeCalls
from .sqs import SqsCalls
from .writing import Connection


class Admitted(Protocol):
    """A request the lean path takes, once its head is read."""

    def take(
        self, body: bytes, connection: Connection, default_headers: list[tuple[bytes, bytes]]
    ) -> Coroutine[Any, Any, bytes] | None:
        """Its answer's bytes to await, once ``body`` is in; None: the generic stack's."""

    def refuse(
        self, error: S3QError, default_headers: list[tuple[bytes, bytes]]
    ) -> Coroutine[Any, Any, bytes]:
        """Its refusal with ``error`` (a body that stopped coming), closing the connection."""


class LeanRoutes:
    """The lean path's calls; ``body_timeout``: seconds a body may take to arrive."""

    def __init__(self, native: NativeCalls, sqs: SqsCalls | None, body_timeout: float) -> None:
        self.native, self.sqs, self.body_timeout = native, sqs, body_timeout

    @property
    def taken(self) -> int:
        """Requests the lean path has answered."""
        return self.native.taken + (0 if self.sqs is None else self.sqs.taken)

    def admit(
        self,
        method: bytes,
        url: bytes,
        headers: list[tuple[bytes, bytes]],
        client: tuple[str, int] | None = None,
    ) -> Admitted | None:
        """The request a head makes, if the lean path may answer it (header names in lower
        case; ``client``: the caller's address); None: the generic stack answers it."""
        source = None if client is None else client[0]
        if url == b"/":
            return None if self.sqs is None else self.sqs.admit(method, url, headers, source)
        return self.native.admit(method, url, headers, source)
