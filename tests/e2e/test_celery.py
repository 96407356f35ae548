"""Celery on s3q: a real Celery worker (kombu's SQS transport, unmodified) against ``s3q serve``'s
SQS endpoint, configured as docs/celery.md says. Tasks run exactly once, retries with a
countdown come back, countdown tasks wait, results round-trip through a result backend, and an
``acks_late`` task whose worker is killed with SIGKILL runs again on the next worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SUPPORT_DIR, child_env

from s3q.broker import spawn

pytestmark = pytest.mark.slow


class Worker:
    """``celery worker`` in a child process; ready once it says so."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "celery_tasks",
                "worker",
                *("-P", "threads", "-c", "8", "--loglevel", "info"),
                *("--without-heartbeat", "--without-gossip", "--without-mingle"),
            ],
            env=env,
            cwd=SUPPORT_DIR,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.output: list[str] = []
        ready = threading.Event()

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line)
                if " ready." in line:
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + 60
        while not ready.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError("the Celery worker did not start:\n" + "".join(self.output))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def celery_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    child, url = spawn(f"file://{tmp_path}/store", sqs_keys={"AKIDCELERY": "celery-secret"})
    env = {
        **child_env(),
        "S3Q_CELERY_PORT": url.rsplit(":", 1)[1],
        "S3Q_CELERY_OUT": str(tmp_path / "out.txt"),
        "PYTHONPATH": os.pathsep.join([str(SUPPORT_DIR), child_env().get("PYTHONPATH", "")]),
    }
    (tmp_path / "out.txt").touch()
    (tmp_path / "results").mkdir()
    os.environ.update({k: env[k] for k in ("S3Q_CELERY_PORT", "S3Q_CELERY_OUT")})
    try:
        yield env
    finally:
        child.terminate()
        child.wait(30)


@pytest.fixture
def tasks(celery_env: dict[str, str]) -> Any:
    sys.path.insert(0, str(SUPPORT_DIR))
    import importlib

    import celery_tasks

    return importlib.reload(celery_tasks)  # this test's broker port and output file


def lines(env: dict[str, str]) -> list[list[str]]:
    return [line.split() for line in Path(env["S3Q_CELERY_OUT"]).read_text().splitlines()]


def until(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    """Wait for what the worker, another process, writes."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the worker never got there"
        time.sleep(0.05)  # another process's output: polled


def test_tasks_run_exactly_once_with_retries_countdowns_and_results(
    celery_env: dict[str, str], tasks: Any
) -> None:
    worker = Worker(celery_env)
    try:
        sent = [tasks.add.delay(i, 1000) for i in range(300)]
        retried = tasks.flaky.delay(2)
        countdown_sent = time.time()
        stamped = tasks.stamp.apply_async(countdown=3)
        # results round-trip through the result backend
        assert sorted(r.get(timeout=120) for r in sent) == [i + 1000 for i in range(300)]
        assert retried.get(timeout=60) == "done"
        ran_at = stamped.get(timeout=60)
        assert ran_at >= countdown_sent + 3 - 0.1
        done = lines(celery_env)
        adds = Counter(task for event, task, *_ in done if event == "add")
        assert set(adds) == {r.id for r in sent} and set(adds.values()) == {1}
        attempts = [int(d[0]) for event, task, *d in done if event == "flaky-attempt"]
        assert attempts == [0, 1, 2]
        assert [e for e, *_ in done].count("flaky-done") == 1
    finally:
        worker.stop()


def test_an_acks_late_task_of_a_killed_worker_runs_on_the_next(
    celery_env: dict[str, str], tasks: Any, tmp_path: Path
) -> None:
    first = Worker(celery_env)
    result = tasks.slow.delay(str(tmp_path / "started-once"))
    until(lambda: any(event == "slow-started" for event, *_ in lines(celery_env)))
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(30)
    second = Worker(celery_env)
    try:
        assert result.get(timeout=90) == "ok"  # back after the visibility timeout
        events = [(event, task) for event, task, *_ in lines(celery_env)]
        assert events.count(("slow-done", result.id)) == 1
    finally:
        second.stop()
