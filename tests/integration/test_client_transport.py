"""The clients' HTTP/1.1 (s3q.client.transport, s3q.client.async_transport) against servers on
127.0.0.1 that misbehave as a network or a broker may: one that closes a kept-alive
connection, one that never answers, one that hangs up halfway through its answer, one that
answers in chunks."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from collections.abc import Callable, Iterator

import pytest
from broker_harness import Broker

from s3q.client import AsyncClient, BrokerUnreachable, Client, connect, connect_async
from s3q.client.async_transport import AsyncTransport
from s3q.client.http11 import Broken, NotSent, TimedOut
from s3q.client.transport import Transport

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\ns3q-writer: w1\r\n\r\nok"


class Server:
    """A server of raw sockets: ``serve(conn)`` runs for each connection accepted."""

    def __init__(self, serve: Callable[[socket.socket], None]) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted = 0
        self._serve = serve
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def close(self) -> None:
        self.sock.close()


def _requests(conn: socket.socket) -> Iterator[bytes]:
    """Each request head (and body) read from ``conn`` (one recv each: small requests)."""
    while data := conn.recv(65536):
        yield data


@pytest.fixture
def transport_to() -> Iterator[Callable[[Callable[[socket.socket], None]], Transport]]:
    servers: list[Server] = []

    def make(serve: Callable[[socket.socket], None]) -> Transport:
        server = Server(serve)
        servers.append(server)
        return Transport(server.url, 2.0, ssl.create_default_context())

    yield make
    for server in servers:
        server.close()


def test_calls_share_one_kept_alive_connection(broker_url: str) -> None:
    with connect(broker_url) as c:
        q = c.queue("jobs")
        for i in range(20):
            q.enqueue(b"m%d" % i)
        transport = c._transport(broker_url)
        assert len(transport._idle) == 1  # twenty calls, one connection
        assert len(q.dequeue(20)) == 20


@pytest.fixture
def broker_url(tmp_path: object) -> Iterator[str]:
    with Broker("memory://transport") as b:
        yield b.url


def test_a_connection_the_server_closed_while_idle_is_not_used_again(
    transport_to: Callable[[Callable[[socket.socket], None]], Transport],
) -> None:
    closed = threading.Event()

    def one_answer_then_close(conn: socket.socket) -> None:
        next(_requests(conn))
        conn.sendall(ANSWER)
        conn.close()  # (as a broker's keep-alive timeout does, the connection idle)
        closed.set()

    t = transport_to(one_answer_then_close)
    for _ in range(3):
        closed.clear()
        answer = t.request("GET", "/v1/cluster", None, {}, 2.0)
        assert (answer.status, answer.body, answer.headers["s3q-writer"]) == (200, b"ok", "w1")
        assert closed.wait(5)


def test_an_answer_in_chunks_and_one_to_close_are_read_whole(
    transport_to: Callable[[Callable[[socket.socket], None]], Transport],
) -> None:
    def chunked(conn: socket.socket) -> None:
        for _ in _requests(conn):
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
            conn.sendall(b"2\r\nde\r\n0\r\n\r\n")

    assert transport_to(chunked).request("GET", "/", None, {}, 2.0).body == b"abcde"

    def until_close(conn: socket.socket) -> None:
        next(_requests(conn))
        conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it")
        conn.close()

    t = transport_to(until_close)
    assert t.request("GET", "/", None, {}, 2.0).body == b"all of it"
    assert not t._idle  # (not kept: the broker said close)


def test_failures_are_told_apart(
    transport_to: Callable[[Callable[[socket.socket], None]], Transport],
) -> None:
    def silent(conn: socket.socket) -> None:
        for _ in _requests(conn):
            pass

    with pytest.raises(TimedOut):
        transport_to(silent).request("POST", "/", b"x", {}, 0.3)

    def halfway(conn: socket.socket) -> None:
        next(_requests(conn))
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this")
        conn.close()

    with pytest.raises(Broken):
        transport_to(halfway).request("POST", "/", b"x", {}, 2.0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # (closed: nothing listens there)
    with pytest.raises(NotSent):
        Transport(f"http://127.0.0.1:{port}", 2.0, ssl.create_default_context()).request(
            "GET", "/", None, {}, 2.0
        )


def test_a_request_is_sent_as_http_1_1_with_its_length_and_headers(
    transport_to: Callable[[Callable[[socket.socket], None]], Transport],
) -> None:
    seen: list[bytes] = []

    def echo(conn: socket.socket) -> None:
        for data in _requests(conn):
            seen.append(data)
            conn.sendall(ANSWER)

    t = transport_to(echo)
    t.request("POST", "/v1/queues/q/enqueue", b"\x81\xa1a\x01", {"Accept": "x"}, 2.0)
    head, _, body = seen[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/queues/q/enqueue HTTP/1.1"
    assert b"Content-Length: 4" in lines and b"Accept: x" in lines
    assert any(line.startswith(b"Host: 127.0.0.1:") for line in lines)
    assert body == b"\x81\xa1a\x01"


# -- the async client's (s3q.client.async_transport): the same cases


def _async(server: Server) -> AsyncTransport:
    return AsyncTransport(server.url, 2.0, ssl.create_default_context())


def test_the_async_transport_keeps_one_connection_and_drops_a_closed_one() -> None:
    closed = threading.Event()

    def answers_then_close(conn: socket.socket) -> None:
        for i, _ in enumerate(_requests(conn)):
            conn.sendall(ANSWER)
            if i == 2:
                conn.close()  # (after three answers on it)
                closed.set()
                return

    server = Server(answers_then_close)

    async def main() -> None:
        t = _async(server)
        for _ in range(3):
            answer = await t.request("GET", "/v1/cluster", None, {}, 2.0)
            assert (answer.status, answer.body, answer.headers["s3q-writer"]) == (200, b"ok", "w1")
        assert server.accepted == 1
        assert closed.wait(5)
        await asyncio.sleep(0)  # (the loop reads the close)
        assert (await t.request("GET", "/", None, {}, 2.0)).body == b"ok"
        assert server.accepted == 2
        t.close()

    try:
        asyncio.run(main())
    finally:
        server.close()


def test_the_async_transports_failures_are_told_apart() -> None:
    def silent(conn: socket.socket) -> None:
        for _ in _requests(conn):
            pass

    def halfway(conn: socket.socket) -> None:
        next(_requests(conn))
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this")
        conn.close()

    def chunked(conn: socket.socket) -> None:
        for _ in _requests(conn):
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
            conn.sendall(b"2\r\nde\r\n0\r\n\r\n")

    servers = [Server(silent), Server(halfway), Server(chunked)]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # (closed: nothing listens there)

    async def main() -> None:
        quiet, cut, whole = (_async(server) for server in servers)
        with pytest.raises(TimedOut):
            await quiet.request("POST", "/", b"x", {}, 0.3)
        assert not quiet._idle  # (a connection whose answer never came is not used again)
        with pytest.raises(Broken):
            await cut.request("POST", "/", b"x", {}, 2.0)
        assert (await whole.request("GET", "/", None, {}, 2.0)).body == b"abcde"
        nowhere = AsyncTransport(f"http://127.0.0.1:{port}", 2.0, ssl.create_default_context())
        with pytest.raises(NotSent):
            await nowhere.request("GET", "/", None, {}, 2.0)
        pending = asyncio.ensure_future(quiet.request("POST", "/", b"x", {}, 30.0))
        await asyncio.sleep(0.05)
        pending.cancel()  # (a stalled broker's call, given up)
        with pytest.raises(asyncio.CancelledError):
            await pending
        assert not quiet._idle

    try:
        asyncio.run(main())
    finally:
        for server in servers:
            server.close()


def test_the_async_client_calls_a_broker_over_one_connection(broker_url: str) -> None:
    async def main() -> None:
        async with connect_async(broker_url) as c:
            q = c.queue("jobs")
            ids = [await q.enqueue(b"m%d" % i) for i in range(10)]
            assert len(c._transports[broker_url]._idle) == 1
            got = await q.dequeue(10)
            assert [m.id for m in got] == ids
            await q.complete_batch(got)
            assert (await q.stats()).completed == 10

    asyncio.run(main())


def test_both_clients_say_a_broker_nobody_answers_for_is_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"  # (closed: nothing listens there)
    with Client(url, retries=1, follow=False) as c, pytest.raises(BrokerUnreachable):
        c.queue("jobs").enqueue(b"x")

    async def main() -> None:
        async with AsyncClient(url, retries=1, follow=False) as c:
            with pytest.raises(BrokerUnreachable):
                await c.queue("jobs").enqueue(b"x")

    asyncio.run(main())
