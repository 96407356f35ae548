"""A program without OpenTelemetry (every import of it fails, and is recorded): it enqueues and
runs a worker on an embedded queue, then through a broker with the client, and prints as JSON
the payloads handled, their messages' attributes, the imports of OpenTelemetry tried and its
modules loaded.

usage: child_no_otel.py STORE_URL
"""

from __future__ import annotations

import importlib.abc
import json
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import ClassVar


class Hidden(importlib.abc.MetaPathFinder):
    """Makes ``opentelemetry`` absent, and records who asked for it."""

    asked: ClassVar[list[str]] = []

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name.partition(".")[0] == "opentelemetry":
            self.asked.append(name)
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Hidden())

from broker_harness import Broker  # noqa: E402
from worker_harness import serve_until  # noqa: E402

import s3q  # noqa: E402
from s3q.client import connect  # noqa: E402
from s3q.worker import Completed, Worker  # noqa: E402

handled: list[s3q.Message] = []


async def handle(msg: s3q.Message) -> None:
    handled.append(msg)


def completed(event: object) -> bool:
    return isinstance(event, Completed)


store = sys.argv[1]
with s3q.open(f"{store}/embedded") as q:
    q.enqueue(b"embedded")
    serve_until(Worker(q, handle, poll_wait=0.05), completed)
with Broker(store) as broker:
    with connect(broker.url) as client:
        client.queue("remote").enqueue(b"remote")
    serve_until(Worker(f"{broker.url}/remote", handle, poll_wait=0.05), completed)

print(
    json.dumps(
        {
            "handled": [m.payload.decode() for m in handled],
            "attributes": [m.attributes for m in handled],
            "asked_for": Hidden.asked,
            "loaded": sorted(n for n in sys.modules if n.partition(".")[0] == "opentelemetry"),
        }
    )
)
