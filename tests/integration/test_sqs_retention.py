"""MessageRetentionPeriod through the SQS endpoint, with the unmodified boto3 client: it is the
queue's native ``retention``, enforced; a queue that never set it keeps its messages."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeClock
from sqs_broker import SqsBroker
from sqs_checks import check_digests, depth, error_code

import s3q
from s3q.client import Client


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(time.time())  # the queues' clock; requests are signed by the real one


@pytest.fixture
def broker(tmp_path: Path, clock: FakeClock) -> Iterator[SqsBroker]:
    with SqsBroker(f"file://{tmp_path}/store", clock=clock, lease_ttl=1e6) as b:
        yield b


@pytest.fixture
def sqs(broker: SqsBroker) -> Any:
    client = broker.client()
    client.meta.events.register("after-call.sqs.ReceiveMessage", check_digests)
    return client


def _retention(sqs: Any, url: str) -> str:
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["MessageRetentionPeriod"])
    return str(attributes["Attributes"]["MessageRetentionPeriod"])


def test_message_retention_period_removes_old_messages_whatever_their_state(
    sqs: Any, broker: SqsBroker, clock: FakeClock
) -> None:
    url = sqs.create_queue(QueueName="jobs", Attributes={"MessageRetentionPeriod": "60"})[
        "QueueUrl"
    ]
    assert _retention(sqs, url) == "60"
    for body in ("a", "b", "c"):
        sqs.send_message(QueueUrl=url, MessageBody=body)
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=900)
    [held] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=600)["Messages"]
    assert depth(sqs, url) == {"Messages": 2, "MessagesNotVisible": 1, "MessagesDelayed": 1}
    clock.advance(61.0)
    sqs.send_message(QueueUrl=url, MessageBody="young")
    assert depth(sqs, url) == {"Messages": 1, "MessagesNotVisible": 0, "MessagesDelayed": 0}
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in got] == ["young"]
    # the held message is gone: deleting it is the no-op a standard queue answers
    sqs.delete_message(QueueUrl=url, ReceiptHandle=held["ReceiptHandle"])
    with pytest.raises(sqs.exceptions.ClientError) as exc:
        sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=held["ReceiptHandle"], VisibilityTimeout=30
        )
    assert error_code(exc) == "AWS.SimpleQueueService.MessageNotInflight"
    with Client(broker.url) as client:
        native = client.queue("jobs")
        assert native.configure()["retention"] == 60.0
        assert native.stats().retired == 4
        with pytest.raises(s3q.MessageNotFound):
            native.status(held["MessageId"])


def test_the_period_is_the_native_setting_and_create_queue_leaves_it_be(
    sqs: Any, broker: SqsBroker
) -> None:
    plain = sqs.create_queue(QueueName="plain")["QueueUrl"]
    assert _retention(sqs, plain) == "345600"  # SQS's default, shown; nothing is removed
    url = sqs.create_queue(QueueName="q", Attributes={"MessageRetentionPeriod": "86400"})[
        "QueueUrl"
    ]
    with Client(broker.url) as client:
        assert client.queue("plain").configure()["retention"] is None
        assert client.queue("q").configure()["retention"] == 86400.0
        assert "sqs.MessageRetentionPeriod" not in client.queue("q").configure()["attributes"]
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"MessageRetentionPeriod": "1209600"})
        assert client.queue("q").configure()["retention"] == 1209600.0
        assert _retention(sqs, url) == "1209600"
        # CreateQueue of the queue: the same period, or none, adopts it as it is
        again = {"MessageRetentionPeriod": "1209600"}
        assert sqs.create_queue(QueueName="q", Attributes=again)["QueueUrl"] == url
        assert sqs.create_queue(QueueName="q")["QueueUrl"] == url
        with pytest.raises(sqs.exceptions.QueueNameExists):
            sqs.create_queue(QueueName="q", Attributes={"MessageRetentionPeriod": "60"})
        assert client.queue("q").configure()["retention"] == 1209600.0
        # a native queue's retention is what GetQueueAttributes shows, rounded to seconds
        client.queue("native").configure(retention=90.4)
        native = sqs.create_queue(QueueName="native")["QueueUrl"]
        assert _retention(sqs, native) == "90"
        assert client.queue("native").configure()["retention"] == 90.4
    for bad in ("59", "1209601", "sixty"):
        with pytest.raises(sqs.exceptions.ClientError) as exc:
            sqs.set_queue_attributes(QueueUrl=url, Attributes={"MessageRetentionPeriod": bad})
        assert error_code(exc) == "InvalidAttributeValue"
    assert _retention(sqs, url) == "1209600"


def test_a_period_an_earlier_build_kept_is_shown_until_set_again(
    sqs: Any, broker: SqsBroker
) -> None:
    """Builds before retention kept MessageRetentionPeriod in the queue's saved attributes and
    enforced nothing: such a queue shows its value and still keeps its messages, until the
    period is set again, which enforces it."""
    with Client(broker.url) as client:
        queue = client.queue("old")
        queue.configure(attributes={"sqs.MessageRetentionPeriod": "3600"})
        url = sqs.create_queue(QueueName="old")["QueueUrl"]
        assert _retention(sqs, url) == "3600"
        assert queue.configure()["retention"] is None
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"MessageRetentionPeriod": "7200"})
        assert queue.configure()["retention"] == 7200.0
        assert "sqs.MessageRetentionPeriod" not in queue.configure()["attributes"]
        assert _retention(sqs, url) == "7200"
