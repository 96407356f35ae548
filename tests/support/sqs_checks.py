"""Checks of the SQS endpoint's answers shared by the SQS tests: MD5 digests as moto (and the AWS
SDKs) compute them, error codes, queue depths, message-move tasks, and SigV4-signed requests."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any

import botocore.auth
import pytest
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from moto.sqs.models import Message as MotoMessage
from sqs_broker import KEY_ID, SECRET


def reference_md5(attributes: dict[str, Any]) -> str:
    """MD5OfMessageAttributes as moto (and the AWS SDKs) compute it."""
    message = MotoMessage("id", "body")
    message.message_attributes = attributes
    return str(message.attribute_md5)


def check_digests(parsed: dict[str, Any], **_: Any) -> None:
    for m in parsed.get("Messages", []):
        assert m["MD5OfBody"] == hashlib.md5(m["Body"].encode()).hexdigest()
        if "MessageAttributes" in m:
            assert m["MD5OfMessageAttributes"] == reference_md5(m["MessageAttributes"])
        else:
            assert "MD5OfMessageAttributes" not in m


def error_code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


def refused(call: Callable[..., Any], **arguments: Any) -> tuple[int, str, str]:
    """The HTTP status, error code and message with which ``call(**arguments)`` is refused."""
    with pytest.raises(ClientError) as exc:
        call(**arguments)
    answer = exc.value.response
    return (
        answer["ResponseMetadata"]["HTTPStatusCode"],
        answer["Error"]["Code"],
        answer["Error"]["Message"],
    )


def depth(sqs: Any, url: str) -> dict[str, int]:
    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ]
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    return {k.removeprefix("ApproximateNumberOf"): int(v) for k, v in got.items()}


ATTRIBUTES = {
    "text": {"DataType": "String", "StringValue": "héllo wörld"},
    "count": {"DataType": "Number", "StringValue": "-12.50"},
    "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xff\x10raw"},
    "custom": {"DataType": "String.json", "StringValue": '{"a": 1}'},
    "img": {"DataType": "Binary.gif", "BinaryValue": b"GIF89a"},
    "ratio": {"DataType": "Number.float", "StringValue": "3.14"},
    "app.user": {"DataType": "String", "StringValue": "ann"},
    "app.role": {"DataType": "String", "StringValue": "admin"},
}


def move_task(sqs: Any, arn: str) -> dict[str, Any]:
    """The newest message-move task of the queue ``arn``, once it is no longer running."""
    deadline = time.monotonic() + 60
    while True:
        [task] = sqs.list_message_move_tasks(SourceArn=arn)["Results"]
        if task["Status"] not in ("RUNNING", "CANCELLING"):
            return dict(task)
        assert time.monotonic() < deadline, task
        time.sleep(0.05)  # the task runs in the broker: nothing to await from here


def signed_request(
    body: bytes, url: str, secret: str = SECRET, action: str = "SendMessage"
) -> AWSRequest:
    request = AWSRequest(
        method="POST",
        url=url,
        data=body,
        headers={
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": f"AmazonSQS.{action}",
            "X-Custom": "spaced   value",
        },
    )
    botocore.auth.SigV4Auth(Credentials(KEY_ID, secret), "sqs", "eu-west-1").add_auth(request)
    return request
