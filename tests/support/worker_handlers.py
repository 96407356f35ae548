"""Handlers that the worker tests (tests/unit/test_worker_api.py, tests/integration/test_worker.py)
load by their ``module:function`` path."""

from __future__ import annotations

import sys
import time

import s3q
from s3q.worker import handler

not_callable = 42


def plain(msg: s3q.Message) -> bytes:
    """Not decorated: it names no queue."""
    return msg.payload


@handler("emails", concurrency=4, max_attempts=5)
async def emails(msg: s3q.Message) -> bytes:
    return msg.payload.upper()


class Handlers:
    @staticmethod
    def upper(msg: s3q.Message) -> bytes:
        return msg.payload.upper()


@handler("sigterm", concurrency=1, prefetch=4, grace=10.0)
def slow(msg: s3q.Message) -> str:
    """Reports that it started, then works for a second: long enough to be signalled mid-job."""
    print(f"started {msg.id}", flush=True)
    time.sleep(1.0)  # the job itself
    print(f"done {msg.id}", flush=True)
    sys.stdout.flush()
    return msg.id
