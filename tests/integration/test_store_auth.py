"""Credentials refused by a real S3 server: a precise StoreError, quickly, and nothing written."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from conftest import start_moto

import s3q


@pytest.fixture(scope="module")
def strict_s3() -> Iterator[dict[str, Any]]:
    """A moto server that checks signatures once set-up (4 unauthenticated calls) is done."""
    server = start_moto({"INITIAL_NO_AUTH_ACTION_COUNT": "4"})
    endpoint = server.endpoint
    try:
        admin = {"endpoint_url": endpoint, "region_name": "us-east-1"}
        iam = boto3.client("iam", aws_access_key_id="x", aws_secret_access_key="x", **admin)
        iam.create_user(UserName="owner")
        key = iam.create_access_key(UserName="owner")["AccessKey"]
        policy = iam.create_policy(
            PolicyName="all",
            PolicyDocument=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
                }
            ),
        )
        iam.attach_user_policy(UserName="owner", PolicyArn=policy["Policy"]["Arn"])
        s3 = boto3.client(
            "s3",
            aws_access_key_id=key["AccessKeyId"],
            aws_secret_access_key=key["SecretAccessKey"],
            **admin,
        )
        s3.create_bucket(Bucket="guarded")
        yield {"endpoint": endpoint, "key": key, "s3": s3}
    finally:
        server.stop()


def test_wrong_secret_key_is_refused_with_store_error(strict_s3: dict[str, Any]) -> None:
    key = strict_s3["key"]
    started = time.monotonic()
    with pytest.raises(s3q.StoreError, match="access denied") as caught:
        s3q.open(
            "s3://guarded/q",
            endpoint_url=strict_s3["endpoint"],
            region="us-east-1",
            access_key_id=key["AccessKeyId"],
            secret_access_key="not-the-secret",
            allow_http=True,
        )
    assert "credentials" in str(caught.value)
    assert time.monotonic() - started < 10, "a refusal must not be retried for long"
    listed = strict_s3["s3"].list_objects_v2(Bucket="guarded")
    assert listed.get("KeyCount", 0) == 0, "a refused open must write nothing"


def test_unknown_access_key_is_refused_with_store_error(strict_s3: dict[str, Any]) -> None:
    with pytest.raises(s3q.StoreError, match="access denied"):
        s3q.open(
            "s3://guarded/q2",
            endpoint_url=strict_s3["endpoint"],
            region="us-east-1",
            access_key_id="AKIANOSUCHKEY0000000",
            secret_access_key="whatever",
            allow_http=True,
        )
    assert strict_s3["s3"].list_objects_v2(Bucket="guarded").get("KeyCount", 0) == 0
