"""The broker's hot-route lookup answers exactly as Starlette's stack does, and takes no request a
guard might refuse; the body and disconnection checks that step ``receive`` once."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import msgspec
import pytest
from starlette.applications import Starlette
from starlette.requests import Request

from s3q.broker.app import create_app
from s3q.broker.fastpath import Broker
from s3q.broker.guard import HostCheck
from s3q.broker.limits import disconnected, read_body

MSGPACK = [(b"content-type", b"application/msgpack"), (b"accept", b"application/msgpack")]
LOCAL = [(b"host", b"127.0.0.1:8765")]


def scope(method: str, path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8765),
    }


async def answer(app: Any, request: dict[str, Any], body: bytes) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []
    given = False

    async def receive() -> dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(request, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


CASES: list[tuple[str, str, list[tuple[bytes, bytes]], bytes, bool]] = [
    # method, path, headers, body, whether the lookup takes it
    (
        "POST",
        "/v1/queues/q/enqueue",
        LOCAL + MSGPACK,
        msgspec.msgpack.encode({"payload": b"x"}),
        True,
    ),
    ("GET", "/v1/queues/q/stats", LOCAL + MSGPACK, b"", True),  # no such queue: 404
    ("POST", "/v1/queues/q/stats", LOCAL + MSGPACK, b"", False),  # 405
    ("GET", "/v1/queues/q/enqueue", LOCAL + MSGPACK, b"", False),  # 405
    ("POST", "/v1/queues/q/nothing", LOCAL + MSGPACK, b"", False),  # 404
    ("POST", "/v1/queues//enqueue", LOCAL + MSGPACK, b"", False),
    ("POST", "/v1/queues/a/b/enqueue", LOCAL + MSGPACK, b"", False),
    ("POST", "/v1/queues/q/enqueue", [(b"host", b"evil.example"), *MSGPACK], b"", False),  # 400
    ("POST", "/v1/queues/q/enqueue", [*LOCAL, (b"origin", b"null"), *MSGPACK], b"", False),  # 403
    ("POST", "/v1/queues/q/enqueue", MSGPACK, b"", False),  # no Host: 400
    (
        "POST",
        "/",
        [
            *LOCAL,
            (b"content-type", b"application/x-amz-json-1.0"),
            (b"x-amz-target", b"AmazonSQS.ListQueues"),
        ],
        b"{}",
        True,
    ),
    ("GET", "/openapi.json", LOCAL, b"", True),  # a route without parameters
    ("POST", "/openapi.json", LOCAL, b"", False),  # 405
    ("GET", "/metrics", [(b"host", b"localhost"), (b"origin", b"http://localhost")], b"", False),
]


@pytest.mark.parametrize(("method", "path", "headers", "body", "fast"), CASES)
def test_the_lookup_answers_as_starlette(
    method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes, fast: bool
) -> None:
    async def both() -> None:
        app = create_app(f"memory://fastpath-{uuid.uuid4().hex}")
        assert isinstance(app, Broker)
        request = scope(method, path, headers)
        assert (app._route(dict(request)) is not None) is fast
        generic = await answer(lambda *a: Starlette.__call__(app, *a), dict(request), body)
        looked_up = await answer(app, dict(request), body)
        assert looked_up[0] == generic[0]
        if b"id" not in generic[1]:  # an enqueue's answer names a new message each time
            assert looked_up[1] == generic[1]
        await app.state.registry.close()

    asyncio.run(both())


def test_host_check_asks_the_middleware() -> None:
    check = HostCheck()
    for host in (b"127.0.0.1:8765", b"localhost", b"[::1]:1", b"a.localhost"):
        assert check.allows(host)
    for host in (b"evil.example", b"", b"127.0.0.1:x", b"127.0.0.1.evil.example"):
        assert not check.allows(host)


def test_receive_stepped_once() -> None:
    """A body already there is read without waiting; one that is not is waited for; a
    client that left is seen, one that is waiting is not (and nothing waits after)."""

    async def run() -> None:
        event = asyncio.Event()
        messages: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            if not messages:
                await event.wait()
            return messages.pop(0)

        base = scope("POST", "/", [])
        messages.append({"type": "http.request", "body": b"abc", "more_body": False})
        assert await read_body(Request(base, receive), 10) == b"abc"
        assert not await disconnected(Request(base, receive))
        assert not event._waiters  # type: ignore[attr-defined]
        later = asyncio.get_running_loop().call_later(
            0.01,
            lambda: (
                messages.extend(
                    [
                        {"type": "http.request", "body": b"de", "more_body": True},
                        {"type": "http.request", "body": b"f", "more_body": False},
                    ]
                ),
                event.set(),
            ),
        )
        assert await read_body(Request(base, receive), 10) == b"def"
        later.cancel()
        messages.append({"type": "http.disconnect"})
        assert await disconnected(Request(base, receive))

    asyncio.run(run())
