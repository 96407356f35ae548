"""Celery tasks for tests/e2e/test_celery_transport.py, run by a real Celery worker in a child
process, on s3q's own kombu transport (``s3q.celery``) as docs/celery.md says.

Every task appends a line to ``$S3Q_CELERY_OUT`` (``<event> <task id> <detail...>``), so the
test can count what ran. The broker URL is ``$S3Q_CELERY_BROKER`` (``s3q://…`` or
``s3q+file://…``); ``$S3Q_CELERY_VT`` is the transport's ``visibility_timeout``."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from celery import Celery

import s3q.celery  # noqa: F401  (registers the s3q:// transport with kombu)

OUT = Path(os.environ["S3Q_CELERY_OUT"])

app = Celery(
    "celery_s3q_tasks",
    broker=os.environ["S3Q_CELERY_BROKER"],
    backend=f"file://{OUT.parent / 'results'}",
)
app.conf.broker_transport_options = {"visibility_timeout": float(os.environ["S3Q_CELERY_VT"])}
app.conf.task_default_queue = "celery-s3q"
app.conf.broker_connection_retry_on_startup = True
app.conf.worker_hijack_root_logger = False
# a send retried while the broker restarts (kombu retries it on the transport's connection
# errors), as a producer that must not lose a task would configure it
app.conf.task_publish_retry_policy = {
    "max_retries": 200,
    "interval_start": 0.1,
    "interval_step": 0.1,
    "interval_max": 0.25,
}


def record(event: str, task_id: str | None, *detail: object) -> None:
    with OUT.open("a") as out:
        out.write(" ".join([event, str(task_id), *map(str, detail)]) + "\n")


@app.task(bind=True)
def add(self: Any, x: int, y: int) -> int:
    record("add", self.request.id, x + y)
    return x + y


@app.task(bind=True)
def ordered(self: Any, label: str) -> str:
    """Records its label: the order tasks of different priorities ran in."""
    record("ordered", self.request.id, label, self.request.delivery_info.get("priority"))
    return label


@app.task(bind=True, max_retries=5)
def flaky(self: Any, failures: int) -> str:
    """Fails ``failures`` times, each retried one second later, then succeeds."""
    attempt = self.request.retries
    record("flaky-attempt", self.request.id, attempt, time.time())
    if attempt < failures:
        raise self.retry(countdown=1)
    record("flaky-done", self.request.id, attempt)
    return "done"


@app.task(bind=True)
def stamp(self: Any) -> float:
    """Records when it ran (a countdown or ETA task)."""
    now = time.time()
    record("stamp", self.request.id, now)
    return now


@app.task(bind=True, acks_late=True)
def slow(self: Any, marker: str) -> str:
    """The first run hangs (the test kills its worker); a run after that finishes."""
    if not Path(marker).exists():
        Path(marker).touch()
        record("slow-started", self.request.id, os.getpid())
        time.sleep(120)
    record("slow-done", self.request.id, os.getpid())
    return "ok"


@app.task(bind=True)
def nap(self: Any, seconds: float) -> None:
    """Sleeps ``seconds`` (acknowledged as it starts, as every task by default)."""
    time.sleep(seconds)
    record("nap", self.request.id)


@app.task(bind=True, acks_late=True)
def long(self: Any, seconds: float) -> str:
    """Runs for ``seconds``, longer than the transport's visibility timeout."""
    record("long-started", self.request.id, os.getpid())
    time.sleep(seconds)
    record("long-done", self.request.id, os.getpid())
    return "ok"


@app.task(bind=True, acks_late=True, reject_on_worker_lost=True)
def lost_and_requeued(self: Any, marker: str) -> str:
    """Its first run kills the pool process running it: Celery rejects it with requeue."""
    return _lost(self, "requeued", marker)


@app.task(bind=True, acks_late=True)
def lost_and_acked(self: Any, marker: str) -> str:
    """Its first run kills the pool process running it: Celery acknowledges it (no
    ``reject_on_worker_lost``), so it never runs again."""
    return _lost(self, "acked", marker)


def _lost(task: Any, kind: str, marker: str) -> str:
    if not Path(marker).exists():
        Path(marker).touch()
        record(f"{kind}-killed", task.request.id, os.getpid())
        os.kill(os.getpid(), signal.SIGKILL)
    record(f"{kind}-done", task.request.id, os.getpid())
    return "ok"
