"""The lean request path (``s3q.broker.lean``) answers exactly as the generic stack does: each
request below, good or bad, is sent as raw bytes to a broker with the lean path and to one
without, and the two answers must match in status, content type and body. Also: the lean path
really takes the calls it should, keeps pipelined requests in order, waits for a body sent in
pieces, and refuses a body that stops coming as the generic stack does."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from broker_harness import Broker
from grants import principal

TOKEN = "lean-token"
KEY_ID, SECRET = "AKIDLEAN", "lean-secret"
#: a principal of the brokers' principals file: it may send to "lean" and "leansqs" only
LIMITED, LIMITED_KEY = "limited-token", "AKIDLIMITED"
LIMITED_GRANTS = [
    {"allow": "send", "queues": ["lean*"]},
    {"deny": "*", "queues": "lean-deny"},
    {"allow": "read", "queues": "leansqs"},
]
MAX_BATCH = 5
Q = "/v1/queues/lean"
pack = msgspec.msgpack.encode


def request(
    path: str,
    body: bytes,
    *,
    kind: str = "application/msgpack",
    token: str | None = TOKEN,
    method: str = "POST",
    extra: tuple[str, ...] = (),
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Accept: application/msgpack"]
    lines += [f"Content-Type: {kind}"] if kind else []
    lines += [f"Authorization: Bearer {token}"] if token is not None else []
    lines += [f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def answers(port: int, data: bytes, count: int = 1, pieces: int = 1) -> list[tuple[int, str, Any]]:
    """Send ``data`` (in ``pieces`` writes) on one connection; its first ``count`` answers as
    (status, content type, decoded body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        step = -(-len(data) // pieces)
        for at in range(0, len(data), step):
            sock.sendall(data[at : at + step])
        stream = sock.makefile("rb")
        found = []
        for _ in range(count):
            status = int(stream.readline().split()[1])
            headers = {}
            while (line := stream.readline()) not in (b"\r\n", b""):
                key, _, value = line.decode().partition(":")
                headers[key.strip().lower()] = value.strip()
            if "content-length" in headers:
                raw = stream.read(int(headers["content-length"]))
            else:  # chunked
                raw = b""
                while size := int(stream.readline(), 16):
                    raw += stream.read(size + 2)[:-2]
                stream.readline()
            kind = headers.get("content-type", "")
            body = (
                msgspec.msgpack.decode(raw)
                if "msgpack" in kind
                else msgspec.json.decode(raw)
                if "json" in kind
                else raw
            )
            found.append((status, kind, body))
        return found


def shape(answer: tuple[int, str, Any]) -> tuple[int, str, Any]:
    """An answer with what differs from broker to broker (ids, receipts) reduced to types."""
    status, kind, body = answer
    if status == 200 and isinstance(body, dict):
        body = {k: type(v).__name__ for k, v in body.items()}
    return status, kind, body


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Broker, Broker]]:
    path = tmp_path_factory.mktemp("lean") / "principals.toml"
    path.write_text(principal("limited", LIMITED_GRANTS, (LIMITED,), {LIMITED_KEY: SECRET}))
    with (
        Broker(
            "memory://lean", {TOKEN}, {KEY_ID: SECRET}, max_batch=MAX_BATCH, principals=str(path)
        ) as lean,
        Broker(
            "memory://generic",
            {TOKEN},
            {KEY_ID: SECRET},
            max_batch=MAX_BATCH,
            lean=False,
            principals=str(path),
        ) as generic,
    ):
        assert lean.server.config.loaded_app.app.state.lean is not None  # (the lean one is)
        yield lean, generic


def taken(broker: Broker) -> int:
    """Calls the broker's lean path has answered."""
    return int(broker.server.config.loaded_app.app.state.lean.taken)


CASES: list[tuple[str, bytes]] = [
    ("enqueue", request(f"{Q}/enqueue", pack({"payload": b"x"}))),
    (
        "enqueue, every argument",
        request(
            f"{Q}/enqueue",
            pack(
                {
                    "payload": b"x",
                    "priority": 3,
                    "delay": 0,
                    "dedup_id": None,
                    "group": None,
                    "attributes": {"a": "b"},
                    "durability": "durable",
                    "tenant": "t",
                }
            ),
        ),
    ),
    ("enqueue-batch", request(f"{Q}/enqueue-batch", pack({"items": [b"a", {"payload": b"b"}]}))),
    ("dequeue", request(f"{Q}/dequeue", pack({"max_messages": 1}))),
    ("dequeue of a queue never made", request("/v1/queues/none/dequeue", pack({}))),
    ("not msgpack", request(f"{Q}/enqueue", b"\xc1\xc1")),
    ("a list, not a map", request(f"{Q}/enqueue", pack([1, 2]))),
    ("a map of numbers", request(f"{Q}/enqueue", pack({1: 2}))),
    ("an unknown argument", request(f"{Q}/enqueue", pack({"payload": b"x", "bogus": 1}))),
    ("a missing argument", request(f"{Q}/enqueue", pack({"priority": 1}))),
    ("a payload of the wrong type", request(f"{Q}/enqueue", pack({"payload": 5}))),
    ("a priority out of range", request(f"{Q}/enqueue", pack({"payload": b"x", "priority": 300}))),
    ("items not a list", request(f"{Q}/enqueue-batch", pack({"items": 5}))),
    ("items over the limit", request(f"{Q}/enqueue-batch", pack({"items": [b"x"] * 6}))),
    ("items null", request(f"{Q}/enqueue-batch", pack({"items": None}))),
    ("a bad item", request(f"{Q}/enqueue-batch", pack({"items": [b"x", {"payload": 1}]}))),
    ("receipts null", request(f"{Q}/complete", pack({"receipts": None}))),
    ("an unknown receipt", request(f"{Q}/complete", pack({"receipts": ["bogus"]}))),
    ("complete of a queue never made", request("/v1/queues/none/complete", pack({"receipts": []}))),
    ("max_messages of the wrong type", request(f"{Q}/dequeue", pack({"max_messages": "x"}))),
    ("pages not a boolean", request(f"{Q}/dequeue", pack({"pages": 3}))),
    ("a bad queue name", request("/v1/queues/a:b/enqueue", pack({"payload": b"x"}))),
    ("an escaped name", request("/v1/queues/le%61n/enqueue", pack({"payload": b"x"}))),
    ("a query string", request(f"{Q}/enqueue?x=1", pack({"payload": b"x"}))),
    ("no token", request(f"{Q}/enqueue", pack({"payload": b"x"}), token=None)),
    ("a wrong token", request(f"{Q}/enqueue", pack({"payload": b"x"}), token="nope")),
    ("plain text", request(f"{Q}/enqueue", b"payload", kind="text/plain")),
    ("no content type", request(f"{Q}/enqueue", pack({"payload": b"x"}), kind="")),
    ("JSON", request(f"{Q}/dequeue", b'{"max_messages": 1}', kind="application/json")),
    (
        "msgpack with a charset",
        request(f"{Q}/dequeue", pack({}), kind="application/msgpack; charset=x"),
    ),
    ("an origin", request(f"{Q}/enqueue", pack({"payload": b"x"}), extra=("Origin: http://evil",))),
    (
        "an upgrade",
        request(
            f"{Q}/enqueue",
            pack({"payload": b"x"}),
            extra=("Connection: Upgrade", "Upgrade: websocket"),
        ),
    ),
    ("an unknown operation", request(f"{Q}/frobnicate", pack({}))),
    ("a GET of a POST route", request(f"{Q}/enqueue", pack({"payload": b"x"}), method="GET")),
    ("an empty body", request(f"{Q}/enqueue", b"")),
    ("fail of an unknown receipt", request(f"{Q}/fail", pack({"receipt": "bogus"}))),
    ("extend without seconds", request(f"{Q}/extend", pack({"receipt": "bogus"}))),
    ("release of receipts not strings", request(f"{Q}/release", pack({"receipts": [1]}))),
    ("a principal's granted send", request(f"{Q}/enqueue", pack({"payload": b"x"}), token=LIMITED)),
    ("a principal's refused receive", request(f"{Q}/dequeue", pack({}), token=LIMITED)),
    (
        "a principal's refused admin",
        request(f"{Q}/configure", pack({"settings": {"max_attempts": 3}}), token=LIMITED),
    ),
    (
        "a principal's denied send",
        request("/v1/queues/lean-deny/enqueue", pack({"payload": b"x"}), token=LIMITED),
    ),
    (
        "a principal's refused send, badly made",
        request("/v1/queues/other/enqueue", pack({"bogus": 1}), token=LIMITED),
    ),
]


@pytest.mark.parametrize("case", [c for c, _ in CASES])
def test_the_lean_path_answers_as_the_generic_stack(
    brokers: tuple[Broker, Broker], case: str
) -> None:
    data = dict(CASES)[case]
    lean, generic = brokers
    assert shape(answers(lean.port, data)[0]) == shape(answers(generic.port, data)[0])


def test_the_lean_path_takes_the_hot_calls(brokers: tuple[Broker, Broker]) -> None:
    lean, _ = brokers
    before = taken(lean)
    for case in ("enqueue", "enqueue-batch", "dequeue", "an unknown receipt"):
        answers(lean.port, dict(CASES)[case])
    assert taken(lean) == before + 4
    answers(lean.port, dict(CASES)["a principal's granted send"])
    assert taken(lean) == before + 5
    for case in ("not msgpack", "a wrong token", "JSON", "an origin", "a query string"):
        answers(lean.port, dict(CASES)[case])
    for case in ("a principal's refused receive", "a principal's denied send"):
        answers(lean.port, dict(CASES)[case])
    assert taken(lean) == before + 5  # the generic stack's to answer (and refusals)


def test_pipelined_requests_are_answered_in_order(brokers: tuple[Broker, Broker]) -> None:
    lean, _ = brokers
    calls = [
        request("/v1/queues/piped/enqueue", pack({"payload": b"1"})),
        request("/v1/queues/piped/stats", b"", method="GET", kind=""),
        request("/v1/queues/piped/enqueue", pack({"payload": b"2"})),
        request("/v1/queues/piped/enqueue", b"\xc1"),
        request("/v1/queues/piped/dequeue", pack({"max_messages": 5})),
    ]
    found = answers(lean.port, b"".join(calls), count=len(calls))
    assert [status for status, _, _ in found] == [200, 200, 200, 400, 200]
    assert found[1][2]["total_enqueued"] == 1
    assert [m["payload"] for m in found[4][2]["messages"]] == [b"1", b"2"]


def test_a_body_sent_in_pieces_is_taken(brokers: tuple[Broker, Broker]) -> None:
    lean, _ = brokers
    before = taken(lean)
    data = request("/v1/queues/pieces/enqueue", pack({"payload": b"p" * 5000}))
    [(status, _, body)] = answers(lean.port, data, pieces=7)
    assert status == 200 and isinstance(body["id"], str)
    assert taken(lean) == before + 1


def test_a_body_that_stops_coming_is_refused_with_408() -> None:
    with Broker("memory://late", tokens={TOKEN}, body_timeout=0.5) as lean:
        data = request("/v1/queues/late/enqueue", pack({"payload": b"x" * 100}))
        with socket.create_connection(("127.0.0.1", lean.port), timeout=20) as sock:
            sock.sendall(data[:-10])
            answer = sock.recv(65536)
            assert sock.recv(1) == b""  # and the connection closed
        assert taken(lean) == 1
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"RequestTimeout" in answer


def sqs(
    port: int,
    target: str | None,
    body: bytes,
    *,
    key: str = KEY_ID,
    kind: str = "application/x-amz-json-1.0",
    tamper: bytes | None = None,
) -> bytes:
    """A request to the SQS endpoint of the broker on ``port``, signed as boto3 signs it
    (``tamper``: a body sent instead of the one signed)."""
    headers = {"Content-Type": kind}
    if target is not None:
        headers["X-Amz-Target"] = f"AmazonSQS.{target}"
    signing = AWSRequest("POST", f"http://127.0.0.1:{port}/", data=body, headers=headers)
    SigV4Auth(Credentials(key, SECRET), "sqs", "us-east-1").add_auth(signing)
    sent = tamper if tamper is not None else body
    lines = [
        "POST / HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        *(f"{k}: {v}" for k, v in signing.headers.items() if k.lower() != "content-length"),
        f"Content-Length: {len(sent)}",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + sent


def sqs_shape(answer: tuple[int, str, Any], port: int) -> tuple[int, str, Any]:
    """An SQS answer with what differs from broker to broker (ports, ids, handles) reduced."""
    status, kind, body = answer
    if isinstance(body, bytes):  # the query protocol's XML
        body = re.sub(rb"<RequestId>[^<]*</RequestId>", b"", body.replace(str(port).encode(), b"P"))
    if isinstance(body, dict):
        body = {
            k: type(v).__name__ if k in ("MessageId", "ReceiptHandle", "MD5OfMessageBody") else v
            for k, v in body.items()
        }
        body = msgspec.json.decode(msgspec.json.encode(body).replace(str(port).encode(), b"P"))
        if "Messages" in body:
            body["Messages"] = [
                {k: type(v).__name__ for k, v in m.items()} for m in body["Messages"]
            ]
    return status, kind, body


SQS_CASES: list[tuple[str, str | None, bytes, dict[str, Any]]] = [
    ("CreateQueue", "CreateQueue", b'{"QueueName": "leansqs"}', {}),
    ("GetQueueUrl", "GetQueueUrl", b'{"QueueName": "leansqs"}', {}),
    (
        "SendMessage",
        "SendMessage",
        b'{"QueueUrl": "http://127.0.0.1:1/000000000000/leansqs", "MessageBody": "hi"}',
        {},
    ),
    (
        "ReceiveMessage",
        "ReceiveMessage",
        b'{"QueueUrl": "http://127.0.0.1:1/000000000000/leansqs"}',
        {},
    ),
    (
        "a queue that does not exist",
        "SendMessage",
        b'{"QueueUrl": "http://h/000000000000/nope", "MessageBody": "x"}',
        {},
    ),
    (
        "a bad handle",
        "DeleteMessage",
        b'{"QueueUrl": "http://h/000000000000/leansqs", "ReceiptHandle": "bogus"}',
        {},
    ),
    ("not JSON", "SendMessage", b"{not json", {}),
    ("a list, not a map", "ListQueues", b"[1]", {}),
    ("an unknown action", "Frobnicate", b"{}", {}),
    ("an unsupported action", "AddPermission", b"{}", {}),
    ("no target", None, b"{}", {}),
    ("an unknown key", "ListQueues", b"{}", {"key": "AKIDNOBODY"}),
    (
        "a principal's granted send",
        "SendMessage",
        b'{"QueueUrl": "http://h/000000000000/leansqs", "MessageBody": "x"}',
        {"key": LIMITED_KEY},
    ),
    (
        "a principal's refused receive",
        "ReceiveMessage",
        b'{"QueueUrl": "http://h/000000000000/leansqs"}',
        {"key": LIMITED_KEY},
    ),
    ("a principal's listing", "ListQueues", b"{}", {"key": LIMITED_KEY}),
    ("a body not the one signed", "ListQueues", b"{}", {"tamper": b"{ }"}),
    (
        "a query-protocol request",
        None,
        b"Action=ListQueues&Version=2012-11-05",
        {"kind": "application/x-www-form-urlencoded"},
    ),
    (
        "a query-protocol error",
        None,
        b"Action=Frobnicate",
        {"kind": "application/x-www-form-urlencoded"},
    ),
]


@pytest.mark.parametrize("case", [c for c, *_ in SQS_CASES])
def test_the_lean_path_answers_sqs_as_the_generic_stack(
    brokers: tuple[Broker, Broker], case: str
) -> None:
    _, target, body, options = next(c for c in SQS_CASES if c[0] == case)
    lean, generic = brokers
    before = taken(lean)
    found = [
        sqs_shape(answers(b.port, sqs(b.port, target, body, **options))[0], b.port)
        for b in (lean, generic)
    ]
    assert found[0] == found[1]
    # taken by the lean path, but for an unknown key (refused before its body, generically)
    assert taken(lean) == before + (0 if options.get("key") == "AKIDNOBODY" else 1)
