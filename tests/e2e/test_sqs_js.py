"""The AWS SDK for JavaScript v3 (``@aws-sdk/client-sqs`` from npm, unmodified) against the SQS
endpoint: Node runs tests/support/js/sqs_client.mjs, whose every call the SDK checks as it would
against AWS (the MD5 digests of bodies and attributes, error shapes), and boto3 checks what it
left."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import JS_DIR
from sqs_broker import KEY_ID, SECRET, SqsBroker

JS = JS_DIR


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[SqsBroker]:
    with SqsBroker(f"file://{tmp_path}/store", sqs_keys={KEY_ID: SECRET}) as b:
        yield b


def test_the_javascript_sdk_v3_works_unmodified(node: str, broker: SqsBroker) -> None:
    run = subprocess.run(
        [node, str(JS / "sqs_client.mjs"), broker.url, KEY_ID, SECRET],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    seen: dict[str, Any] = json.loads(run.stdout)
    assert seen["bodies"] == sorted(["one ✓", *(f"batch {i}" for i in range(9))])
    assert seen["attributes"] == {"text": "héllo", "count": "42", "blob": [0, 1, 2, 255]}
    assert seen["receiveCount"] == "1" and seen["sentTimestamp"] > 0
    assert seen["missingQueue"] == "QueueDoesNotExist"
    assert seen["afterDelete"] == "QueueDoesNotExist"
    assert seen["fifoWithoutGroup"] == "MissingParameter"
    assert seen["badSignature"] == "SignatureDoesNotMatch"
    assert seen["fifo"] == [["first", "g", True], ["second", "g", True]]  # the dup dropped
    assert seen["tags"] == {"team": "js"}
    assert seen["queueAttributes"]["DelaySeconds"] == "5"
    assert seen["queues"] == ["js-orders.fifo", "js-standard"]
    # what the JavaScript client left, as boto3 sees it: one empty queue
    sqs = broker.client()
    assert [u.rsplit("/", 1)[1] for u in sqs.list_queues()["QueueUrls"]] == ["js-standard"]
    url = sqs.get_queue_url(QueueName="js-standard")["QueueUrl"]
    counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert counts["ApproximateNumberOfMessages"] == "0"
    assert counts["ApproximateNumberOfMessagesNotVisible"] == "0"
