"""What a request may cost the broker before it is trusted: credentials are checked before a
body is read, and bodies are read up to a limit. A broker in a child process, raw sockets for
what no well-behaved client sends, and the real clients (s3q's, boto3) for the rest."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from sqs_broker import sqs_client

from s3q.broker import spawn
from s3q.client import BodyTooLarge, connect

TOKEN = "limits-token"
KEY_ID, SECRET = "AKIDLIMITS", "limits-secret"
MAX_BODY = 1024 * 1024
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


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChildBroker]:
    root: Path = tmp_path_factory.mktemp("limits")
    proc, url = spawn(
        f"file://{root}/store",
        tokens={TOKEN},
        max_body=MAX_BODY,
        sqs_keys={KEY_ID: SECRET},
    )
    try:
        yield ChildBroker(proc, url)
    finally:
        proc.terminate()
        proc.wait(30)


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
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", *headers]
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
    with connect(broker.url, token=TOKEN) as client:
        return client.queue(name).stats().pending


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
