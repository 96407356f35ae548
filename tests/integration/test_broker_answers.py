"""What a broker's answers tell a caller, found by a review of a running broker: a malformed
credential or body is a precise 4xx (never a 500), an error names the queue and never where or
how the store keeps it, and a 500 says nothing of its cause. A real broker on 127.0.0.1, called
with httpx, boto3 and s3q's client."""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from botocore.exceptions import ClientError
from conftest import MotoServer
from sqs_broker import KEY_ID, SECRET, SqsBroker
from sqs_checks import signed_request

import s3q
from s3q.broker import peerauth
from s3q.client import connect

DEEP = 100_000


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[SqsBroker]:
    with SqsBroker(f"file://{tmp_path}/store", sqs_keys={KEY_ID: SECRET}) as b:
        yield b


def sqs_post(broker: SqsBroker, action: str, body: bytes) -> httpx.Response:
    request = signed_request(body, broker.url + "/", action=action)
    return httpx.post(broker.url + "/", headers=dict(request.headers.items()), content=body)


def test_a_non_ascii_signature_is_a_403(broker: SqsBroker) -> None:
    body = b'{"QueueName": "q"}'
    request = signed_request(body, broker.url + "/")
    headers = dict(request.headers.items())
    for forged in (
        headers["Authorization"][:-4] + "\u00e9\u00e9\u00e9\u00e9",  # in the signature
        headers["Authorization"].replace(KEY_ID, KEY_ID + "\u00ff"),  # in the credential
    ):
        answer = httpx.post(
            broker.url + "/",
            headers={**headers, "Authorization": forged.encode("latin-1")},  # type: ignore[dict-item]
            content=body,
        )
        assert answer.status_code == 403, answer.text
        assert answer.headers["x-amzn-query-error"].endswith(";Sender")
    assert broker.client().list_queues().get("QueueUrls", []) == []


def test_a_non_ascii_peer_digest_is_a_403(tmp_path: Path) -> None:
    token = "cluster-token"
    with SqsBroker(f"file://{tmp_path}/store", tokens={token}, advertise=True) as b:
        path = "/v1/queues/q/enqueue"
        # signed with the cluster's token over a digest no body has: refused, not a 500
        digest, stamp = "\u00e9" * 64, int(time.time())
        message = peerauth._canonical(b.url, "POST", path, [], stamp, digest)
        signature = hmac.new(token.encode(), message, hashlib.sha256).hexdigest()
        credential = f"{peerauth.AUTH_SCHEME} t={stamp},d={digest},s={signature}"
        answer = httpx.post(
            b.url + path,
            headers={
                "authorization": credential.encode("latin-1"),  # type: ignore[dict-item]
                "content-type": "application/json",
            },
            content=b'{"payload": "eA=="}',
        )
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"] == "AuthError"


def test_deeply_nested_json_is_a_400(broker: SqsBroker) -> None:
    nested = b"[" * DEEP + b"]" * DEEP
    # the SQS endpoint: a nested value where a queue name belongs, and one it would skip
    for body, error in (
        (b'{"QueueName": ' + nested + b"}", "InvalidParameterValue"),
        (b'{"Other": ' + nested + b', "QueueName": "q"}', "SerializationException"),
    ):
        answer = sqs_post(broker, "CreateQueue", body)
        assert answer.status_code == 400, answer.text
        assert answer.json()["__type"] == f"com.amazonaws.sqs#{error}"
    # the native API: a nested argument (JSON and msgpack), and a nested body
    for kind, body in (
        ("application/json", b'{"items": ' + nested + b"}"),
        ("application/json", nested),
        ("application/msgpack", b"\x81\xa5items" + b"\x91" * DEEP + b"\x90"),
    ):
        answer = httpx.post(
            broker.url + "/v1/queues/q/enqueue-batch", headers={"content-type": kind}, content=body
        )
        assert answer.status_code == 400, answer.text[:300]
        assert answer.json()["error"] == "InvalidArgument"
    assert broker.client().list_queues().get("QueueUrls", []) == []


def test_a_redrive_target_must_be_a_queue_name(broker: SqsBroker) -> None:
    sqs = broker.client()
    url = sqs.create_queue(QueueName="source")["QueueUrl"]
    for target in ("../../etc/passwd", "a/b", "", "x" * 81, "..", "q\u00e9"):
        policy = msgspec.json.encode(
            {
                "deadLetterTargetArn": f"arn:aws:sqs:us-east-1:000000000000:{target}",
                "maxReceiveCount": 3,
            }
        ).decode()
        attributes = {"RedrivePolicy": policy}
        for action, kwargs in (
            (sqs.set_queue_attributes, {"QueueUrl": url}),
            (sqs.create_queue, {"QueueName": "other"}),
        ):
            with pytest.raises(ClientError) as refused:
                action(Attributes=attributes, **kwargs)
            error = refused.value.response
            assert error["ResponseMetadata"]["HTTPStatusCode"] == 400, target
            assert error["Error"]["Code"] == "InvalidParameterValue"
    assert sqs.list_queues()["QueueUrls"] == [url]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert "RedrivePolicy" not in attributes


def test_errors_name_the_queue_not_the_store(broker: SqsBroker, tmp_path: Path) -> None:
    with connect(broker.url) as client:
        q = client.queue("named")
        q.enqueue(b"x")
        with pytest.raises(s3q.MessageNotFound) as missing:
            q.status("nope")
    assert "named" in str(missing.value)
    assert str(tmp_path) not in str(missing.value) and "file:" not in str(missing.value)


def test_a_store_failure_is_answered_without_the_stores_text(moto_server: MotoServer) -> None:
    store = "s3://no-such-bucket-s3q/secret-prefix"
    options: dict[str, Any] = moto_server.store_options()
    with SqsBroker(store, sqs_keys={KEY_ID: SECRET}, **options) as b:
        with connect(b.url) as client, pytest.raises(s3q.StoreError) as native:
            client.queue("q").enqueue(b"x")
        with pytest.raises(ClientError) as sqs:
            b.client().create_queue(QueueName="q")
    for text in (str(native.value), sqs.value.response["Error"]["Message"]):
        assert "store" in text
        for secret in ("no-such-bucket", "secret-prefix", "127.0.0.1", str(moto_server.port)):
            assert secret not in text, text


def test_a_500_says_nothing_internal(broker: SqsBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("/srv/secret/path: internal detail")

    with connect(broker.url) as client:
        client.queue("q").enqueue(b"x")
        monkeypatch.setattr(s3q.AsyncQueue, "stats", broken)
        native = httpx.get(broker.url + "/v1/queues/q/stats")
    sqs = broker.client()
    url = sqs.create_queue(QueueName="sqsq")["QueueUrl"]
    with pytest.raises(ClientError) as refused:
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
    assert native.status_code == 500
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    for text in (native.text, refused.value.response["Error"]["Message"]):
        assert "secret" not in text and "RuntimeError" not in text, text
        assert "log" in text
