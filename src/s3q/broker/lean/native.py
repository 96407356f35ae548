"""The native calls the lean path answers: ``POST /v1/queues/{name}/<operation>`` with a msgpack
body, from a caller the broker trusts, answered as Starlette's route would answer it.

A request is taken here only when nothing about it needs the generic stack: no query string,
no escaped character in its path, a ``Content-Length`` within the broker's limit, a msgpack
body, no ``Origin``, an allowed ``Host``, a valid bearer token (or a broker without
credentials) whose principal may do the call's action to its queue, no ``Expect`` and no
chunked body. Its arguments are decoded once, whole, and taken only if
:meth:`.arguments.Plan.takes` them; anything else goes to Starlette's route with the same
bytes, so every refusal is the one the generic stack gives.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, NamedTuple

import msgspec

from ...errors import S3QError
from ...wire.answers import PARTITIONS_HEADER, WRITER_HEADER
from ...wire.codec import API_PREFIX, JSON, MSGPACK, encode
from .. import calls
from ..access import OPERATIONS, Access, Caller
from ..arguments import MSGPACK_TYPES, Limits, Plan
from ..forward import FORWARDED
from ..guard import HostCheck
from ..metrics import BrokerMetrics
from ..registry import QueueRegistry
from ..routes import ENDPOINTS, Call, Endpoint
from . import writing
from .writing import Connection

QUEUES = (API_PREFIX + "/queues/").encode()
#: The largest body the lean path keeps as it arrives; a larger one is read by the generic
#: stack (a call of 1,000 messages of 1 KiB fits)
LEAN_BODY = 2**20
_FORWARDED = FORWARDED.encode()
_MSGPACK_TYPES = frozenset(t.encode() for t in MSGPACK_TYPES)
_MSGPACK = MSGPACK.encode()
_ANSWER_TYPE = {
    False: b"content-type: " + MSGPACK.encode() + b"\r\n",
    True: b"content-type: " + JSON.encode() + b"\r\n",
}
_WRITER = WRITER_HEADER.encode() + b": "
_PARTITIONS = PARTITIONS_HEADER.encode() + b": "
_decode = msgspec.msgpack.Decoder().decode
#: headers that send a request to the generic stack: a page's origin (the guard's to judge), a
#: body in chunks or awaiting ``100 Continue``, a protocol upgrade
GENERIC_ONLY = frozenset({b"origin", b"transfer-encoding", b"expect", b"upgrade"})


class Head(NamedTuple):
    """A native call the lean path takes, once its head is read."""

    calls: NativeCalls
    endpoint: Endpoint
    plan: Plan
    name: str
    as_json: bool  # the answer's encoding (the request's ``Accept``)
    forwarded: bool
    caller: Caller

    def take(
        self, body: bytes, connection: Connection, default_headers: list[tuple[bytes, bytes]]
    ) -> Coroutine[Any, Any, bytes] | None:
        """The call's answer to await, once its ``body`` is in; None if the generic stack
        must answer it (its arguments are not as the route takes them)."""
        args = self.calls.arguments(self, body)
        if args is None:
            return None
        return self.calls.answer(self, args, connection, default_headers)

    def refuse(
        self, error: S3QError, default_headers: list[tuple[bytes, bytes]]
    ) -> Coroutine[Any, Any, bytes]:
        """The call refused with ``error`` (see :meth:`NativeCalls.refuse`)."""
        return self.calls.refuse(self, error, default_headers)


class NativeCalls:
    """The native API's calls with a body under ``/v1/queues/{name}/``, as the lean path takes
    them: :meth:`admit` reads a head, :meth:`answer` answers the call once its body is in."""

    def __init__(
        self,
        registry: QueueRegistry,
        metrics: BrokerMetrics,
        access: Access,
        limits: Limits,
        host_check: HostCheck | None,
    ) -> None:
        self.registry = registry
        self.metrics = metrics
        self.access = access
        self.limits = limits
        self.host_check = host_check
        self.taken = 0  # requests answered here
        prefix = "/queues/{name}/"
        self.routes: dict[bytes, tuple[Endpoint, Plan]] = {}
        for endpoint in ENDPOINTS:
            plan = Plan.of(endpoint)
            operation = endpoint.path[len(prefix) :]
            if (
                endpoint.method == "POST"
                and endpoint.path.startswith(prefix)
                and "/" not in operation
                and "{" not in operation
                and plan.needs_body
                and not plan.allowed_query
                and plan.by_name_only
            ):
                self.routes[operation.encode()] = (endpoint, plan)

    def admit(
        self,
        method: bytes,
        url: bytes,
        headers: list[tuple[bytes, bytes]],
        source: str | None = None,
    ) -> Head | None:
        """The call a request head (its header names in lower case) makes, if the lean path
        may answer it (``source``: the caller's address); None: the generic stack answers it
        (a refusal among them, so that it is made, counted and audited in one place)."""
        if method != b"POST" or not url.startswith(QUEUES):
            return None
        name, _, operation = url[len(QUEUES) :].partition(b"/")
        found = self.routes.get(operation)
        if found is None or not name or b"?" in url or b"%" in url or b"#" in url:
            return None
        kind = accept = authorization = host = b""
        length = -1
        forwarded = False
        for key, value in headers:
            if key == b"content-length":
                length = int(value)
            elif key == b"content-type":
                kind = value
            elif key == b"accept":
                accept = value
            elif key == b"authorization":
                authorization = value
            elif key == b"host":
                host = host or value
            elif key == _FORWARDED:
                forwarded = True
            elif key in GENERIC_ONLY:
                return None
        if not 0 < length <= min(self.limits.body, LEAN_BODY):
            return None
        if kind != _MSGPACK and kind.split(b";")[0].strip().lower() not in _MSGPACK_TYPES:
            return None
        if self.host_check is not None and not self.host_check.allows(host):
            return None
        caller = self.access.bearer_caller(authorization.decode("latin-1"), source)
        if caller is None:
            return None
        try:
            text = name.decode("ascii")
        except UnicodeDecodeError:
            return None
        if not self.access.allows(caller, OPERATIONS[found[0].operation], text):
            return None
        as_json = calls.wants_json(accept.decode("latin-1"))
        return Head(self, found[0], found[1], text, as_json, forwarded, caller)

    def arguments(self, head: Head, body: bytes) -> dict[str, Any] | None:
        """The call's arguments, if the generic stack would take them as they are."""
        try:
            args = _decode(body)
        except Exception:
            return None
        return args if head.plan.takes(args, self.limits.batch) else None

    async def answer(
        self,
        head: Head,
        args: dict[str, Any],
        connection: Connection,
        default_headers: list[tuple[bytes, bytes]],
    ) -> bytes:
        """The call answered: the response's bytes (status line, headers, body)."""
        self.taken += 1
        operation = head.endpoint.operation
        action = OPERATIONS[operation]
        head.caller.acting(action)  # (this task's: its forwarded calls name the caller)
        call = Call(self.registry, head.name, args, head.forwarded, connection.gone)

        def done(outcome: str) -> None:
            self.access.done(head.caller, action, operation, head.name, outcome)

        found = await calls.answer(
            head.endpoint, self.registry, self.metrics, head.name, call, done
        )
        return response(found, head.as_json, default_headers, connection.keep_alive)

    async def refuse(
        self, head: Head, error: S3QError, default_headers: list[tuple[bytes, bytes]]
    ) -> bytes:
        """The call refused with ``error`` (counted as the generic stack counts it), in a
        response that closes the connection."""

        async def refused() -> Call:
            raise error

        self.taken += 1
        found = await calls.answer(head.endpoint, self.registry, self.metrics, head.name, refused)
        return response(found, head.as_json, default_headers, keep_alive=False)


def response(
    found: calls.Answer,
    as_json: bool,
    default_headers: list[tuple[bytes, bytes]],
    keep_alive: bool = True,
) -> bytes:
    """``found`` as an HTTP/1.1 response's bytes (see :func:`.writing.response`)."""
    try:
        body = encode(found.body, as_json)
        status = found.status
    except Exception as exc:
        body, status = encode(calls.internal_error(exc), as_json), 500
    headers = [_ANSWER_TYPE[as_json]]
    if found.writer is not None:
        headers.append(_WRITER + found.writer.encode("latin-1") + b"\r\n")
    if found.partitions is not None:
        headers.append(_PARTITIONS + str(found.partitions).encode() + b"\r\n")
    return writing.response(status, headers, body, default_headers, keep_alive)
