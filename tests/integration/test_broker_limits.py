"""What a request may cost the broker before it is trusted: credentials are checked before a
body is read, and bodies are read up to a limit. A broker in a child process, raw sockets for
what no well-behaved client sends, and the real clients (s3q's, boto3) for the rest."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError
from sqs_broker import sqs_client

from s3q.broker import spawn
from s3q.client import BodyTooLarge, InvalidArgument, QueueNotFound, connect

TOKEN = "limits-token"
KEY_ID, SECRET = "AKIDLIMITS", "limits-secret"
MAX_BODY = 1024 * 1024
MAX_BATCH = 100
CHUNK = b"x" * 65536


class ChildBroker:
    def __init__(self, proc: Any, url: str) -> None:
        self.proc, self.url = proc, url
        self.port = int(url.rsplit(":", 1)[1])

    def rss(self) -> int:
        """The broker process's resident set, in bytes."""
        with open(f"/proc/{self.proc.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def sqs(self) -> Any:
        return sqs_client(self.url, KEY_ID, SECRET)


def child_broker(root: Path, **settings: Any) -> Iterator[ChildBroker]:
    """A broker in a child process on a store under ``root``, with the bearer token."""
    proc, url = spawn(f"file://{root}/store", tokens={TOKEN}, **settings)
    try:
        yield ChildBroker(proc, url)
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChildBroker]:
    yield from child_broker(
        tmp_path_factory.mktemp("limits"),
        max_body=MAX_BODY,
        max_batch=MAX_BATCH,
        sqs_keys={KEY_ID: SECRET},
    )


def send(port: int, head: str, chunks: Iterator[bytes] | None = None) -> bytes:
    """Send a request head, then ``chunks`` of body for as long as the broker reads them;
    the status line and headers of its answer. Times out (failing the test) if the broker
    waits for a body it should have refused."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n")
        for chunk in chunks or ():
            try:
                sock.sendall(chunk)
            except OSError:  # the broker answered and closed: it read no further
                break
        answer = b""
        while b"\r\n\r\n" not in answer:
            got = sock.recv(65536)
            if not got:
                break
            answer += got
        return answer


def head(path: str, length: int | None, *headers: str) -> str:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    lines += headers
    lines.append(
        f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    )
    return "\n".join(lines) + "\n"


def chunked(total: int) -> Iterator[bytes]:
    for _ in range(total // len(CHUNK)):
        yield b"%x\r\n" % len(CHUNK) + CHUNK + b"\r\n"
    yield b"0\r\n\r\n"


def status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def pending(broker: ChildBroker, name: str) -> int:
    """Messages pending in queue ``name``: 0 if the broker never made it."""
    with connect(broker.url, token=TOKEN) as client:
        try:
            return client.queue(name).stats().pending
        except QueueNotFound:
            return 0


def test_an_unauthenticated_body_is_refused_before_it_is_read(broker: ChildBroker) -> None:
    """A 300 MB body without a token: 401 at once, with not a byte of the body sent."""
    answer = send(broker.port, head("/v1/queues/q/enqueue", 300_000_000))
    assert status(answer) == 401


def test_twenty_unsigned_100_mb_bodies_cost_the_broker_nothing(broker: ChildBroker) -> None:
    """Twenty clients stream 100 MB each at the native API and the SQS endpoint without
    credentials: each is refused before its body is read, and the broker does not grow."""
    before = broker.rss()
    answers: list[int] = []

    def flood(path: str) -> None:
        body = (CHUNK for _ in range(100_000_000 // len(CHUNK)))
        answers.append(status(send(broker.port, head(path, 100_000_000), body)))

    threads = [
        threading.Thread(target=flood, args=("/v1/queues/q/enqueue" if i % 2 else "/",))
        for i in range(20)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(answers) == [401] * 10 + [403] * 10
    assert broker.rss() - before < 10 * 2**20


def test_a_body_over_the_limit_is_refused_by_its_length(broker: ChildBroker) -> None:
    answer = send(
        broker.port,
        head("/v1/queues/q/enqueue", MAX_BODY + 1, f"Authorization: Bearer {TOKEN}"),
    )
    assert status(answer) == 413


def test_a_streamed_body_is_refused_at_the_limit(broker: ChildBroker) -> None:
    """No Content-Length: the body is read a chunk at a time and refused once past the
    limit; the 64 MB the client goes on sending is never held."""
    before = broker.rss()
    answer = send(
        broker.port,
        head("/v1/queues/streamed/enqueue", None, f"Authorization: Bearer {TOKEN}"),
        chunked(64 * 2**20),
    )
    assert status(answer) == 413
    assert broker.rss() - before < 10 * 2**20
    assert pending(broker, "streamed") == 0


def test_the_client_raises_body_too_large_and_nothing_is_enqueued(broker: ChildBroker) -> None:
    with connect(broker.url, token=TOKEN) as client:
        q = client.queue("big")
        with pytest.raises(BodyTooLarge, match="limit of 1,048,576 bytes"):
            q.enqueue_batch([b"x" * 600_000, b"y" * 600_000])
        q.enqueue_batch([b"x" * 600_000])
        assert q.stats().pending == 1


def test_an_sqs_request_of_an_unknown_key_is_refused_before_its_body(
    broker: ChildBroker,
) -> None:
    authorization = (
        "Authorization: AWS4-HMAC-SHA256 Credential=AKIDNOBODY/20260101/us-east-1/sqs/"
        "aws4_request, SignedHeaders=host;x-amz-date, Signature=00"
    )
    answer = send(
        broker.port, head("/", 300_000_000, authorization, "X-Amz-Date: 20260101T000000Z")
    )
    assert status(answer) == 403


def test_an_sqs_request_over_the_limit_gets_an_sqs_error(broker: ChildBroker) -> None:
    """A signed request larger than SQS takes: 413 in SQS's error shape, through boto3."""
    sqs = broker.sqs()
    url = sqs.create_queue(QueueName="sqsbig")["QueueUrl"]
    with pytest.raises(ClientError) as refused:
        sqs.send_message(QueueUrl=url, MessageBody="\x01" * (2 * 2**20))
    error = refused.value.response
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 413
    assert error["Error"]["Code"] == "RequestEntityTooLarge"
    assert pending(broker, "sqsbig") == 0


def test_a_call_with_more_entries_than_the_limit_is_refused_whole(broker: ChildBroker) -> None:
    """--max-batch bounds every list of a native call (items, receipts, ids): one entry over
    it is refused with a precise error and nothing is done; at the limit the call is served."""
    with connect(broker.url, token=TOKEN) as client:
        q = client.queue("batched")
        too_many = r"items has more than 100 entries; .* at most 100"
        with pytest.raises(InvalidArgument, match=too_many):
            q.enqueue_batch([b"m"] * (MAX_BATCH + 1))
        assert pending(broker, "batched") == 0
        ids = q.enqueue_batch([b"m"] * MAX_BATCH)
        with pytest.raises(InvalidArgument, match="ids has more than 100 entries"):
            q.discard(ids + ids[:1])
        messages = q.dequeue(max_messages=MAX_BATCH)
        receipts = [m.receipt for m in messages]
        with pytest.raises(InvalidArgument, match="receipts has more than 100 entries"):
            q.complete_batch(receipts + receipts[:1])
        assert q.stats().processing == len(messages)


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChildBroker]:
    """A broker with short timeouts for heads and bodies, and room for four connections."""
    yield from child_broker(
        tmp_path_factory.mktemp("strict"), head_timeout=1.0, body_timeout=1.0, max_connections=4
    )


def closed_after(sock: socket.socket, trickle: bytes = b"") -> float:
    """Seconds until the broker closes ``sock`` (sending ``trickle`` a byte every 0.2 s meanwhile);
    fails the test if it is still open after 20 s."""
    started = time.monotonic()
    sock.settimeout(0.2)
    for _ in range(100):
        try:
            if sock.recv(65536) == b"":
                return time.monotonic() - started
        except TimeoutError:
            pass  # still open: the next byte
        except OSError:  # reset: closed
            return time.monotonic() - started
        if trickle:
            try:
                sock.sendall(trickle[:1])
            except OSError:
                return time.monotonic() - started
            trickle = trickle[1:] or trickle
    raise AssertionError("the broker kept a slow connection open for 20 s")


def test_a_silent_connection_is_closed(strict: ChildBroker) -> None:
    with socket.create_connection(("127.0.0.1", strict.port)) as sock:
        assert closed_after(sock) < 5


def test_a_head_sent_a_byte_at_a_time_is_cut_off(strict: ChildBroker) -> None:
    """Slowloris: a byte every 0.2 s never completes the head; the broker closes the
    connection once the head is 1 s late."""
    with socket.create_connection(("127.0.0.1", strict.port)) as sock:
        sock.sendall(b"GET /v1/queues HTTP/1.1\r\n")
        assert closed_after(sock, b"X-Slow: " + b"a" * 1000) < 5


def test_a_head_over_16_kib_is_refused_with_400(strict: ChildBroker) -> None:
    """As h11 refuses it (whichever parser serves): header lines that keep coming past 16 KiB
    get a 400 and the connection closed; the broker holds no more of them."""
    with socket.create_connection(("127.0.0.1", strict.port), timeout=10) as sock:
        sock.sendall(b"GET /v1/queues HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        with contextlib.suppress(OSError):  # closed under our feet once refused
            for number in range(1000):
                sock.sendall(b"X-Line-%d: %s\r\n" % (number, b"a" * 60))
                time.sleep(0.001)  # chunks of their own, not one segment
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                answer += chunk
    assert status(answer) == 400


def test_a_body_that_stops_coming_is_refused_with_408(strict: ChildBroker) -> None:
    with socket.create_connection(("127.0.0.1", strict.port), timeout=20) as sock:
        request = head("/v1/queues/slow/enqueue", 1000, f"Authorization: Bearer {TOKEN}")
        sock.sendall(request.replace("\n", "\r\n").encode() + b"\r\n" + b"x" * 10)
        answer = sock.recv(65536)
    assert status(answer) == 408
    assert pending(strict, "slow") == 0


def test_a_kept_alive_connection_still_serves_request_after_request(strict: ChildBroker) -> None:
    """The head timer runs per request: a client that pauses between requests (within the
    keep-alive) and sends each head at once is served every time."""
    with httpx.Client(base_url=strict.url, headers={"authorization": f"Bearer {TOKEN}"}) as c:
        for _ in range(3):
            assert c.get("/v1/queues").status_code == 200
            time.sleep(1.5)  # a pause longer than the head timeout, between two requests


def test_connections_beyond_the_limit_are_answered_503(strict: ChildBroker) -> None:
    silent = [socket.create_connection(("127.0.0.1", strict.port)) for _ in range(4)]
    try:
        answer = httpx.get(f"{strict.url}/v1/queues", headers={"authorization": f"Bearer {TOKEN}"})
        assert answer.status_code == 503
    finally:
        for sock in silent:
            sock.close()


def series(url: str) -> int:
    """How many samples /metrics shows."""
    text = httpx.get(f"{url}/metrics", headers={"authorization": f"Bearer {TOKEN}"}).text
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def test_refused_requests_add_no_metric_series(broker: ChildBroker) -> None:
    """Requests with made-up queue names (without a token, or with one but for queues that do
    not exist) are counted without their names: /metrics does not grow with them."""

    def refused(n: int) -> None:
        with httpx.Client(base_url=broker.url) as anon:
            for i in range(n):
                anon.get(f"/v1/queues/anon-{i}/stats")
                anon.post(f"/v1/queues/anon-{i}/enqueue", content=b"")
        with connect(broker.url, token=TOKEN) as client:
            for i in range(n):
                with pytest.raises(QueueNotFound):
                    client.queue(f"unknown-{i}").stats()

    refused(3)  # the series of each (operation, outcome) once
    before = series(broker.url)
    refused(300)
    assert series(broker.url) == before
