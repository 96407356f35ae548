"""The Celery app of benchmarks/celery_bench.py: one trivial task, and the broker named by
``$BENCH_BROKER_URL`` (s3q through its own kombu transport, ``s3q://…``; s3q's SQS endpoint
through kombu's SQS transport; or Redis)."""

from __future__ import annotations

import os

from celery import Celery

OUT = os.environ["BENCH_OUT"]

if os.environ["BENCH_BROKER_URL"].startswith("s3q"):
    import s3q.celery  # noqa: F401  (registers the s3q:// transport with kombu)

app = Celery("celery_app", broker=os.environ["BENCH_BROKER_URL"])
if app.conf.broker_url.startswith("sqs://"):
    app.conf.broker_transport_options = {
        "region": "us-east-1",
        "is_secure": False,
        "polling_interval": 0.1,
        "wait_time_seconds": 1,
    }
app.conf.task_default_queue = "bench"
app.conf.broker_connection_retry_on_startup = True
app.conf.worker_hijack_root_logger = False


@app.task
def noop(i: int) -> None:
    """Records that task ``i`` ran: one line appended (atomic for short lines)."""
    fd = os.open(OUT, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{i}\n".encode())
    finally:
        os.close(fd)
