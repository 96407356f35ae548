"""A broker on 127.0.0.1 in this process (uvicorn on a thread, real HTTP), for the tests that
need one."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn

from s3q.broker import create_app
from s3q.broker.limits import DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_BATCH
from s3q.broker.server import configure
from s3q.prices import Prices

TOKEN = "sekrit-token"

#: when (time.monotonic) a broker of this process last began to stop: a web page still open
#: on it fails its next poll then, which is the test's end, not a fault of the page
stopping_since = float("inf")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Broker:
    def __init__(
        self,
        store: str,
        tokens: set[str] | None = None,
        sqs_keys: dict[str, str] | None = None,
        advertise: bool = False,
        prices: Prices | None = None,
        lean: bool = True,
        max_batch: int = DEFAULT_MAX_BATCH,
        body_timeout: float = DEFAULT_BODY_TIMEOUT,
        websockets: bool = True,
        principals: str | None = None,
        peers: list[str] | None = None,
        audit_log: str | None = None,
        audit_all: bool = False,
        port: int | None = None,
        head_timeout: float | None = None,
        **options: Any,
    ) -> None:
        # bound here and handed to uvicorn: no other process (an xdist worker) can take the port
        # between choosing it and listening on it
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", port or 0))
        self.port = int(self.socket.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        app = create_app(
            store,
            tokens=tokens,
            options=options or None,
            sqs_keys=sqs_keys,
            address=self.url if advertise else None,
            prices=prices,
            max_batch=max_batch,
            body_timeout=body_timeout,
            principals=principals,
            peers=peers,
            audit_log=audit_log,
            audit_all=audit_all,
        )
        if not lean:
            app.state.lean = None  # every call through the generic stack
        heads = {} if head_timeout is None else {"head_timeout": head_timeout}
        config = configure(app, "127.0.0.1", self.port, log_level="warning", **heads)
        if not websockets:
            config.ws = "none"  # a broker that offers no subscriptions
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True
        )

    def __enter__(self) -> Broker:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "broker did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        global stopping_since
        stopping_since = time.monotonic()
        self.server.should_exit = True
        self.thread.join(15)
        self.socket.close()
        assert not self.thread.is_alive()
