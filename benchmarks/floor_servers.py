"""The floors a broker's CPU per request is measured against: servers that answer every POST
with the same small msgpack body, ``{"id": "<16 hex digits>"}`` (what an enqueue is answered),
and every GET as a broker alone answers ``/v1/cluster`` (which s3q's client asks first).

    python benchmarks/floor_servers.py raw PORT        # asyncio protocol, uvloop, httptools
    python benchmarks/floor_servers.py starlette PORT  # uvicorn (uvloop, httptools), Starlette
    python benchmarks/floor_servers.py sqs PORT        # raw, answering SendMessage (canned)

``sqs`` answers every request as SendMessage of the benchmarks' message (1 KiB of ``x``) is
answered, with its MD5 (which boto3 checks): what boto3 costs a call with nothing behind it.
``raw`` is what Python can do per request: the parser's callbacks and one write. ``starlette``
is a generic ASGI application of one route, which reads the body and answers (no middleware,
no access log). Both keep connections alive; they run until killed.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
from typing import Any

import httptools
import msgspec
import uvloop

BODY = msgspec.msgpack.encode({"id": "0123456789abcdef"})
CLUSTER = msgspec.msgpack.encode({"broker": None, "brokers": []})


def answer(body: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/msgpack\r\n"
        + f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )


ANSWERS = {b"POST": answer(BODY), b"GET": answer(CLUSTER)}
SENT = msgspec.json.encode(
    {
        "MessageId": "00000000-0000-0000-0000-000000000000",
        "MD5OfMessageBody": hashlib.md5(b"x" * 1024).hexdigest(),
    }
)
SQS_ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/x-amz-json-1.0\r\n"
    + b"x-amzn-requestid: 00000000-0000-0000-0000-000000000000\r\n"
    + f"content-length: {len(SENT)}\r\n\r\n".encode()
    + SENT
)


class Raw(asyncio.Protocol):
    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.parser = httptools.HttpRequestParser(self)

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        self.transport.write(ANSWERS[self.parser.get_method()])


class Sqs(Raw):
    def on_message_complete(self) -> None:
        self.transport.write(SQS_ANSWER)


async def raw(port: int, protocol: type[asyncio.Protocol] = Raw) -> None:
    server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", port)
    await server.serve_forever()


def starlette(port: int) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def enqueue(request: Request) -> Response:
        await request.body()
        return Response(BODY, media_type="application/msgpack")

    async def cluster(request: Request) -> Response:
        return Response(CLUSTER, media_type="application/msgpack")

    app = Starlette(
        routes=[
            Route("/{path:path}", enqueue, methods=["POST"]),
            Route("/{path:path}", cluster, methods=["GET"]),
        ]
    )
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        http="httptools",
        loop="uvloop",
        server_header=False,
    )


if __name__ == "__main__":
    kind, port = sys.argv[1], int(sys.argv[2])
    if kind == "raw":
        uvloop.run(raw(port))
    elif kind == "sqs":
        uvloop.run(raw(port, Sqs))
    else:
        starlette(port)
