"""The AWS CLI (``python -m awscli sqs ...``) against the broker's SQS endpoint, signing with
a configured access key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqs_broker import KEY_ID, SECRET, SqsBroker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[SqsBroker]:
    with SqsBroker(f"file://{tmp_path}/store", sqs_keys={KEY_ID: SECRET}) as b:
        yield b


def aws(broker: SqsBroker, *args: str, secret: str = SECRET) -> Any:
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_MAX_ATTEMPTS": "1",
    }
    env.pop("AWS_PROFILE", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "awscli",
            "sqs",
            *args,
            "--endpoint-url",
            broker.url,
            "--output",
            "json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    return json.loads(done.stdout) if done.stdout.strip() else None


def test_aws_cli_round_trip(broker: SqsBroker) -> None:
    url = aws(broker, "create-queue", "--queue-name", "cli-jobs")["QueueUrl"]
    assert url == f"{broker.url}/000000000000/cli-jobs"
    assert aws(broker, "list-queues")["QueueUrls"] == [url]
    sent = aws(
        broker,
        "send-message",
        "--queue-url",
        url,
        "--message-body",
        "from the cli",
        "--message-attributes",
        '{"kind": {"DataType": "String", "StringValue": "test"}}',
    )
    assert len(sent["MD5OfMessageBody"]) == 32 and "MD5OfMessageAttributes" in sent
    attrs = aws(broker, "get-queue-attributes", "--queue-url", url, "--attribute-names", "All")
    assert attrs["Attributes"]["ApproximateNumberOfMessages"] == "1"
    got = aws(
        broker,
        "receive-message",
        "--queue-url",
        url,
        "--message-attribute-names",
        "All",
        "--attribute-names",
        "ApproximateReceiveCount",
    )
    [msg] = got["Messages"]
    assert msg["Body"] == "from the cli"
    assert msg["MessageAttributes"]["kind"]["StringValue"] == "test"
    assert msg["Attributes"]["ApproximateReceiveCount"] == "1"
    aws(broker, "delete-message", "--queue-url", url, "--receipt-handle", msg["ReceiptHandle"])
    attrs = aws(
        broker,
        "get-queue-attributes",
        "--queue-url",
        url,
        "--attribute-names",
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
    )
    assert attrs["Attributes"] == {
        "ApproximateNumberOfMessages": "0",
        "ApproximateNumberOfMessagesNotVisible": "0",
    }


def test_aws_cli_with_a_wrong_secret_is_refused(broker: SqsBroker) -> None:
    with pytest.raises(RuntimeError, match="SignatureDoesNotMatch"):
        aws(broker, "create-queue", "--queue-name", "nope", secret="wrong")
    assert "QueueUrls" not in (aws(broker, "list-queues") or {})
