"""The SQS endpoint of a broker that does not lead the queue: calls go through its forwarding
proxy (configure and discard included) to the broker that does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from cluster_node import Node


def sqs_client(node: Node) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=node.url,
        region_name="us-east-1",
        aws_access_key_id="k",
        aws_secret_access_key="s",
        config=Config(retries={"max_attempts": 1}),
    )


def test_sqs_through_a_broker_that_forwards(tmp_path: Path) -> None:
    store = f"file://{tmp_path}/store"
    a, b = Node(store, {}), Node(store, {})
    try:
        on_a, on_b = sqs_client(a), sqs_client(b)
        on_a.create_queue(QueueName="dlq")
        url_a = on_a.create_queue(QueueName="jobs")["QueueUrl"]
        assert a.led() == ["dlq", "jobs"]
        url_b = on_b.get_queue_url(QueueName="jobs")["QueueUrl"]
        assert url_b.startswith(b.url) and url_a.startswith(a.url)
        policy = (
            '{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":1}'
        )
        on_b.set_queue_attributes(
            QueueUrl=url_b, Attributes={"VisibilityTimeout": "50", "RedrivePolicy": policy}
        )
        shown = on_a.get_queue_attributes(
            QueueUrl=url_a, AttributeNames=["VisibilityTimeout", "RedrivePolicy"]
        )["Attributes"]
        assert shown == {"VisibilityTimeout": "50", "RedrivePolicy": policy}
        on_b.send_message(QueueUrl=url_b, MessageBody="via b")
        [msg] = on_b.receive_message(QueueUrl=url_b)["Messages"]
        assert msg["Body"] == "via b"
        on_b.change_message_visibility(
            QueueUrl=url_b, ReceiptHandle=msg["ReceiptHandle"], VisibilityTimeout=0
        )
        # one receive allowed: the next one buries it, and the dead letter moves to the dlq
        assert "Messages" not in on_b.receive_message(QueueUrl=url_b)
        dlq_b = on_b.get_queue_url(QueueName="dlq")["QueueUrl"]
        [dead] = on_b.receive_message(QueueUrl=dlq_b)["Messages"]
        assert dead["Body"] == "via b"
        on_b.delete_message(QueueUrl=dlq_b, ReceiptHandle=dead["ReceiptHandle"])
        with pytest.raises(ClientError) as exc:
            on_b.delete_queue(QueueUrl=url_b)
        assert exc.value.response["Error"]["Code"] == "AWS.SimpleQueueService.UnsupportedOperation"
        assert b.led() == []
    finally:
        a.stop()
        b.stop()
