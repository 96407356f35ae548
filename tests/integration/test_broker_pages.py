"""Dequeues answered as pages (s3q.wire.pages): a broker sends each leased stretch as one block of
payloads, and the client makes of it exactly the messages a dequeue answers one by one. A real
broker on 127.0.0.1 and s3q's client; a broker from before pages is a real HTTP server that
refuses the argument as such a broker does."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import msgspec
import pytest
from broker_harness import Broker

import s3q
from s3q import Message
from s3q.client import Client, InvalidArgument, connect
from s3q.wire import pages
from s3q.wire.pages import Pages


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    with Broker(f"file://{tmp_path}/store", visibility_timeout=60.0) as b:
        yield b


@pytest.fixture
def client(broker: Broker) -> Iterator[Client]:
    with connect(broker.url) as c:
        yield c


def _load(client: Client, name: str, paged: bool) -> list[Message]:
    """The same work on queue ``name``: batches with every field a member can have, a record
    among stretches (a message released), then one dequeue of everything."""
    q = client.queue(name)
    q._aq._requests.paged = paged  # (how this queue's dequeues ask)
    q.enqueue_batch(
        [
            {"payload": b"a" * 10, "priority": 3, "tenant": "t1", "dedup_id": "d-a"},
            {"payload": b"", "priority": 3, "tenant": "t1", "attributes": {"k": "v"}},
            {"payload": b"c" * 3000, "priority": 3, "tenant": "t1"},
        ]
    )
    q.enqueue_batch([{"payload": bytes([i]) * (i + 1), "priority": 1} for i in range(200)])
    [first] = q.dequeue(1)  # a stretch of one, released: a record, delivered again below
    q.release(first)
    return q.dequeue(max_messages=1000)


def _shape(m: Message) -> tuple[Any, ...]:
    receipt = m.receipt or ""
    return (
        m.id[8:],  # (each queue has an id of its own: the rest names the message's place)
        m.payload,
        m.priority,
        m.attempts,
        m.dedup_id,
        m.attributes,
        m.tenant,
        m.group,
        m.last_error,
        receipt.partition("~")[0] == m.id,
    )


def test_pages_make_the_messages_a_dequeue_answers_one_by_one(client: Client) -> None:
    paged = _load(client, "paged", paged=True)
    single = _load(client, "single", paged=False)
    assert len(paged) == len(single) == 203
    assert [_shape(m) for m in paged] == [_shape(m) for m in single]
    assert paged[0].payload == b"a" * 10  # the record (released), delivered again first
    client.queue("paged").complete_batch(paged)  # the receipts are the leases'
    stats = client.queue("paged").stats()
    assert (stats.completed, stats.pending, stats.processing) == (203, 0, 0)


def test_the_broker_answers_a_stretch_as_one_page(broker: Broker, client: Client) -> None:
    q = client.queue("raw")
    q.enqueue_batch([b"x" * 100] * 500)
    body = msgspec.msgpack.encode({"max_messages": 500, "pages": True})
    answer = httpx.post(f"{broker.url}/v1/queues/raw/dequeue", content=body, headers=_MSGPACK)
    assert answer.status_code == 200, answer.text
    pages = msgspec.msgpack.decode(answer.content, type=Pages)
    assert pages.messages == [] and len(pages.pages) == 1
    [page] = pages.pages
    assert (page.at, page.count, len(page.payloads)) == (0, 500, 50_000)
    refused = httpx.post(
        f"{broker.url}/v1/queues/raw/dequeue",
        content=msgspec.msgpack.encode({"max_messages": 1, "pages": "yes"}),
        headers=_MSGPACK,
    )
    assert refused.status_code == 400 and b"pages must be true or false" in refused.content
    assert q.stats().processing == 500  # the refused call leased nothing


_MSGPACK = {"content-type": "application/msgpack", "accept": "application/msgpack"}


class _BrokerBeforePages(http.server.BaseHTTPRequestHandler):
    """A dequeue endpoint as a broker from before pages answers it: ``pages`` is an unknown
    argument (400, nothing done); without it, one message."""

    asked: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = msgspec.msgpack.decode(self.rfile.read(int(self.headers["content-length"])))
        self.asked.append(body)
        if "pages" in body:
            status = 400
            answer = {"error": "InvalidArgument", "message": "unknown argument(s): pages"}
        else:
            status = 200
            message = Message("m1", b"p", receipt="m1~t")
            answer = {"messages": [msgspec.to_builtins(message, builtin_types=(bytes,))]}
        content = msgspec.msgpack.encode(answer)
        self.send_response(status)
        self.send_header("content-type", "application/msgpack")
        self.send_header("content-length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_broker_from_before_pages_is_asked_for_messages() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _BrokerBeforePages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with connect(url) as c:
            q = c.queue("old")
            assert [m.id for m in q.dequeue(5, complete=["x~y"])] == ["m1"]
            assert [m.id for m in q.dequeue(5)] == ["m1"]
        asked = _BrokerBeforePages.asked
        assert [("pages" in a, a.get("complete")) for a in asked] == [
            (True, ["x~y"]),  # refused: nothing done
            (False, ["x~y"]),  # the same call again, without pages
            (False, None),  # and every call after
        ]
    finally:
        server.shutdown()
        server.server_close()


def test_a_refusal_that_is_not_about_pages_is_raised(client: Client) -> None:
    q = client.queue("q")
    q.enqueue(b"x")
    with pytest.raises(InvalidArgument, match="max_messages"):
        q.dequeue(10**7)
    assert q._aq._requests.paged  # (still asking for pages)
    assert [m.payload for m in q.dequeue(5)] == [b"x"]


def test_pages_made_in_process_give_bytes(tmp_path: Path) -> None:
    """An embedded queue's pages hold a view of its cache; the messages made of them hold
    bytes, as any message does."""
    with s3q.open(f"file://{tmp_path}/q") as q:
        q.enqueue_batch([b"ab", b"cde", b""])
        answer = q.dequeue_pages(10)
        got = pages.merged(answer)
    assert len(answer.pages) == 1
    assert [(type(m.payload), m.payload) for m in got] == [
        (bytes, b"ab"),
        (bytes, b"cde"),
        (bytes, b""),
    ]
