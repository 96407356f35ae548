"""A real broker on 127.0.0.1 for the SQS tests, and boto3 clients of it."""

from __future__ import annotations

import threading
import time
from typing import Any

import boto3
import uvicorn
from botocore.config import Config
from conftest import free_port

from s3q.broker import create_app

KEY_ID, SECRET = "AKIDTEST", "test-secret"


class SqsBroker:
    """uvicorn serving ``create_app(store, ...)`` on a free port, in a thread."""

    def __init__(
        self,
        store: str,
        sqs_keys: dict[str, str] | None = None,
        tokens: set[str] | None = None,
        **options: Any,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = create_app(store, tokens=tokens, options=options or None, sqs_keys=sqs_keys)
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, lifespan="on", log_level="warning"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> SqsBroker:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "broker did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(15)
        assert not self.thread.is_alive()

    def client(self, key_id: str = KEY_ID, secret: str = SECRET, **config: Any) -> Any:
        """An unmodified boto3 SQS client of this broker."""
        return boto3.client(
            "sqs",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id=key_id,
            aws_secret_access_key=secret,
            config=Config(retries={"max_attempts": 1}, read_timeout=60, **config),
        )
