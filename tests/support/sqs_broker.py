"""A real broker on 127.0.0.1 for the SQS tests, and boto3 clients of it."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config
from broker_harness import Broker

KEY_ID, SECRET = "AKIDTEST", "test-secret"


class SqsBroker(Broker):
    """The broker of broker_harness.py, with boto3 SQS clients."""

    def __enter__(self) -> SqsBroker:
        super().__enter__()
        return self

    def client(self, key_id: str = KEY_ID, secret: str = SECRET, **config: Any) -> Any:
        """An unmodified boto3 SQS client of this broker."""
        return sqs_client(self.url, key_id, secret, **config)


def sqs_client(url: str, key_id: str = KEY_ID, secret: str = SECRET, **config: Any) -> Any:
    """An unmodified boto3 SQS client of the broker at ``url``."""
    return boto3.client(
        "sqs",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 1}, read_timeout=60, **config),
    )
