"""The AWS query protocol on the SQS endpoint (form-encoded requests, XML answers).

The client is botocore driven through the query model of SQS: the model of the last botocore
that spoke it (1.31.80, as boto3 1.28.80 and older did), fetched from PyPI by a fixture and put
before botocore's own models, so requests are serialized, signed and their answers parsed by
botocore's own query code, unmodified.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import botocore.auth
import botocore.session
import httpx
import pytest
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from sqs_broker import KEY_ID, SECRET, SqsBroker
from sqs_checks import ATTRIBUTES, check_digests, depth, error_code, move_task, refused

# one worker runs them all (pytest-xdist, --dist loadgroup): the botocore wheel is fetched once
pytestmark = pytest.mark.xdist_group("sqs-query")

#: The last botocore whose model of SQS is the query protocol.
QUERY_BOTOCORE = "botocore==1.31.80"


@pytest.fixture(scope="session")
def query_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A botocore data directory holding only the query-protocol model of SQS."""
    root = tmp_path_factory.mktemp("query-model")
    fetched = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--dest", str(root), QUERY_BOTOCORE],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert fetched.returncode == 0, fetched.stderr[-2000:]
    (wheel,) = root.glob("botocore-*.whl")
    models = root / "models"
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith("botocore/data/sqs/"):
                target = models / name.removeprefix("botocore/data/")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(name))
    return models


def query_client(url: str, models: Path, secret: str = SECRET) -> Any:
    """A botocore SQS client speaking the query protocol to ``url``."""
    session = botocore.session.get_session()
    session.get_component("data_loader").search_paths.insert(0, str(models))
    client = session.create_client(
        "sqs",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 1}, read_timeout=60),
    )
    assert client.meta.service_model.protocol == "query"
    client.meta.events.register("after-call.sqs.ReceiveMessage", check_digests)
    return client


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[SqsBroker]:
    with SqsBroker(f"file://{tmp_path}/store", sqs_keys={KEY_ID: SECRET}) as b:
        yield b


@pytest.fixture
def sqs(broker: SqsBroker, query_models: Path) -> Any:
    return query_client(broker.url, query_models)


def signed_form(url: str, form: dict[str, str] | bytes) -> tuple[dict[str, str], bytes]:
    """Headers and body of a SigV4-signed query request (as the Java SDK v1 sends one)."""
    body = form if isinstance(form, bytes) else urlencode(form).encode()
    request = AWSRequest(
        method="POST",
        url=url,
        data=body,
        headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
    )
    botocore.auth.SigV4Auth(Credentials(KEY_ID, SECRET), "sqs", "us-east-1").add_auth(request)
    return dict(request.headers.items()), body


def test_a_lookup_of_a_missing_queue_is_the_modeled_error(sqs: Any) -> None:
    with pytest.raises(sqs.exceptions.QueueDoesNotExist) as exc:
        sqs.get_queue_url(QueueName="missing")
    assert error_code(exc) == "AWS.SimpleQueueService.NonExistentQueue"
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    # as SQS words it on this protocol (LocalStack's AWS-validated snapshot)
    message = "The specified queue does not exist for this wsdl version."
    assert exc.value.response["Error"]["Message"] == message


def test_queues_attributes_and_tags(sqs: Any, broker: SqsBroker) -> None:
    url = sqs.create_queue(
        QueueName="jobs",
        Attributes={"VisibilityTimeout": "45", "DelaySeconds": "0"},
        tags={"team": "data", "env": "test"},
    )["QueueUrl"]
    assert url == f"{broker.url}/000000000000/jobs"
    assert sqs.get_queue_url(QueueName="jobs")["QueueUrl"] == url
    sqs.create_queue(QueueName="other")
    assert sqs.list_queues()["QueueUrls"] == [url, f"{broker.url}/000000000000/other"]
    assert sqs.list_queues(QueueNamePrefix="jo")["QueueUrls"] == [url]
    assert "QueueUrls" not in sqs.list_queues(QueueNamePrefix="none")
    page = sqs.list_queues(MaxResults=1)
    assert page["QueueUrls"] == [url] and page["NextToken"]

    sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "60"})
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert got["VisibilityTimeout"] == "60" and got["QueueArn"].endswith(":jobs")
    assert got["MaximumMessageSize"] == "1048576"
    one = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["DelaySeconds"])
    assert one["Attributes"] == {"DelaySeconds": "0"}

    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "data", "env": "test"}
    sqs.tag_queue(QueueUrl=url, Tags={"owner": "me"})
    sqs.untag_queue(QueueUrl=url, TagKeys=["env", "team"])
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"owner": "me"}

    dead = sqs.create_queue(QueueName="jobs-dead")["QueueUrl"]
    policy = '{"deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:jobs-dead", '
    sqs.set_queue_attributes(
        QueueUrl=url, Attributes={"RedrivePolicy": policy + '"maxReceiveCount": "3"}'}
    )
    assert sqs.list_dead_letter_source_queues(QueueUrl=dead)["queueUrls"] == [url]
    dead_arn = "arn:aws:sqs:us-east-1:000000000000:jobs-dead"
    assert sqs.start_message_move_task(SourceArn=dead_arn)["TaskHandle"]
    task = move_task(sqs, dead_arn)
    assert task["Status"] == "COMPLETED" and task["ApproximateNumberOfMessagesMoved"] == 0

    sqs.delete_queue(QueueUrl=f"{broker.url}/000000000000/other")
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName="other")


def test_messages_round_trip_with_every_attribute_type(sqs: Any) -> None:
    """Bodies with XML's special characters and a carriage return, attributes of every type
    (botocore checks the MD5 digests of both), system attributes, batches and deletes."""
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    body = "a <b> & \"c\" 'd'\r\nline ünïcødé 🚀"
    sent = sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=ATTRIBUTES)
    assert sent["MessageId"] and sent["MD5OfMessageBody"] and sent["MD5OfMessageAttributes"]
    batch = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "a", "MessageBody": "first"},
            {"Id": "b", "MessageBody": "second", "MessageAttributes": ATTRIBUTES},
            {"Id": "c", "MessageBody": "late", "DelaySeconds": 900},
            {"Id": "d", "MessageBody": "x", "DelaySeconds": 901},
        ],
    )
    assert sorted(e["Id"] for e in batch["Successful"]) == ["a", "b", "c"]
    [failed] = batch["Failed"]
    assert failed["Id"] == "d" and failed["SenderFault"] is True
    assert failed["Code"] == "InvalidParameterValue"
    assert depth(sqs, url) == {"Messages": 3, "MessagesNotVisible": 0, "MessagesDelayed": 1}

    got = sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=10,
        AttributeNames=["All"],
        MessageAttributeNames=["All"],
        VisibilityTimeout=30,
    )["Messages"]
    assert sorted(m["Body"] for m in got) == sorted([body, "first", "second"])
    first = next(m for m in got if m["Body"] == body)
    assert first["MessageId"] == sent["MessageId"]
    assert first["MessageAttributes"] == ATTRIBUTES
    assert first["Attributes"]["ApproximateReceiveCount"] == "1"
    assert int(first["Attributes"]["SentTimestamp"]) > 0
    plain = next(m for m in got if m["Body"] == "first")
    assert "MessageAttributes" not in plain

    changed = sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "ok", "ReceiptHandle": plain["ReceiptHandle"], "VisibilityTimeout": 0},
            {"Id": "bad", "ReceiptHandle": "forged", "VisibilityTimeout": 0},
        ],
    )
    assert [e["Id"] for e in changed["Successful"]] == ["ok"]
    assert [e["Id"] for e in changed["Failed"]] == ["bad"]
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0
    )
    again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    handles = [m["ReceiptHandle"] for m in again["Messages"]]
    assert sorted(m["Body"] for m in again["Messages"]) == sorted([body, "first"])
    deleted = sqs.delete_message_batch(
        QueueUrl=url, Entries=[{"Id": f"e{i}", "ReceiptHandle": h} for i, h in enumerate(handles)]
    )
    assert sorted(e["Id"] for e in deleted["Successful"]) == ["e0", "e1"]
    assert "Failed" not in deleted or deleted["Failed"] == []
    second = next(m for m in got if m["Body"] == "second")
    sqs.delete_message(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"])
    assert depth(sqs, url) == {"Messages": 0, "MessagesNotVisible": 0, "MessagesDelayed": 1}
    sqs.purge_queue(QueueUrl=url)
    assert depth(sqs, url)["MessagesDelayed"] == 0


def test_fifo_queues(sqs: Any) -> None:
    url = sqs.create_queue(
        QueueName="orders.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]
    one = sqs.send_message(QueueUrl=url, MessageBody="one", MessageGroupId="g")
    two = sqs.send_message(QueueUrl=url, MessageBody="one", MessageGroupId="g")
    assert one["MessageId"] == two["MessageId"], "content-based deduplication"
    assert int(one["SequenceNumber"]) > 0
    [got] = sqs.receive_message(QueueUrl=url, AttributeNames=["All"])["Messages"]
    assert got["Attributes"]["MessageGroupId"] == "g"
    # content-based: the dedup id is the SHA-256 of the body, as SQS makes it
    assert got["Attributes"]["MessageDeduplicationId"] == hashlib.sha256(b"one").hexdigest()
    sqs.send_message(
        QueueUrl=url, MessageBody="two", MessageGroupId="h", MessageDeduplicationId="order-7"
    )
    [named] = sqs.receive_message(QueueUrl=url, AttributeNames=["All"])["Messages"]
    assert named["Body"] == "two"
    assert named["Attributes"]["MessageDeduplicationId"] == "order-7"
    with pytest.raises(ClientError) as exc:
        sqs.send_message(QueueUrl=url, MessageBody="no group")
    assert error_code(exc) == "MissingParameter"


def test_errors_keep_their_codes(sqs: Any, broker: SqsBroker, query_models: Path) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    with pytest.raises(ClientError) as exc:
        sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=11)
    assert error_code(exc) == "InvalidParameterValue"
    with pytest.raises(ClientError) as exc:
        sqs.send_message_batch(QueueUrl=url, Entries=[])
    assert error_code(exc) == "AWS.SimpleQueueService.EmptyBatchRequest", exc.value
    with pytest.raises(ClientError) as exc:
        sqs.delete_message(QueueUrl=url, ReceiptHandle="forged")
    assert error_code(exc) == "ReceiptHandleIsInvalid"
    forger = query_client(broker.url, query_models, secret="wrong")
    with pytest.raises(ClientError) as exc:
        forger.send_message(QueueUrl=url, MessageBody="forged")
    assert error_code(exc) == "SignatureDoesNotMatch"
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert depth(sqs, url)["Messages"] == 0


def test_errors_read_as_on_the_json_protocol(sqs: Any) -> None:
    """SQS words these errors alike on both protocols (LocalStack's AWS-validated snapshots)."""
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    assert refused(sqs.create_queue, QueueName="/my/test") == (
        400,
        "InvalidParameterValue",
        "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length",
    )
    assert refused(sqs.delete_message, QueueUrl=url, ReceiptHandle="garbage") == (
        400,
        "ReceiptHandleIsInvalid",
        'The input receipt handle "garbage" is not a valid receipt handle.',
    )
    assert refused(sqs.delete_message_batch, QueueUrl=url, Entries=[]) == (
        400,
        "AWS.SimpleQueueService.EmptyBatchRequest",
        "There should be at least one DeleteMessageBatchRequestEntry in the request.",
    )
    entry = {"Id": "invalid:id", "ReceiptHandle": "h"}
    assert refused(sqs.delete_message_batch, QueueUrl=url, Entries=[entry])[1:] == (
        "AWS.SimpleQueueService.InvalidBatchEntryId",
        "A batch entry id can only contain alphanumeric characters, hyphens and underscores. "
        "It can be at most 80 letters long.",
    )
    twice = [{"Id": "dup", "MessageBody": "b"}] * 2
    assert refused(sqs.send_message_batch, QueueUrl=url, Entries=twice)[1:] == (
        "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
        "Id dup repeated.",
    )
    assert refused(sqs.tag_queue, QueueUrl=url, Tags={"k" * 129: "v"})[1:] == (
        "InvalidParameterValue",
        "Tag keys must be between 1 and 128 characters in length.",
    )
    assert depth(sqs, url)["Messages"] == 0


def test_permissions_and_prefix_wildcards(sqs: Any) -> None:
    """AddPermission's lists travel as ``AWSAccountId.n`` and ``ActionName.n``."""
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.add_permission(
        QueueUrl=url, Label="both", AWSAccountIds=["1", "2"], Actions=["SendMessage", "*"]
    )
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])["Attributes"]
    [statement] = json.loads(got["Policy"])["Statement"]
    assert statement["Principal"] == {"AWS": ["arn:aws:iam::1:root", "arn:aws:iam::2:root"]}
    assert statement["Action"] == ["SQS:SendMessage", "SQS:*"]
    sqs.remove_permission(QueueUrl=url, Label="both")
    assert "Attributes" not in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])
    sqs.send_message(QueueUrl=url, MessageBody="m", MessageAttributes=ATTRIBUTES)
    [msg] = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["app.*", "te.*"])["Messages"]
    assert set(msg["MessageAttributes"]) == {"app.user", "app.role", "text"}


def test_a_form_posted_to_the_queue_url_names_its_queue(sqs: Any, broker: SqsBroker) -> None:
    """The AWS SDK for Java v1 posts to the queue's URL and leaves QueueUrl out."""
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    form = {"Action": "SendMessage", "Version": "2012-11-05", "MessageBody": "by path"}
    headers, body = signed_form(url, form)
    sent = httpx.post(url, headers=headers, content=body)
    assert sent.status_code == 200, sent.text
    assert sent.headers["content-type"].startswith("text/xml")
    assert b"<SendMessageResponse" in sent.content and b"<MessageId>" in sent.content
    [got] = sqs.receive_message(QueueUrl=url)["Messages"]
    assert got["Body"] == "by path"


@pytest.mark.parametrize(
    ("form", "code"),
    [
        ({"Version": "2012-11-05", "QueueName": "q"}, "MissingAction"),
        ({"Action": "Nope"}, "InvalidAction"),
        ({"Action": "GetQueueUrl"}, "MissingParameter"),
        ({"Action": "GetQueueAttributes", "AttributeName.x": "All"}, "MalformedQueryString"),
        ({"Action": "GetQueueAttributes", "AttributeName.0": "All"}, "MalformedQueryString"),
        ({"Action": "ListQueues", "MaxResults": "many"}, "InvalidParameterValue"),
    ],
)
def test_a_malformed_form_is_an_xml_error_that_changes_nothing(
    sqs: Any, broker: SqsBroker, form: dict[str, str], code: str
) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    headers, body = signed_form(broker.url + "/", form)
    answer = httpx.post(broker.url + "/", headers=headers, content=body)
    assert answer.status_code == 400
    assert answer.headers["content-type"].startswith("text/xml")
    assert f"<Code>{code}</Code>".encode() in answer.content
    assert b"<Type>Sender</Type>" in answer.content
    assert depth(sqs, url)["Messages"] == 0
    assert sqs.list_queues()["QueueUrls"] == [url]


def test_a_repeated_parameter_is_refused(sqs: Any, broker: SqsBroker) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    form = urlencode({"Action": "SendMessage", "QueueUrl": url, "MessageBody": "a"})
    headers, body = signed_form(broker.url + "/", f"{form}&MessageBody=b".encode())
    answer = httpx.post(broker.url + "/", headers=headers, content=body)
    assert answer.status_code == 400 and b"<Code>MalformedQueryString</Code>" in answer.content
    assert depth(sqs, url)["Messages"] == 0
