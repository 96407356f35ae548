"""SigV4 verification against botocore's signer, and loading SQS access keys."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqs_broker import KEY_ID, SECRET
from sqs_checks import signed_request

import s3q
from s3q.broker import load_sqs_keys
from s3q.broker.sqs import sigv4
from s3q.broker.sqs.protocol import SqsError


def test_verify_agrees_with_botocore_signer() -> None:
    """The canonical request is rebuilt as botocore builds it: path, query, header spacing."""
    body = b'{"x": 1}'
    keys = {KEY_ID: SECRET}
    for url in ("http://h:9/", "http://h:9/000000000000/q%20x?b=2&a=1", "http://h/a/./b/../c"):
        request = signed_request(body, url)
        prepared = request.prepare()
        path, _, query = prepared.url.split("/", 3)[-1].partition("?")
        headers: dict[str, list[str]] = {}
        for name, value in prepared.headers.items():
            headers.setdefault(name.lower(), []).append(value)
        host = url.split("/")[2]
        headers["host"] = [host]
        assert sigv4.verify("POST", "/" + path, query, headers, body, keys) == KEY_ID
        with pytest.raises(SqsError) as exc:
            sigv4.verify("POST", "/" + path, query, headers, body, keys, now=time.time() + 400)
        assert exc.value.name == "RequestExpired" and exc.value.status == 403
        with pytest.raises(SqsError):
            sigv4.verify("POST", "/" + path, query, headers, body, {KEY_ID: "other"})
        headers["x-amz-target"] = ["AmazonSQS.DeleteQueue"]  # a signed header changed
        with pytest.raises(SqsError):
            sigv4.verify("POST", "/" + path, query, headers, body, keys)


def test_loading_sqs_keys(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("# comment\nAKID1:secret:with:colons\n\n  AKID2:s2  \n")
    env = {"S3Q_SQS_CREDENTIALS": "AKID3:s3, AKID4:s4"}
    assert load_sqs_keys(path, env) == {
        "AKID1": "secret:with:colons",
        "AKID2": "s2",
        "AKID3": "s3",
        "AKID4": "s4",
    }
    assert load_sqs_keys(None, {}) == {}
    path.write_text("no-colon\n")
    with pytest.raises(s3q.InvalidConfig):
        load_sqs_keys(path, {})
