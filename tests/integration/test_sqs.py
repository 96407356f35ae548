"""The SQS endpoint through the unmodified boto3 client, against a real broker on 127.0.0.1.

Every ReceiveMessage answer is checked by an independent MD5 implementation (moto's, which
mirrors the AWS SDKs' check), registered on the client: boto3 itself does not verify them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from botocore.exceptions import ClientError
from conftest import Parked
from sqs_broker import SqsBroker
from sqs_checks import (
    ATTRIBUTES,
    check_digests,
    depth,
    error_code,
    move_task,
    reference_md5,
    refused,
)

from s3q import MessageStatus
from s3q.client import Client


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"file://{tmp_path}/store"


@pytest.fixture
def broker(store: str) -> Iterator[SqsBroker]:
    with SqsBroker(store) as b:
        yield b


@pytest.fixture
def sqs(broker: SqsBroker) -> Any:
    client = broker.client()
    client.meta.events.register("after-call.sqs.ReceiveMessage", check_digests)
    return client


def test_queue_lifecycle(sqs: Any, broker: SqsBroker, tmp_path: Path) -> None:
    urls = [sqs.create_queue(QueueName=n)["QueueUrl"] for n in ("alpha", "beta", "bravo")]
    assert urls[0] == f"{broker.url}/000000000000/alpha"
    assert sqs.get_queue_url(QueueName="beta")["QueueUrl"] == urls[1]
    assert sqs.list_queues()["QueueUrls"] == urls
    assert sqs.list_queues(QueueNamePrefix="b")["QueueUrls"] == urls[1:]
    first = sqs.list_queues(MaxResults=2)
    assert first["QueueUrls"] == urls[:2]
    second = sqs.list_queues(MaxResults=2, NextToken=first["NextToken"])
    assert second["QueueUrls"] == urls[2:] and "NextToken" not in second
    sqs.send_message(QueueUrl=urls[1], MessageBody="x")
    assert (tmp_path / "store" / "beta").exists()
    sqs.delete_queue(QueueUrl=urls[1])
    with pytest.raises(sqs.exceptions.QueueDoesNotExist) as exc:
        sqs.get_queue_url(QueueName="beta")
    assert error_code(exc) == "AWS.SimpleQueueService.NonExistentQueue"
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.send_message(QueueUrl=urls[1], MessageBody="x")
    assert not [p for p in (tmp_path / "store" / "beta").rglob("*") if p.is_file()]
    assert sqs.list_queues()["QueueUrls"] == [urls[0], urls[2]]
    # created again, it is a new, empty queue
    url = sqs.create_queue(QueueName="beta")["QueueUrl"]
    assert depth(sqs, url)["Messages"] == 0


def test_create_queue_again(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "40"})["QueueUrl"]
    assert sqs.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "40"})["QueueUrl"] == (
        url
    )
    assert sqs.create_queue(QueueName="q")["QueueUrl"] == url
    assert sqs.create_queue(QueueName="q", Attributes={"FifoQueue": "false"})["QueueUrl"] == url
    with pytest.raises(sqs.exceptions.QueueNameExists) as exc:
        sqs.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "41"})
    assert error_code(exc) == "QueueAlreadyExists"


def test_create_queue_of_a_native_queue_changes_nothing(sqs: Any, broker: SqsBroker) -> None:
    """A queue made with the native API: CreateQueue with no (or its own) attributes adopts it
    as it is; with others it is QueueAlreadyExists, as SQS answers for an existing name."""
    with Client(broker.url) as client:
        native = client.queue("native")
        native.configure(max_attempts=2, visibility_timeout=45.0)
        mid = native.enqueue(b"poison")
        before = native.configure()
        with pytest.raises(sqs.exceptions.QueueNameExists):
            sqs.create_queue(QueueName="native", Attributes={"VisibilityTimeout": "30"})
        assert "QueueUrls" not in sqs.list_queues()  # refused: not adopted either
        url = sqs.create_queue(QueueName="native")["QueueUrl"]
        assert (
            sqs.create_queue(QueueName="native", Attributes={"VisibilityTimeout": "45"})["QueueUrl"]
            == url
        )
        after = native.configure()
        assert {k: v for k, v in after.items() if k != "attributes"} == {
            k: v for k, v in before.items() if k != "attributes"
        }
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        assert attributes["VisibilityTimeout"] == "45"
        # the poison message still dies after its two attempts (leases of a moment: they lapse)
        for attempt in ("1", "2"):
            [msg] = sqs.receive_message(
                QueueUrl=url, VisibilityTimeout=0, AttributeNames=["ApproximateReceiveCount"]
            )["Messages"]
            assert msg["Attributes"]["ApproximateReceiveCount"] == attempt
        assert "Messages" not in sqs.receive_message(QueueUrl=url)
        assert native.status(mid) is MessageStatus.DEAD


def test_create_queue_checks_names_and_attributes(sqs: Any) -> None:
    for name in ("bad name", "x" * 81, "a.b", ""):
        with pytest.raises(ClientError) as exc:
            sqs.create_queue(QueueName=name)
        assert error_code(exc) in ("InvalidParameterValue", "MissingParameter")
    with pytest.raises(sqs.exceptions.InvalidAttributeName):
        sqs.create_queue(QueueName="q", Attributes={"Colour": "blue"})
    with pytest.raises(sqs.exceptions.InvalidAttributeValue):
        sqs.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "43201"})
    with pytest.raises(ClientError) as exc:
        sqs.create_queue(QueueName="q.fifo")  # FifoQueue=true is required
    assert error_code(exc) == "InvalidParameterValue"
    with pytest.raises(ClientError):
        sqs.create_queue(QueueName="q", Attributes={"FifoQueue": "true"})
    with pytest.raises(ClientError) as exc:
        policy = '{"deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:none", '
        sqs.create_queue(
            QueueName="q", Attributes={"RedrivePolicy": policy + '"maxReceiveCount": 3}'}
        )
    assert error_code(exc) == "InvalidParameterValue"
    assert "QueueUrls" not in sqs.list_queues()


def test_send_receive_delete_round_trips_typed_attributes(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    body = "hello \u00e9\U0001f600 world"
    sent = sqs.send_message(
        QueueUrl=url,
        MessageBody=body,
        MessageAttributes=ATTRIBUTES,
        MessageSystemAttributes={
            "AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-abc"}
        },
    )
    assert sent["MD5OfMessageBody"] == hashlib.md5(body.encode()).hexdigest()
    assert sent["MD5OfMessageAttributes"] == reference_md5(ATTRIBUTES)
    assert sent["MD5OfMessageSystemAttributes"] == reference_md5(
        {"AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-abc"}}
    )
    before = time.time()
    [msg] = sqs.receive_message(
        QueueUrl=url,
        MessageAttributeNames=["All"],
        MessageSystemAttributeNames=["All"],
        VisibilityTimeout=1,
    )["Messages"]
    assert msg["MessageId"] == sent["MessageId"] and msg["Body"] == body
    assert msg["MessageAttributes"] == ATTRIBUTES
    attrs = msg["Attributes"]
    assert attrs["ApproximateReceiveCount"] == "1"
    assert attrs["AWSTraceHeader"] == "Root=1-abc"
    assert before - 5 <= int(attrs["SentTimestamp"]) / 1000 <= time.time()
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=msg["ReceiptHandle"], VisibilityTimeout=0
    )
    # names, prefixes; no attribute asked for: none given, and no digest of them
    [again] = sqs.receive_message(
        QueueUrl=url,
        MessageAttributeNames=["text", "app.*"],
        AttributeNames=["ApproximateReceiveCount"],
    )["Messages"]
    assert set(again["MessageAttributes"]) == {"text", "app.user", "app.role"}
    assert again["Attributes"] == {"ApproximateReceiveCount": "2"}
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=again["ReceiptHandle"], VisibilityTimeout=0
    )
    [bare] = sqs.receive_message(QueueUrl=url)["Messages"]
    assert "MessageAttributes" not in bare and "Attributes" not in bare
    # the handle of an earlier receive: 200, as SQS, but the message is bare's holder's now
    sqs.delete_message(QueueUrl=url, ReceiptHandle=msg["ReceiptHandle"])
    assert depth(sqs, url)["MessagesNotVisible"] == 1
    sqs.delete_message(QueueUrl=url, ReceiptHandle=bare["ReceiptHandle"])
    sqs.delete_message(QueueUrl=url, ReceiptHandle=bare["ReceiptHandle"])  # a retry: fine
    assert depth(sqs, url) == {"Messages": 0, "MessagesNotVisible": 0, "MessagesDelayed": 0}


def test_bad_messages_are_refused(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q", Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"MessageBody": "x" * 1025}, "InvalidParameterValue"),
        ({"MessageBody": "bad \x01 char"}, "InvalidMessageContents"),
        ({"MessageBody": "x", "DelaySeconds": 901}, "InvalidParameterValue"),
        ({"MessageBody": "x", "MessageDeduplicationId": "d"}, "InvalidParameterValue"),
        (
            {
                "MessageBody": "x",
                "MessageAttributes": {"n": {"DataType": "Number", "StringValue": "abc"}},
            },
            "InvalidParameterValue",
        ),
        (
            {
                "MessageBody": "x",
                "MessageAttributes": {"AWS.x": {"DataType": "String", "StringValue": "v"}},
            },
            "InvalidParameterValue",
        ),
        (
            {
                "MessageBody": "x",
                "MessageAttributes": {"s": {"DataType": "String", "StringValue": ""}},
            },
            "InvalidParameterValue",
        ),
        (
            {
                "MessageBody": "x",
                "MessageAttributes": {
                    f"a{i}": {"DataType": "String", "StringValue": "v"} for i in range(11)
                },
            },
            "InvalidParameterValue",
        ),
    ]
    for args, code in cases:
        with pytest.raises(ClientError) as exc:
            sqs.send_message(QueueUrl=url, **args)
        assert error_code(exc) == code, args
    assert depth(sqs, url)["Messages"] == 0


def test_batches(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    result = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "a", "MessageBody": "one"},
            {
                "Id": "b",
                "MessageBody": "two",
                "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}},
            },
            {"Id": "bad", "MessageBody": "x", "DelaySeconds": 5000},
        ],
    )
    assert [e["Id"] for e in result["Successful"]] == ["a", "b"]
    assert result["Successful"][1]["MD5OfMessageAttributes"] == reference_md5(
        {"k": {"DataType": "String", "StringValue": "v"}}
    )
    [failed] = result["Failed"]
    assert (failed["Id"], failed["Code"], failed["SenderFault"]) == (
        "bad",
        "InvalidParameterValue",
        True,
    )
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in got) == ["one", "two"]
    deleted = sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[
            *({"Id": f"m{i}", "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)),
            {"Id": "junk", "ReceiptHandle": "not-a-handle"},
        ],
    )
    assert sorted(e["Id"] for e in deleted["Successful"]) == ["m0", "m1"]
    assert [(e["Id"], e["Code"]) for e in deleted["Failed"]] == [("junk", "ReceiptHandleIsInvalid")]
    assert depth(sqs, url)["Messages"] == 0

    entry = {"Id": "x", "MessageBody": "b"}
    errors = [
        ([], "AWS.SimpleQueueService.EmptyBatchRequest", sqs.exceptions.EmptyBatchRequest),
        (
            [{"Id": f"i{i}", "MessageBody": "b"} for i in range(11)],
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
            sqs.exceptions.TooManyEntriesInBatchRequest,
        ),
        (
            [entry, entry],
            "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
            sqs.exceptions.BatchEntryIdsNotDistinct,
        ),
        (
            [{"Id": "no spaces", "MessageBody": "b"}],
            "AWS.SimpleQueueService.InvalidBatchEntryId",
            sqs.exceptions.InvalidBatchEntryId,
        ),
    ]
    for entries, code, cls in errors:
        with pytest.raises(cls) as exc:
            sqs.send_message_batch(QueueUrl=url, Entries=entries)
        assert error_code(exc) == code
    with pytest.raises(sqs.exceptions.EmptyBatchRequest):
        sqs.delete_message_batch(QueueUrl=url, Entries=[])
    assert depth(sqs, url)["Messages"] == 0


def test_priority_attribute(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]

    def send(body: str, priority: str | None) -> None:
        attrs = (
            {}
            if priority is None
            else {"s3q.priority": {"DataType": "Number", "StringValue": priority}}
        )
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attrs)

    send("low", None)
    send("high", "200")
    send("mid", "7")
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])
    assert [m["Body"] for m in got["Messages"]] == ["high", "mid", "low"]
    assert got["Messages"][0]["MessageAttributes"]["s3q.priority"]["StringValue"] == "200"
    for bad in ("256", "-1", "1.5"):
        with pytest.raises(ClientError) as exc:
            send("x", bad)
        assert error_code(exc) == "InvalidParameterValue"


def test_long_poll_waits_and_is_woken_by_a_send(
    sqs: Any, broker: SqsBroker, parked: Parked
) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    started = time.monotonic()
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)
    assert time.monotonic() - started >= 0.9  # held, not answered at once

    results: list[tuple[Any, float]] = []
    poller = threading.Thread(
        target=lambda: results.append(
            (broker.client().receive_message(QueueUrl=url, WaitTimeSeconds=20), time.monotonic())
        )
    )
    poller.start()
    parked.wait(1)  # the receive waits in the broker's writer before the send
    with parked.change() as sent:
        sqs.send_message(QueueUrl=url, MessageBody="wake up")
    poller.join(25)
    [(answer, returned)] = results
    assert [m["Body"] for m in answer["Messages"]] == ["wake up"]
    assert sent.woke(returned)


def test_queue_receive_wait_time_is_the_default_wait(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q", Attributes={"ReceiveMessageWaitTimeSeconds": "1"})[
        "QueueUrl"
    ]
    started = time.monotonic()
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    assert time.monotonic() - started >= 0.9
    started = time.monotonic()
    sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0)
    assert time.monotonic() - started < 0.9


def test_change_message_visibility(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m")
    [msg] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=60)["Messages"]
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    assert depth(sqs, url)["MessagesNotVisible"] == 1
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=msg["ReceiptHandle"], VisibilityTimeout=0
    )
    [again] = sqs.receive_message(QueueUrl=url, AttributeNames=["All"])["Messages"]
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
    # the handle of an earlier receive: 200, as SQS, leaving the current lease alone
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=msg["ReceiptHandle"], VisibilityTimeout=0
    )
    assert depth(sqs, url)["MessagesNotVisible"] == 1
    with pytest.raises(ClientError) as exc:
        sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=again["ReceiptHandle"], VisibilityTimeout=43201
        )
    assert error_code(exc) == "InvalidParameterValue"
    result = sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "stale", "ReceiptHandle": msg["ReceiptHandle"], "VisibilityTimeout": 0},
            {"Id": "junk", "ReceiptHandle": "???", "VisibilityTimeout": 0},
        ],
    )
    assert [e["Id"] for e in result["Successful"]] == ["stale"]  # and left the lease alone:
    assert depth(sqs, url)["MessagesNotVisible"] == 1
    assert {e["Id"]: e["Code"] for e in result["Failed"]} == {"junk": "ReceiptHandleIsInvalid"}
    result = sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[{"Id": "ok", "ReceiptHandle": again["ReceiptHandle"], "VisibilityTimeout": 0}],
    )
    assert [e["Id"] for e in result["Successful"]] == ["ok"]
    assert depth(sqs, url)["Messages"] == 1  # visible again at once


def wait_visible(sqs: Any, url: str, count: int) -> None:
    """Until ``count`` messages are visible (a lease under test ran out)."""
    deadline = time.monotonic() + 30
    while depth(sqs, url)["Messages"] < count:
        assert time.monotonic() < deadline, "the lease never ran out"
        time.sleep(0.05)  # the broker's clock must pass the lease: no event to await


def received_once_each(sqs: Any) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    """A standard and a FIFO queue, each with one message received with a 1 s visibility
    timeout: the queues' URLs and the two messages."""
    plain = sqs.create_queue(QueueName="plain")["QueueUrl"]
    fifo = sqs.create_queue(
        QueueName="ordered.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]
    sqs.send_message(QueueUrl=plain, MessageBody="p")
    sqs.send_message(QueueUrl=fifo, MessageBody="f", MessageGroupId="g")
    [p] = sqs.receive_message(QueueUrl=plain, VisibilityTimeout=1)["Messages"]
    [f] = sqs.receive_message(QueueUrl=fifo, VisibilityTimeout=1)["Messages"]
    return plain, fifo, p, f


def test_a_lapsed_lease_changes_as_sqs_does_on_each_queue_type(sqs: Any) -> None:
    """Standard: ChangeMessageVisibility after the timeout ran out, nobody having received the
    message since, hides it again. FIFO: MessageNotInflight."""
    plain, fifo, p, f = received_once_each(sqs)
    wait_visible(sqs, plain, 1)
    wait_visible(sqs, fifo, 1)
    sqs.change_message_visibility(
        QueueUrl=plain, ReceiptHandle=p["ReceiptHandle"], VisibilityTimeout=60
    )
    assert depth(sqs, plain) == {"Messages": 0, "MessagesNotVisible": 1, "MessagesDelayed": 0}
    assert "Messages" not in sqs.receive_message(QueueUrl=plain)
    sqs.delete_message(QueueUrl=plain, ReceiptHandle=p["ReceiptHandle"])  # still this lease's
    assert depth(sqs, plain)["MessagesNotVisible"] == 0
    with pytest.raises(ClientError) as refused:
        sqs.change_message_visibility(
            QueueUrl=fifo, ReceiptHandle=f["ReceiptHandle"], VisibilityTimeout=60
        )
    assert error_code(refused) == "AWS.SimpleQueueService.MessageNotInflight"
    assert depth(sqs, fifo)["Messages"] == 1


def test_a_lease_reaches_at_most_12_hours_past_its_receive(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m")
    [msg] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=30)["Messages"]
    handle = msg["ReceiptHandle"]
    with pytest.raises(ClientError) as refused:  # 43200 s from now is past 12 h from receive
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=43200)
    assert error_code(refused) == "InvalidParameterValue"
    assert "beyond the limit [43200 seconds]" in refused.value.response["Error"]["Message"]
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=43000)
    batch = sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "far", "ReceiptHandle": handle, "VisibilityTimeout": 43200},
            {"Id": "near", "ReceiptHandle": handle, "VisibilityTimeout": 0},
        ],
    )
    assert [e["Id"] for e in batch["Failed"]] == ["far"]
    assert [e["Id"] for e in batch["Successful"]] == ["near"]
    assert depth(sqs, url)["Messages"] == 1


def test_approximate_first_receive_timestamp(sqs: Any) -> None:
    """Asked for alone, it is there; a later receive keeps the first one's time."""
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m")
    before = time.time()
    [first] = sqs.receive_message(
        QueueUrl=url, VisibilityTimeout=0, AttributeNames=["ApproximateFirstReceiveTimestamp"]
    )["Messages"]
    stamp = int(first["Attributes"]["ApproximateFirstReceiveTimestamp"])
    assert before * 1000 - 5 <= stamp <= time.time() * 1000 + 5
    [second] = sqs.receive_message(
        QueueUrl=url,
        MessageSystemAttributeNames=["ApproximateFirstReceiveTimestamp", "ApproximateReceiveCount"],
    )["Messages"]
    assert second["Attributes"] == {
        "ApproximateFirstReceiveTimestamp": str(stamp),
        "ApproximateReceiveCount": "2",
    }


def test_receipt_handles_belong_to_their_queue(sqs: Any) -> None:
    a = sqs.create_queue(QueueName="a")["QueueUrl"]
    b = sqs.create_queue(QueueName="b")["QueueUrl"]
    sqs.send_message(QueueUrl=a, MessageBody="m")
    [msg] = sqs.receive_message(QueueUrl=a)["Messages"]
    for handle, url in ((msg["ReceiptHandle"], b), ("garbage", a), ("", a)):
        with pytest.raises(ClientError) as exc:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=handle)
        assert error_code(exc) == "ReceiptHandleIsInvalid"
    assert depth(sqs, a)["MessagesNotVisible"] == 1


def test_fifo_groups_and_deduplication(sqs: Any) -> None:
    with pytest.raises(ClientError):
        sqs.create_queue(QueueName="plain", Attributes={"ContentBasedDeduplication": "true"})
    url = sqs.create_queue(QueueName="jobs.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    assert url.endswith("/jobs.fifo")
    seqs = []
    for group, body in (("g1", "a"), ("g1", "b"), ("g2", "x"), ("g1", "c")):
        sent = sqs.send_message(
            QueueUrl=url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId=body
        )
        seqs.append(int(sent["SequenceNumber"]))
    assert seqs == sorted(seqs)
    dup = sqs.send_message(
        QueueUrl=url, MessageBody="a again", MessageGroupId="g1", MessageDeduplicationId="a"
    )
    first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"])
    got = [(m["Attributes"]["MessageGroupId"], m["Body"]) for m in first["Messages"]]
    assert got == [("g1", "a"), ("g1", "b"), ("g1", "c"), ("g2", "x")]  # each group in order
    head = first["Messages"][0]
    assert head["MessageId"] == dup["MessageId"]  # the duplicate was not enqueued
    assert head["Attributes"]["MessageDeduplicationId"] == "a"

    with pytest.raises(ClientError) as exc:
        sqs.send_message(QueueUrl=url, MessageBody="no group", MessageDeduplicationId="z")
    assert error_code(exc) == "MissingParameter"
    with pytest.raises(ClientError) as exc:
        sqs.send_message(QueueUrl=url, MessageBody="no dedup id", MessageGroupId="g")
    assert error_code(exc) == "InvalidParameterValue"
    with pytest.raises(ClientError) as exc:
        sqs.send_message(
            QueueUrl=url,
            MessageBody="x",
            MessageGroupId="g",
            MessageDeduplicationId="y",
            DelaySeconds=5,
        )
    assert error_code(exc) == "InvalidParameterValue"

    cbd = sqs.create_queue(
        QueueName="cbd.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]
    ids = {
        sqs.send_message(QueueUrl=cbd, MessageBody="same", MessageGroupId="g")["MessageId"]
        for _ in range(3)
    }
    assert len(ids) == 1
    assert depth(sqs, cbd)["Messages"] == 1


def test_redrive_to_dead_letter_queue(sqs: Any) -> None:
    dlq = sqs.create_queue(QueueName="dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    policy = f'{{"deadLetterTargetArn": "{dlq_arn}", "maxReceiveCount": "2"}}'
    src = sqs.create_queue(QueueName="src", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    other = sqs.create_queue(QueueName="other")["QueueUrl"]
    shown = sqs.get_queue_attributes(QueueUrl=src, AttributeNames=["RedrivePolicy"])
    assert shown["Attributes"]["RedrivePolicy"] == (
        f'{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":2}}'
    )
    attrs = {"k": {"DataType": "String", "StringValue": "v"}}
    sqs.send_message(QueueUrl=src, MessageBody="poison", MessageAttributes=attrs)
    for receive in (1, 2):
        [msg] = sqs.receive_message(QueueUrl=src, AttributeNames=["All"])["Messages"]
        assert msg["Attributes"]["ApproximateReceiveCount"] == str(receive)
        sqs.change_message_visibility(
            QueueUrl=src, ReceiptHandle=msg["ReceiptHandle"], VisibilityTimeout=0
        )
    assert "Messages" not in sqs.receive_message(QueueUrl=src)  # out of receives: moved
    assert depth(sqs, dlq)["Messages"] == 1
    [dead] = sqs.receive_message(
        QueueUrl=dlq, MessageAttributeNames=["All"], AttributeNames=["All"]
    )["Messages"]
    assert dead["Body"] == "poison" and dead["MessageAttributes"] == attrs
    assert dead["Attributes"]["DeadLetterQueueSourceArn"].endswith(":src")
    assert depth(sqs, src) == {"Messages": 0, "MessagesNotVisible": 0, "MessagesDelayed": 0}
    sources = sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"]
    assert sources == [src]
    assert "queueUrls" not in sqs.list_dead_letter_source_queues(QueueUrl=other)
    # without a RedrivePolicy, receives never kill a message
    sqs.set_queue_attributes(QueueUrl=src, Attributes={"RedrivePolicy": ""})
    assert "queueUrls" not in sqs.list_dead_letter_source_queues(QueueUrl=dlq)
    sqs.send_message(QueueUrl=src, MessageBody="survivor")
    for _ in range(4):
        [msg] = sqs.receive_message(QueueUrl=src)["Messages"]
        sqs.change_message_visibility(
            QueueUrl=src, ReceiptHandle=msg["ReceiptHandle"], VisibilityTimeout=0
        )
    assert depth(sqs, src)["Messages"] == 1


def dead_letters(sqs: Any, src: str, dlq: str, bodies: list[str]) -> None:
    """Send ``bodies`` to ``src`` (maxReceiveCount 1) and receive each once: dead letters in
    ``dlq``."""
    for start in range(0, len(bodies), 10):
        entries = [{"Id": f"e{i}", "MessageBody": b} for i, b in enumerate(bodies[start:][:10])]
        sqs.send_message_batch(QueueUrl=src, Entries=entries)
    received = 0
    while received < len(bodies):
        got = sqs.receive_message(QueueUrl=src, MaxNumberOfMessages=10, VisibilityTimeout=0)
        received += len(got.get("Messages", []))
    assert "Messages" not in sqs.receive_message(QueueUrl=src)  # out of receives: moved
    assert depth(sqs, dlq)["Messages"] == len(bodies)


def test_message_move_tasks_redrive_dead_letters(sqs: Any) -> None:
    arn = "arn:aws:sqs:us-east-1:000000000000:"
    dlq = sqs.create_queue(QueueName="dlq")["QueueUrl"]
    policy = f'{{"deadLetterTargetArn": "{arn}dlq", "maxReceiveCount": "1"}}'
    src = sqs.create_queue(QueueName="src", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    other = sqs.create_queue(QueueName="other")["QueueUrl"]
    bodies = [f"m{i}" for i in range(12)]
    dead_letters(sqs, src, dlq, bodies)

    # back to the queues they died in, all of them, each once
    handle = sqs.start_message_move_task(SourceArn=arn + "dlq")["TaskHandle"]
    task = move_task(sqs, arn + "dlq")
    assert task["Status"] == "COMPLETED" and "TaskHandle" not in task
    assert task["ApproximateNumberOfMessagesMoved"] == task["ApproximateNumberOfMessagesToMove"]
    assert task["ApproximateNumberOfMessagesMoved"] == 12 and task["SourceArn"] == arn + "dlq"
    assert depth(sqs, dlq)["Messages"] == 0
    back = []
    while len(back) < 12:
        got = sqs.receive_message(QueueUrl=src, MaxNumberOfMessages=10, AttributeNames=["All"])
        back += got["Messages"]
    assert sorted(m["Body"] for m in back) == sorted(bodies)
    assert not any("DeadLetterQueueSourceArn" in m["Attributes"] for m in back)
    with pytest.raises(ClientError) as exc:  # finished: no longer cancellable
        sqs.cancel_message_move_task(TaskHandle=handle)
    assert error_code(exc) == "InvalidParameterValue"

    # to a queue named, paced, and cancelled on the way
    for m in back:
        sqs.change_message_visibility(
            QueueUrl=src, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
        )
    assert "Messages" not in sqs.receive_message(QueueUrl=src)
    assert depth(sqs, dlq)["Messages"] == 12
    handle = sqs.start_message_move_task(
        SourceArn=arn + "dlq", DestinationArn=arn + "other", MaxNumberOfMessagesPerSecond=1
    )["TaskHandle"]
    [running] = sqs.list_message_move_tasks(SourceArn=arn + "dlq", MaxResults=1)["Results"]
    assert running["TaskHandle"] == handle and running["MaxNumberOfMessagesPerSecond"] == 1
    assert running["DestinationArn"] == arn + "other"
    with pytest.raises(ClientError) as exc:
        sqs.start_message_move_task(SourceArn=arn + "dlq")
    assert "already a task running" in exc.value.response["Error"]["Message"]
    moved = sqs.cancel_message_move_task(TaskHandle=handle)["ApproximateNumberOfMessagesMoved"]
    task = move_task(sqs, arn + "dlq")
    assert task["Status"] == "CANCELLED" and task["ApproximateNumberOfMessagesMoved"] == moved
    assert moved < 12
    assert depth(sqs, other)["Messages"] == moved
    assert depth(sqs, dlq)["Messages"] == 12 - moved
    listed = sqs.list_message_move_tasks(SourceArn=arn + "dlq", MaxResults=10)["Results"]
    assert [t["Status"] for t in listed] == ["CANCELLED", "COMPLETED"]


def test_message_move_task_errors(sqs: Any) -> None:
    arn = "arn:aws:sqs:us-east-1:000000000000:"
    sqs.create_queue(QueueName="plain")
    dlq = sqs.create_queue(QueueName="dlq")["QueueUrl"]
    policy = f'{{"deadLetterTargetArn": "{arn}dlq", "maxReceiveCount": "1"}}'
    sqs.create_queue(QueueName="src", Attributes={"RedrivePolicy": policy})
    cases = [
        (dict(SourceArn=arn + "plain"), "InvalidParameterValue", "configured as a Dead Letter"),
        (dict(SourceArn=arn + "missing"), "ResourceNotFoundException", "SourceArn parameter"),
        (
            dict(SourceArn=arn + "dlq", DestinationArn=arn + "missing"),
            "ResourceNotFoundException",
            "DestinationArn parameter",
        ),
        (
            dict(SourceArn=arn + "dlq", MaxNumberOfMessagesPerSecond=501),
            "InvalidParameterValue",
            "MaxNumberOfMessagesPerSecond",
        ),
    ]
    for arguments, code, text in cases:
        with pytest.raises(ClientError) as exc:
            sqs.start_message_move_task(**arguments)
        assert error_code(exc) == code and text in exc.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as exc:
        sqs.cancel_message_move_task(TaskHandle="foobared")
    assert error_code(exc) == "InvalidParameterValue"
    with pytest.raises(ClientError) as exc:
        sqs.list_message_move_tasks(SourceArn=arn + "missing")
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert sqs.list_message_move_tasks(SourceArn=arn + "dlq")["Results"] == []
    assert depth(sqs, dlq)["Messages"] == 0


def test_queue_attributes_counts_and_purge(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="now-1")
    sqs.send_message(QueueUrl=url, MessageBody="now-2")
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=600)
    sqs.receive_message(QueueUrl=url)
    assert depth(sqs, url) == {"Messages": 1, "MessagesNotVisible": 1, "MessagesDelayed": 1}
    everything = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert everything["QueueArn"] == "arn:aws:sqs:us-east-1:000000000000:q"
    assert abs(int(everything["CreatedTimestamp"]) - time.time()) < 60
    assert everything["VisibilityTimeout"] == "30"
    assert everything["MaximumMessageSize"] == "1048576"
    assert "FifoQueue" not in everything
    with pytest.raises(sqs.exceptions.InvalidAttributeName):
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Nope"])
    sqs.purge_queue(QueueUrl=url)
    assert depth(sqs, url) == {"Messages": 0, "MessagesNotVisible": 0, "MessagesDelayed": 0}


def test_queue_delay_seconds_is_the_default_delay(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q", Attributes={"DelaySeconds": "600"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="later")
    sqs.send_message(QueueUrl=url, MessageBody="now", DelaySeconds=0)
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in got] == ["now"]
    assert depth(sqs, url)["MessagesDelayed"] == 1


def test_set_queue_attributes_survive_a_restart(store: str) -> None:
    with SqsBroker(store) as broker:
        sqs = broker.client()
        sqs.create_queue(QueueName="dlq")
        url = sqs.create_queue(QueueName="q")["QueueUrl"]
        policy = (
            '{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":5}'
        )
        sqs.set_queue_attributes(
            QueueUrl=url,
            Attributes={
                "VisibilityTimeout": "45",
                "DelaySeconds": "3",
                "MessageRetentionPeriod": "86400",
                "RedrivePolicy": policy,
                "Policy": '{"Version": "2012-10-17"}',
            },
        )
        sqs.tag_queue(QueueUrl=url, Tags={"team": "data", "env": "test"})
        sqs.untag_queue(QueueUrl=url, TagKeys=["env"])
        with pytest.raises(sqs.exceptions.InvalidAttributeName):
            sqs.set_queue_attributes(QueueUrl=url, Attributes={"FifoQueue": "true"})
        before = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    with SqsBroker(store) as broker:
        sqs = broker.client()
        url = sqs.get_queue_url(QueueName="q")["QueueUrl"]
        after = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        assert after == before
        assert after["VisibilityTimeout"] == "45" and after["DelaySeconds"] == "3"
        assert after["MessageRetentionPeriod"] == "86400"
        assert after["RedrivePolicy"] == policy
        assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "data"}
        assert sqs.list_dead_letter_source_queues(
            QueueUrl=sqs.get_queue_url(QueueName="dlq")["QueueUrl"]
        )["queueUrls"] == [url]
        assert len(sqs.list_queues()["QueueUrls"]) == 2


def test_sqs_settings_are_the_native_queue_settings(store: str) -> None:
    """VisibilityTimeout and the receive count are the queue's own settings, so the native
    API and the SQS endpoint agree about them."""
    from s3q.client import connect

    with SqsBroker(store) as broker, connect(broker.url) as client:
        sqs = broker.client()
        url = sqs.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "77"})["QueueUrl"]
        settings = client.queue("q").configure()
        assert settings["visibility_timeout"] == 77.0
        assert settings["max_message_size"] == 1048576
        client.queue("q").enqueue(b"native", attributes={"origin": "native"})
        [msg] = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"])["Messages"]
        assert msg["Body"] == "native"
        assert msg["MessageAttributes"] == {
            "origin": {"DataType": "String", "StringValue": "native"}
        }


def test_protocol_errors(sqs: Any, broker: SqsBroker) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.send_message(QueueUrl=f"{broker.url}/000000000000/missing", MessageBody="x")
    with pytest.raises(ClientError) as exc:
        sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=11)
    assert error_code(exc) == "InvalidParameterValue"
    headers = {"content-type": "application/x-amz-json-1.0"}
    raw = httpx.post(broker.url + "/", headers={**headers, "x-amz-target": "AmazonSQS.Nope"})
    assert raw.status_code == 400
    assert raw.headers["x-amzn-query-error"] == "InvalidAction;Sender"
    raw = httpx.post(
        broker.url + "/",
        headers={**headers, "x-amz-target": "AmazonSQS.SendMessage"},
        content=b"{not json",
    )
    assert raw.status_code == 400 and raw.json()["__type"].endswith("#SerializationException")
    raw = httpx.post(
        broker.url + "/",
        headers={**headers, "x-amz-target": "AmazonSQS.SendMessage"},
        content=b'{"QueueUrl": "' + url.encode() + b'"}',
    )
    assert raw.status_code == 400
    assert raw.headers["x-amzn-query-error"] == "MissingParameter;Sender"
    assert depth(sqs, url)["Messages"] == 0


def test_metrics_count_sqs_requests(sqs: Any, broker: SqsBroker) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="x")
    with pytest.raises(ClientError):
        sqs.get_queue_url(QueueName="missing")
    text = httpx.get(broker.url + "/metrics").text
    assert 'operation="sqs.SendMessage",outcome="ok",queue="q"' in text
    assert 'operation="sqs.GetQueueUrl",outcome="QueueDoesNotExist"' in text


# --------------------------------------------------------------------------- as AWS answers
# Behaviours recorded against real SQS (LocalStack's AWS-validated snapshots).


def test_an_earlier_handle_deletes_as_sqs_does_on_each_queue_type(sqs: Any) -> None:
    """Standard: a delete after the visibility timeout deletes (nobody received it again).
    FIFO: the same delete is refused, the handle has expired."""
    plain, fifo, p, f = received_once_each(sqs)
    time.sleep(1.2)  # the visibility timeout under test runs out
    sqs.delete_message(QueueUrl=plain, ReceiptHandle=p["ReceiptHandle"])
    assert depth(sqs, plain) == {"Messages": 0, "MessagesNotVisible": 0, "MessagesDelayed": 0}
    with pytest.raises(ClientError) as refused:
        sqs.delete_message(QueueUrl=fifo, ReceiptHandle=f["ReceiptHandle"])
    assert error_code(refused) == "InvalidParameterValue"
    assert "The receipt handle has expired." in refused.value.response["Error"]["Message"]
    batch = sqs.delete_message_batch(
        QueueUrl=fifo, Entries=[{"Id": "late", "ReceiptHandle": f["ReceiptHandle"]}]
    )
    assert [e["Code"] for e in batch["Failed"]] == ["InvalidParameterValue"]
    [again] = sqs.receive_message(QueueUrl=fifo)["Messages"]
    assert again["Body"] == "f"
    sqs.delete_message(QueueUrl=fifo, ReceiptHandle=again["ReceiptHandle"])
    sqs.delete_message(QueueUrl=fifo, ReceiptHandle=again["ReceiptHandle"])  # a retry: fine
    assert depth(sqs, fifo)["Messages"] == 0


def test_a_fifo_receive_returns_several_messages_of_a_group_in_order(sqs: Any) -> None:
    url = sqs.create_queue(
        QueueName="orders.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]
    for i in range(6):
        sqs.send_message(QueueUrl=url, MessageBody=f"g{i}", MessageGroupId="g")
    sqs.send_message(QueueUrl=url, MessageBody="h0", MessageGroupId="h")
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=4)["Messages"]
    assert [m["Body"] for m in got] == ["g0", "g1", "g2", "g3"]
    rest = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in rest] == ["h0"], "group g waits while four of it are in flight"
    sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)],
    )
    tail = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in tail] == ["g4", "g5"]


def test_fifo_sends_as_sqs_does(sqs: Any) -> None:
    url = sqs.create_queue(
        QueueName="sends.fifo", Attributes={"FifoQueue": "true", "DelaySeconds": "0"}
    )["QueueUrl"]
    # DelaySeconds=0 is valid on a FIFO queue (a non-zero one is refused: see above)
    sqs.send_message(
        QueueUrl=url,
        MessageBody="zero",
        MessageGroupId="g",
        MessageDeduplicationId="d0",
        DelaySeconds=0,
    )
    # a batch entry without its group or its dedup id fails the whole request: nothing is sent;
    # InvalidParameterValue as AWS answers it (docs/sqs.md, Errors, names the recordings)
    good = {"Id": "a", "MessageBody": "a", "MessageGroupId": "g", "MessageDeduplicationId": "a"}
    for bad, text in (
        (
            {"Id": "b", "MessageBody": "b", "MessageDeduplicationId": "b"},
            "The request must contain the parameter MessageGroupId.",
        ),
        ({"Id": "b", "MessageBody": "b", "MessageGroupId": "g"}, "ContentBasedDeduplication"),
    ):
        with pytest.raises(ClientError) as refused:
            sqs.send_message_batch(QueueUrl=url, Entries=[good, bad])
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
        assert error_code(refused) == "InvalidParameterValue"
        assert text in refused.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as single:  # a single send names the missing parameter
        sqs.send_message(QueueUrl=url, MessageBody="b", MessageDeduplicationId="b")
    assert error_code(single) == "MissingParameter"
    assert [
        m["Body"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    ] == ["zero"]


# --------------------------------------------------------------------------- as AWS words it
# Error texts as AWS answers them (LocalStack's AWS-validated snapshots, AWS's answers quoted in
# bug reports, and moto where AWS's own is not recorded: docs/sqs.md, Errors).

NAME_TEXT = "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length"
FIFO_NAME_TEXT = (
    "The name of a FIFO queue can only include alphanumeric characters, hyphens, or "
    "underscores, must end with .fifo suffix and be 1 to 80 in length."
)


def test_invalid_queue_names_are_refused_in_aws_words(sqs: Any) -> None:
    fifo = {"FifoQueue": "true"}
    for name in ("", "x" * 81, "/my/test", "bad!name", "a.b", "jobs.fifo"):
        assert refused(sqs.create_queue, QueueName=name) == (
            400,
            "InvalidParameterValue",
            NAME_TEXT,
        ), name
    for name in ("", "x" * 76 + ".fifo", "/my/test.fifo", "bad!name.fifo", "jobs"):
        assert refused(sqs.create_queue, QueueName=name, Attributes=fifo) == (
            400,
            "InvalidParameterValue",
            FIFO_NAME_TEXT,
        ), name
    assert "QueueUrls" not in sqs.list_queues()
    assert sqs.create_queue(QueueName="x" * 75 + ".fifo", Attributes=fifo)["QueueUrl"]
    assert sqs.create_queue(QueueName="x" * 80)["QueueUrl"]


def forged_handle(queue: str) -> str:
    """A handle of ``queue`` made as the endpoint makes them, naming no message it leased."""
    data = msgspec.msgpack.encode((queue, "0" * 26, "no-such-receipt", time.time()))
    return base64.urlsafe_b64encode(data).decode()


def test_receipt_handle_errors_in_aws_words(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    other = sqs.create_queue(QueueName="other")["QueueUrl"]
    sqs.send_message(QueueUrl=other, MessageBody="m")
    [elsewhere] = sqs.receive_message(QueueUrl=other)["Messages"]
    for handle in ("garbage", "", elsewhere["ReceiptHandle"]):
        text = f'The input receipt handle "{handle}" is not a valid receipt handle.'
        expected = (400, "ReceiptHandleIsInvalid", text)
        assert refused(sqs.delete_message, QueueUrl=url, ReceiptHandle=handle) == expected
        assert (
            refused(
                sqs.change_message_visibility,
                QueueUrl=url,
                ReceiptHandle=handle,
                VisibilityTimeout=10,
            )
            == expected
        )
        batch = sqs.delete_message_batch(
            QueueUrl=url, Entries=[{"Id": "bad", "ReceiptHandle": handle}]
        )
        assert batch["Failed"] == [
            {"Id": "bad", "SenderFault": True, "Code": "ReceiptHandleIsInvalid", "Message": text}
        ]
    # well formed, but naming nothing leased: a delete is a retry's (200), a change is refused
    unknown = forged_handle("q")
    sqs.delete_message(QueueUrl=url, ReceiptHandle=unknown)
    assert refused(
        sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=unknown, VisibilityTimeout=10
    ) == (
        400,
        "AWS.SimpleQueueService.MessageNotInflight",
        f"Value {unknown} for parameter ReceiptHandle is invalid. Reason: Message does not "
        "exist or is not available for visibility timeout change.",
    )
    assert depth(sqs, other)["MessagesNotVisible"] == 1


BATCH_ID_TEXT = (
    "A batch entry id can only contain alphanumeric characters, hyphens and underscores. "
    "It can be at most 80 letters long."
)


def test_batch_errors_in_aws_words(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    for call, action, entry in (
        (sqs.send_message_batch, "SendMessageBatch", {"MessageBody": "b"}),
        (sqs.delete_message_batch, "DeleteMessageBatch", {"ReceiptHandle": "h"}),
        (
            sqs.change_message_visibility_batch,
            "ChangeMessageVisibilityBatch",
            {"ReceiptHandle": "h", "VisibilityTimeout": 0},
        ),
    ):
        assert refused(call, QueueUrl=url, Entries=[]) == (
            400,
            "AWS.SimpleQueueService.EmptyBatchRequest",
            f"There should be at least one {action}RequestEntry in the request.",
        )
        eleven = [{"Id": f"i{i}", **entry} for i in range(11)]
        assert refused(call, QueueUrl=url, Entries=eleven) == (
            400,
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
            "Maximum number of entries per request are 10. You have sent 11.",
        )
        twice = [{"Id": "a", **entry}, {"Id": "dup", **entry}, {"Id": "dup", **entry}]
        assert refused(call, QueueUrl=url, Entries=twice) == (
            400,
            "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
            "Id dup repeated.",
        )
        for bad in ("", "x" * 81, "invalid:id"):
            assert refused(call, QueueUrl=url, Entries=[{"Id": bad, **entry}]) == (
                400,
                "AWS.SimpleQueueService.InvalidBatchEntryId",
                BATCH_ID_TEXT,
            ), (action, bad)
    big = [{"Id": f"e{i}", "MessageBody": "x" * 600_000} for i in range(2)]
    assert refused(sqs.send_message_batch, QueueUrl=url, Entries=big) == (
        400,
        "AWS.SimpleQueueService.BatchRequestTooLong",
        "Batch requests cannot be longer than 1048576 bytes. You have sent 1200000 bytes.",
    )
    assert depth(sqs, url)["Messages"] == 0


def test_message_attribute_errors_in_aws_words(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    cases = [
        (
            {"MessageAttributes": {"Author": {"DataType": "string", "StringValue": "me"}}},
            "The message attribute 'Author' has an invalid message attribute type, the set of "
            "supported type prefixes is Binary, Number, and String.",
        ),
        (
            {"MessageAttributes": {"Author": {"DataType": "Text", "StringValue": "me"}}},
            "The message attribute 'Author' has an invalid message attribute type, the set of "
            "supported type prefixes is Binary, Number, and String.",
        ),
        (
            {"MessageAttributes": {"ErrorDetails": {"DataType": "String", "StringValue": ""}}},
            "Message (user) attribute 'ErrorDetails' must contain a non-empty value of type "
            "'String'.",
        ),
        (
            {"MessageGroupId": "group 123"},
            "Value group 123 for parameter MessageGroupId is invalid. Reason: MessageGroupId "
            "can only include alphanumeric and punctuation characters. 1 to 128 in length.",
        ),
    ]
    for arguments, text in cases:
        assert refused(sqs.send_message, QueueUrl=url, MessageBody="b", **arguments) == (
            400,
            "InvalidParameterValue",
            text,
        )
        batch = sqs.send_message_batch(
            QueueUrl=url, Entries=[{"Id": "e", "MessageBody": "b", **arguments}]
        )
        assert [(f["Code"], f["Message"]) for f in batch["Failed"]] == [
            ("InvalidParameterValue", text)
        ]
    assert depth(sqs, url)["Messages"] == 0


def test_a_prefix_wildcard_selects_every_attribute_under_its_prefix(sqs: Any) -> None:
    """As on SQS, ``Hel.*`` selects ``Hello`` and ``Help.Me``: the prefix is what precedes
    ``.*``; ``*`` and ``.*`` select all."""
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    names = ["meta", "meta.a", "meta.b.c", "metadata", "Hello", "Help.Me", "other"]
    attributes = {n: {"DataType": "String", "StringValue": n} for n in names}
    sqs.send_message(QueueUrl=url, MessageBody="m", MessageAttributes=attributes)
    for asked, chosen in (
        (["meta.*"], {"meta", "meta.a", "meta.b.c", "metadata"}),
        (["Hel.*"], {"Hello", "Help.Me"}),
        (["meta.b.*", "other"], {"meta.b.c", "other"}),
        (["*"], set(names)),
        ([".*"], set(names)),
        (["Foo", "Help"], set()),
    ):
        [msg] = sqs.receive_message(QueueUrl=url, MessageAttributeNames=asked, VisibilityTimeout=0)[
            "Messages"
        ]  # the digest of those returned is checked by check_digests
        assert set(msg.get("MessageAttributes", {})) == chosen, asked


def test_an_empty_policy_removes_the_policy(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    policy = '{"Version":"2012-10-17","Statement":[]}'
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": policy})
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])["Attributes"] == {
        "Policy": policy
    }
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": ""})
    assert "Attributes" not in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])
    everything = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert "Policy" not in everything
    assert sqs.create_queue(QueueName="q", Attributes={"Policy": ""})["QueueUrl"] == url


def test_tags_are_checked_as_aws_does(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q", tags={"team": "data"})["QueueUrl"]
    key_text = "Tag keys must be between 1 and 128 characters in length."
    cases = [
        (
            sqs.tag_queue,
            {"Tags": {}},
            "MissingParameter",
            "The request must contain the parameter Tags.",
        ),
        (sqs.tag_queue, {"Tags": {"k" * 129: "v"}}, "InvalidParameterValue", key_text),
        (sqs.tag_queue, {"Tags": {"": "v"}}, "InvalidParameterValue", key_text),
        (
            sqs.tag_queue,
            {"Tags": {"k": "v" * 257}},
            "InvalidParameterValue",
            "Tag values must be between 0 and 256 characters in length.",
        ),
        (
            sqs.tag_queue,
            {"Tags": {f"t{i}": "v" for i in range(50)}},  # 51 with "team"
            "InvalidParameterValue",
            "Too many tags added for queue q.",
        ),
        (sqs.untag_queue, {"TagKeys": []}, "InvalidParameterValue", key_text),
        (sqs.untag_queue, {"TagKeys": ["k" * 129]}, "InvalidParameterValue", key_text),
    ]
    for call, arguments, code, text in cases:
        assert refused(call, QueueUrl=url, **arguments) == (400, code, text), arguments
        assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "data"}
    # the limits themselves are allowed: 50 tags, a 128-character key, a 256-character value
    full = {f"t{i}": "v" for i in range(47)} | {"k" * 128: "v" * 256, "empty": ""}
    sqs.tag_queue(QueueUrl=url, Tags=full)
    sqs.tag_queue(QueueUrl=url, Tags={"team": "ops"})  # replaces one: still 50
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {**full, "team": "ops"}
    assert refused(sqs.tag_queue, QueueUrl=url, Tags={"one-more": "v"})[2] == (
        "Too many tags added for queue q."
    )
    assert refused(sqs.create_queue, QueueName="many", tags={f"t{i}": "v" for i in range(51)}) == (
        400,
        "InvalidParameterValue",
        "Too many tags added for queue many.",
    )
    assert [u.rsplit("/", 1)[1] for u in sqs.list_queues()["QueueUrls"]] == ["q"]


ARN = "arn:aws:sqs:us-east-1:000000000000:q"


def policy_of(sqs: Any, url: str) -> Any:
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])
    return json.loads(got["Attributes"]["Policy"]) if "Attributes" in got else None


def test_permissions_are_kept_as_statements_of_the_policy(sqs: Any) -> None:
    """As AWS writes them (LocalStack's AWS-validated snapshot of the permission lifecycle);
    kept, not enforced."""
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.add_permission(
        QueueUrl=url,
        Label="crossaccountpermission",
        AWSAccountIds=["000000000000", "668614515564"],
        Actions=["ReceiveMessage"],
    )
    first = {
        "Sid": "crossaccountpermission",
        "Effect": "Allow",
        "Principal": {"AWS": ["arn:aws:iam::000000000000:root", "arn:aws:iam::668614515564:root"]},
        "Action": "SQS:ReceiveMessage",
        "Resource": ARN,
    }
    policy = {"Version": "2008-10-17", "Id": f"{ARN}/SQSDefaultPolicy", "Statement": [first]}
    assert policy_of(sqs, url) == policy
    assert refused(
        sqs.add_permission,
        QueueUrl=url,
        Label="crossaccountpermission",
        AWSAccountIds=["668614515564"],
        Actions=["SendMessage"],
    ) == (
        400,
        "InvalidParameterValue",
        "Value crossaccountpermission for parameter Label is invalid. Reason: Already exists.",
    )
    sqs.add_permission(
        QueueUrl=url,
        Label="crossaccountpermission2",
        AWSAccountIds=["000000000000"],
        Actions=["SendMessage", "DeleteMessage"],
    )
    second = {
        "Sid": "crossaccountpermission2",
        "Effect": "Allow",
        "Principal": {"AWS": "arn:aws:iam::000000000000:root"},
        "Action": ["SQS:SendMessage", "SQS:DeleteMessage"],
        "Resource": ARN,
    }
    assert policy_of(sqs, url)["Statement"] == [first, second]
    sqs.remove_permission(QueueUrl=url, Label="crossaccountpermission")
    assert policy_of(sqs, url)["Statement"] == [second]
    sqs.remove_permission(QueueUrl=url, Label="crossaccountpermission2")
    assert policy_of(sqs, url) is None  # the last statement takes the policy with it
    assert refused(sqs.remove_permission, QueueUrl=url, Label="crossaccountpermission2") == (
        400,
        "InvalidParameterValue",
        "Value crossaccountpermission2 for parameter Label is invalid. Reason: can't find label.",
    )
    # a policy set by SetQueueAttributes gains the statement; RemovePermission leaves the rest
    mine = {"Version": "2012-10-17", "Statement": [{"Sid": "mine", "Effect": "Deny"}]}
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": json.dumps(mine)})
    sqs.add_permission(QueueUrl=url, Label="l", AWSAccountIds=["1"], Actions=["*"])
    assert [s["Sid"] for s in policy_of(sqs, url)["Statement"]] == ["mine", "l"]
    sqs.remove_permission(QueueUrl=url, Label="l")
    assert policy_of(sqs, url) == mine


def test_bad_permissions_are_refused_and_change_nothing(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.add_permission(QueueUrl=url, Label="kept", AWSAccountIds=["1"], Actions=["SendMessage"])
    before = policy_of(sqs, url)
    one = {"AWSAccountIds": ["1"], "Actions": ["SendMessage"]}
    cases = [
        (
            {"Label": "l", "AWSAccountIds": ["1"], "Actions": []},
            (400, "MissingParameter", "The request must contain the parameter Actions."),
        ),
        (
            {"Label": "l", "AWSAccountIds": [], "Actions": ["SendMessage"]},
            (
                400,
                "InvalidParameterValue",
                "Value [] for parameter PrincipalId is invalid. Reason: Unable to verify.",
            ),
        ),
        (
            {"Label": "l", "AWSAccountIds": ["1"], "Actions": ["SendMessage"] * 8},
            (403, "OverLimit", "8 Actions were found, maximum allowed is 7."),
        ),
        (
            {"Label": "l", "AWSAccountIds": ["1"], "Actions": ["CreateQueue"]},
            (
                400,
                "InvalidParameterValue",
                "Value SQS:CreateQueue for parameter ActionName is invalid. Reason: Only the "
                "queue owner is allowed to invoke this action.",
            ),
        ),
        (
            {"Label": "bad label", **one},
            (
                400,
                "InvalidParameterValue",
                "Value bad label for parameter Label is invalid. Reason: Can only include "
                "alphanumeric characters, hyphens, or underscores. 1 to 80 in length.",
            ),
        ),
    ]
    for arguments, answer in cases:
        assert refused(sqs.add_permission, QueueUrl=url, **arguments) == answer, arguments
        assert policy_of(sqs, url) == before
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": "not json"})
    assert refused(sqs.add_permission, QueueUrl=url, Label="l", **one)[1] == (
        "InvalidParameterValue"
    )
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])["Attributes"]
    assert got == {"Policy": "not json"}


def test_a_partitioned_queue_is_one_sqs_queue(sqs: Any, broker: SqsBroker) -> None:
    """A FIFO queue given partitions through the native API (before its first message) is
    served as one SQS queue: each group in order in its partition, deduplication exact, the
    depth summed over the partitions, DeleteQueue taking every partition."""
    from s3q.client import connect

    url = sqs.create_queue(QueueName="parts.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    with connect(broker.url) as client:
        assert client.queue("parts.fifo").configure(partitions=4)["partitions"] == 4
    sent = {}
    for i in range(24):
        group = f"g{i % 6}"
        reply = sqs.send_message(
            QueueUrl=url,
            MessageBody=f"{group}-{i}",
            MessageGroupId=group,
            MessageDeduplicationId=str(i),
        )
        sent[reply["MessageId"]] = f"{group}-{i}"
    again = sqs.send_message(
        QueueUrl=url, MessageBody="g0-0", MessageGroupId="g0", MessageDeduplicationId="0"
    )
    assert again["MessageId"] in sent  # a duplicate, whichever partition it asked
    assert depth(sqs, url)["Messages"] == 24
    with connect(broker.url) as client:
        stats = client.queue("parts.fifo").stats()
        assert len(stats.partitions) == 4 and sum(p.pending for p in stats.partitions) == 24
        assert sum(1 for p in stats.partitions if p.pending) > 1  # the groups spread
    seen: dict[str, list[int]] = {}
    while got := sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"]
    ).get("Messages", []):
        for m in got:
            group, number = m["Body"].split("-")
            seen.setdefault(group, []).append(int(number))
        sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(k), "ReceiptHandle": m["ReceiptHandle"]} for k, m in enumerate(got)
            ],
        )
    assert seen == {f"g{g}": list(range(g, 24, 6)) for g in range(6)}
    assert depth(sqs, url)["Messages"] == 0
    sqs.delete_queue(QueueUrl=url)
    with pytest.raises(ClientError):
        sqs.get_queue_url(QueueName="parts.fifo")
