"""The queue semantics suite again, through a broker: the Python client must behave exactly like
the embedded queue. Each queue is served by a broker on 127.0.0.1 (in this process, so that the
fake clock drives its decisions) over a file:// store; the calls are real HTTP."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_harness import Broker
from conftest import FakeClock
from test_semantics import *  # noqa: F403 - the very same tests, with the fixture below

from s3q.client import Client, connect


@pytest.fixture
def make_queue(tmp_path: Path, clock: FakeClock) -> Iterator[Any]:
    """open(**options) through a broker started with those options; one broker at a time, so
    that opening again (after a close) finds what the previous broker made durable."""
    running: list[tuple[Broker, Client]] = []

    def stop() -> None:
        while running:
            broker, client = running.pop()
            client.close()
            broker.__exit__(None, None, None)

    def _open(**kw: Any) -> Any:
        kw.setdefault("clock", clock)
        stop()
        broker = Broker(f"file://{tmp_path}/store", **kw).__enter__()
        client = connect(broker.url)
        running.append((broker, client))
        queue = client.queue("q")
        queue.configure()  # made, as s3q.open makes a queue (a read through a broker would not)
        return queue

    yield _open
    with contextlib.suppress(Exception):
        stop()
