"""SigV4 on the SQS endpoint: with access keys configured, only requests signed with one of them
change anything; refused requests get 403 with the SQS error shape."""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.auth
import httpx
import pytest
from botocore import UNSIGNED
from botocore.exceptions import ClientError
from sqs_broker import KEY_ID, SECRET, SqsBroker
from sqs_checks import signed_request

import s3q
from s3q.broker import check_exposure, serve


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[SqsBroker]:
    with SqsBroker(f"file://{tmp_path}/store", sqs_keys={KEY_ID: SECRET, "AKID2": "s2"}) as b:
        yield b


def depth(client: Any, url: str) -> int:
    got = client.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(got["Attributes"]["ApproximateNumberOfMessages"])


def refused(call: Any) -> tuple[int, str]:
    with pytest.raises(ClientError) as exc:
        call()
    response = exc.value.response
    return response["ResponseMetadata"]["HTTPStatusCode"], response["Error"]["Code"]


def test_signed_requests_work_and_others_change_nothing(broker: SqsBroker) -> None:
    good = broker.client()
    url = good.create_queue(QueueName="q")["QueueUrl"]
    good.send_message(QueueUrl=url, MessageBody="one")
    assert broker.client("AKID2", "s2").send_message(QueueUrl=url, MessageBody="two")
    assert depth(good, url) == 2

    wrong_secret = broker.client(KEY_ID, "not-the-secret")
    unknown_key = broker.client("AKIDUNKNOWN", SECRET)
    unsigned = broker.client(signature_version=UNSIGNED)
    for client, code in (
        (wrong_secret, "SignatureDoesNotMatch"),
        (unknown_key, "InvalidClientTokenId"),
        (unsigned, "MissingAuthenticationToken"),
    ):
        assert refused(lambda c=client: c.send_message(QueueUrl=url, MessageBody="x")) == (
            403,
            code,
        )
        assert refused(lambda c=client: c.purge_queue(QueueUrl=url))[0] == 403
        assert refused(lambda c=client: c.delete_queue(QueueUrl=url))[0] == 403
        assert refused(lambda c=client: c.create_queue(QueueName="other"))[0] == 403
    assert depth(good, url) == 2
    assert good.list_queues()["QueueUrls"] == [url]


def test_a_stale_signature_is_refused(broker: SqsBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    good = broker.client()
    url = good.create_queue(QueueName="q")["QueueUrl"]
    stale = broker.client()
    past = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    monkeypatch.setattr(
        botocore.auth, "get_current_datetime", lambda: past - datetime.timedelta(minutes=6)
    )
    assert refused(lambda: stale.send_message(QueueUrl=url, MessageBody="x")) == (
        403,
        "RequestExpired",
    )
    monkeypatch.undo()
    assert depth(good, url) == 0


def test_a_body_that_does_not_match_its_signature_is_refused(broker: SqsBroker) -> None:
    good = broker.client()
    url = good.create_queue(QueueName="q")["QueueUrl"]
    body = b'{"QueueUrl": "' + url.encode() + b'", "MessageBody": "signed"}'
    request = signed_request(body, broker.url + "/")
    headers = dict(request.headers.items())
    sent = httpx.post(broker.url + "/", headers=headers, content=body)
    assert sent.status_code == 200, sent.text
    tampered = body.replace(b"signed", b"evil!!")
    answer = httpx.post(broker.url + "/", headers=headers, content=tampered)
    assert answer.status_code == 403
    assert answer.headers["x-amzn-query-error"] == "SignatureDoesNotMatch;Sender"
    claimed = {**headers, "X-Amz-Content-SHA256": hashlib.sha256(tampered).hexdigest()}
    assert httpx.post(broker.url + "/", headers=claimed, content=tampered).status_code == 403
    assert depth(good, url) == 1


def test_tokens_without_sqs_keys_close_the_sqs_endpoint(tmp_path: Path) -> None:
    with SqsBroker(f"file://{tmp_path}/store", tokens={"tok"}) as broker:
        status, code = refused(lambda: broker.client().create_queue(QueueName="q"))
        assert (status, code) == (403, "AccessDenied")
        assert not (tmp_path / "store" / "q").exists()


def test_without_any_credentials_any_signature_is_accepted(tmp_path: Path) -> None:
    with SqsBroker(f"file://{tmp_path}/store") as broker:
        url = broker.client("anything", "whatever").create_queue(QueueName="q")["QueueUrl"]
        broker.client(signature_version=UNSIGNED).send_message(QueueUrl=url, MessageBody="x")
        assert depth(broker.client(), url) == 1


def test_sqs_keys_alone_do_not_allow_a_public_bind(tmp_path: Path) -> None:
    with pytest.raises(s3q.InvalidConfig, match="native API open"):
        serve(f"file://{tmp_path}/s", host="0.0.0.0", sqs_keys={"AKID": "secret"})
    check_exposure("0.0.0.0", {"tok"})  # tokens: fine (the SQS endpoint then needs keys)


def test_serve_command_reads_sqs_credentials(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from s3q.cli import main

    bad = tmp_path / "keys"
    bad.write_text("missing-the-colon\n")
    store = f"file://{tmp_path}/s"
    result = CliRunner().invoke(main, ["serve", "--store", store, "--sqs-credentials", str(bad)])
    assert result.exit_code != 0 and "ACCESS_KEY_ID:SECRET" in result.output
    bad.write_text("AKID:secret\n")
    args = ["serve", "--store", store, "--sqs-credentials", str(bad), "--host", "0.0.0.0"]
    result = CliRunner().invoke(main, args, env={"S3Q_TOKENS": ""})
    assert result.exit_code != 0 and "native API open" in result.output
