"""Celery tasks for tests/e2e/test_celery.py, run by a real Celery worker in a child process.

Every task appends a line to ``$S3Q_CELERY_OUT`` (``<event> <task id> <detail>``), so the test
can count what ran. The broker is ``s3q serve``'s SQS endpoint, through kombu's SQS transport,
configured as docs/celery.md says."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from celery import Celery

PORT = os.environ["S3Q_CELERY_PORT"]
OUT = Path(os.environ["S3Q_CELERY_OUT"])

app = Celery(
    "celery_tasks",
    broker=f"sqs://AKIDCELERY:celery-secret@127.0.0.1:{PORT}",
    backend=f"file://{OUT.parent / 'results'}",
)
app.conf.broker_transport_options = {
    "region": "us-east-1",
    "is_secure": False,  # s3q serve speaks plain HTTP; put TLS in front to cross a network
    "visibility_timeout": 4,  # a killed worker's acks_late tasks come back after this
    "polling_interval": 0.1,
    "wait_time_seconds": 1,
}
app.conf.task_default_queue = "celery-tests"
app.conf.broker_connection_retry_on_startup = True


def record(event: str, task_id: str | None, detail: object = "") -> None:
    with OUT.open("a") as out:
        out.write(f"{event} {task_id} {detail}\n")


@app.task(bind=True)
def add(self: Any, x: int, y: int) -> int:
    record("add", self.request.id, x + y)
    return x + y


@app.task(bind=True, max_retries=5)
def flaky(self: Any, failures: int) -> str:
    """Fails ``failures`` times, each retried one second later, then succeeds."""
    attempt = self.request.retries
    record("flaky-attempt", self.request.id, attempt)
    if attempt < failures:
        raise self.retry(countdown=1)
    record("flaky-done", self.request.id, attempt)
    return "done"


@app.task(bind=True)
def stamp(self: Any) -> float:
    """Records when it ran (a countdown task)."""
    now = time.time()
    record("stamp", self.request.id, now)
    return now


@app.task(bind=True, acks_late=True)
def slow(self: Any, marker: str) -> str:
    """The first run hangs (the test kills its worker); a run after that finishes."""
    if not Path(marker).exists():
        Path(marker).touch()
        record("slow-started", self.request.id)
        time.sleep(120)
    record("slow-done", self.request.id)
    return "ok"
