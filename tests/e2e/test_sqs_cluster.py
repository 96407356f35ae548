"""The SQS endpoint of a broker that does not lead the queue: calls go through its forwarding
proxy (configure and discard included) to the broker that does."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from cluster_node import Node
from conftest import MotoServer

from s3q.faults.proxy import FaultProxy
from s3q.faults.schedule import NONE


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


def test_forwarded_sqs_calls_move_a_queue_only_when_its_leader_loses_its_lease(
    moto_server: MotoServer, s3_bucket: str, tmp_path: Path
) -> None:
    """What moved sqs.fifo from broker to broker in issue 36's soak, where each SQS client
    calls one broker: calls a broker forwards, long polls longer than a third of the lease
    among them (the forwarding broker then watches the leader's lease), never take a queue
    from a leader that keeps its lease; a leader whose store is cut off for longer than the
    lease loses the queue to the forwarding broker, which serves it within the lease + 2 s."""
    ttl = 2.0
    store = f"s3://{s3_bucket}/{tmp_path.name}"
    options = {**moto_server.store_options(), "lease_ttl": ttl}
    with FaultProxy(moto_server.endpoint, NONE) as proxy:
        a = Node(store, {**options, "endpoint_url": proxy.endpoint})  # its store can be cut
        b = Node(store, options)
        try:
            on_a, on_b = sqs_client(a), sqs_client(b)
            on_a.create_queue(QueueName="work.fifo", Attributes={"FifoQueue": "true"})
            url = on_b.get_queue_url(QueueName="work.fifo")["QueueUrl"]
            assert a.led() == ["work.fifo"]
            sent = 0
            until = time.monotonic() + 4 * ttl
            while time.monotonic() < until:  # through b, as an SQS client of the soak does
                sent += 1
                on_b.send_message(
                    QueueUrl=url,
                    MessageBody=f"m{sent}",
                    MessageGroupId="g",
                    MessageDeduplicationId=f"m{sent}",
                )
                [got] = on_b.receive_message(QueueUrl=url)["Messages"]
                assert got["Body"] == f"m{sent}"
                on_b.delete_message(QueueUrl=url, ReceiptHandle=got["ReceiptHandle"])
                assert "Messages" not in on_b.receive_message(QueueUrl=url, WaitTimeSeconds=1)
            assert sent >= 3
            assert a.led() == ["work.fifo"] and b.led() == []  # the lease ran: no takeover

            proxy.schedule.partitions.cut(3 * ttl)  # the leader cannot renew its lease
            cut = time.monotonic()
            errors = []
            while True:
                try:
                    on_b.send_message(
                        QueueUrl=url,
                        MessageBody="late",
                        MessageGroupId="g",
                        MessageDeduplicationId="late",
                    )  # the same dedup id each time: sent once, whatever the answers
                    break
                except ClientError as exc:  # the call in flight when b took over
                    errors.append(exc.response["Error"]["Code"])
                assert time.monotonic() - cut < 3 * ttl, errors
            served = time.monotonic() - cut
            assert served <= ttl + 2, (served, errors)
            assert b.led() == ["work.fifo"]
            [got] = on_b.receive_message(QueueUrl=url)["Messages"]
            assert got["Body"] == "late"
            on_b.delete_message(QueueUrl=url, ReceiptHandle=got["ReceiptHandle"])
        finally:
            a.stop()
            b.stop()
