"""Celery on s3q's own kombu transport (``s3q.celery``, ``broker="s3q://host:port/"``): real
``celery worker`` processes against ``s3q serve`` in a child process, configured as
docs/celery.md says. Every task runs exactly once; retries with a countdown come back; countdown
and ETA tasks wait in s3q (delayed), not in the worker; priorities order delivery; the
prefetch is Celery's (``worker_prefetch_multiplier``); a warm shutdown finishes and acknowledges
a running ``acks_late`` task; results
round-trip through Celery's file-system result backend; an ``acks_late`` task whose worker is
killed with SIGKILL is finished once by another worker, at once (the broker gives the dead
subscription's leases back); a task running longer than the visibility timeout is not
delivered twice (its lease is renewed); ``task_reject_on_worker_lost`` requeues, its absence
acknowledges; a broker killed with SIGKILL and restarted under load loses no task whose send
was acknowledged. Embedded (``s3q+file://``): a worker in the producing process."""

from __future__ import annotations

import datetime
import importlib
import itertools
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
from s3q.client import connect

pytestmark = pytest.mark.slow

QUEUE = "celery-s3q"  # the tasks' queue (celery_s3q_tasks.task_default_queue)


class Worker:
    """``celery worker`` on ``celery_s3q_tasks`` in a child process; ready once it says so."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "celery_s3q_tasks",
                "worker",
                *(args or ("-P", "threads", "-c", "8")),
                *("--loglevel", "info", "--without-heartbeat", "--without-gossip"),
                "--without-mingle",
            ],
            env=env,
            cwd=SUPPORT_DIR,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # (its pool's processes die with it: killpg)
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
                self.kill()
                raise AssertionError("the Celery worker did not start:\n" + "".join(self.output))

    def kill(self) -> None:
        """SIGKILL, to the worker and its pool's processes."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        with_errors = [line for line in self.output if "Traceback" in line]
        assert not with_errors or self.expect_errors, "".join(self.output)

    expect_errors = False


class Broker:
    """``s3q serve`` on a directory in a child process; killed and started again at will."""

    def __init__(self, store: str) -> None:
        self.store = store
        self.child, self.url = spawn(store)
        self.port = int(self.url.rsplit(":", 1)[1])

    def kill(self) -> None:
        self.child.send_signal(signal.SIGKILL)
        self.child.wait(30)

    def start(self) -> None:
        self.child, _ = spawn(self.store, port=self.port)

    def stop(self) -> None:
        if self.child.poll() is None:
            self.child.terminate()
            self.child.wait(30)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    broker = Broker(f"file://{tmp_path}/store")
    try:
        yield broker
    finally:
        broker.stop()


def environment(tmp_path: Path, url: str, vt: float) -> dict[str, str]:
    (tmp_path / "out.txt").touch()
    (tmp_path / "results").mkdir(exist_ok=True)
    return {
        **child_env(),
        "S3Q_CELERY_BROKER": url,
        "S3Q_CELERY_OUT": str(tmp_path / "out.txt"),
        "S3Q_CELERY_VT": str(vt),
    }


def tasks_for(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """``celery_s3q_tasks`` as this test's environment makes it (its broker, its files)."""
    for name in ("S3Q_CELERY_BROKER", "S3Q_CELERY_OUT", "S3Q_CELERY_VT"):
        monkeypatch.setenv(name, env[name])
    import celery_s3q_tasks

    return importlib.reload(celery_s3q_tasks)


@pytest.fixture
def env(broker: Broker, tmp_path: Path) -> dict[str, str]:
    return environment(tmp_path, f"s3q://127.0.0.1:{broker.port}/", 30.0)


@pytest.fixture
def tasks(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Any:
    return tasks_for(env, monkeypatch)


def lines(env: dict[str, str]) -> list[list[str]]:
    return [line.split() for line in Path(env["S3Q_CELERY_OUT"]).read_text().splitlines()]


def events(env: dict[str, str], event: str) -> list[list[str]]:
    return [rest for name, *rest in lines(env) if name == event]


def until(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    """Wait for what a worker, another process, writes."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the worker never got there"
        time.sleep(0.05)  # another process's output: polled


def test_tasks_run_once_with_retries_countdowns_eta_and_results(
    broker: Broker, env: dict[str, str], tasks: Any
) -> None:
    worker = Worker(env)
    try:
        sent = [tasks.add.delay(i, 1000) for i in range(300)]
        retried = tasks.flaky.delay(2)
        countdown_sent = time.time()
        by_countdown = tasks.stamp.apply_async(countdown=3)
        eta = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=4)
        by_eta = tasks.stamp.apply_async(eta=eta)
        with connect(broker.url) as client:  # they wait in s3q, not leased to the worker
            assert client.queue(QUEUE).stats().delayed >= 2
        assert sorted(r.get(timeout=120) for r in sent) == [i + 1000 for i in range(300)]
        assert retried.get(timeout=60) == "done"
        assert by_countdown.get(timeout=60) >= countdown_sent + 3 - 0.1
        assert by_eta.get(timeout=60) >= eta.timestamp() - 0.1
        adds = Counter(task for task, *_ in events(env, "add"))
        assert set(adds) == {r.id for r in sent} and set(adds.values()) == {1}
        attempts = [(int(n), float(at)) for _, n, at in events(env, "flaky-attempt")]
        assert [n for n, _ in attempts] == [0, 1, 2]
        assert all(b - a >= 1 - 0.1 for (_, a), (_, b) in itertools.pairwise(attempts))
        assert len(events(env, "flaky-done")) == 1
        with connect(broker.url) as client:
            stats = client.queue(QUEUE).stats()
        assert (stats.pending, stats.delayed, stats.processing, stats.dead) == (0, 0, 0, 0)
    finally:
        worker.stop()


def test_priorities_order_delivery(env: dict[str, str], tasks: Any) -> None:
    for _ in range(5):
        tasks.ordered.apply_async(("low",), priority=0)
        tasks.ordered.apply_async(("high",), priority=9)
    worker = Worker(env, "-P", "solo", "--prefetch-multiplier", "1")
    try:
        until(lambda: len(events(env, "ordered")) == 10)
        ran = [label for _, label, _ in events(env, "ordered")]
        assert ran == ["high"] * 5 + ["low"] * 5
        assert {int(p) for _, label, p in events(env, "ordered") if label == "high"} == {9}
    finally:
        worker.stop()


def test_the_prefetch_is_celerys(broker: Broker, env: dict[str, str], tasks: Any) -> None:
    for _ in range(12):
        tasks.nap.delay(0.3)
    worker = Worker(env, "-P", "solo", "-c", "1", "--prefetch-multiplier", "3")  # 1 times 3
    leased: list[int] = []
    try:
        with connect(broker.url) as client:
            queue = client.queue(QUEUE)
            while len(events(env, "nap")) < 12:
                leased.append(queue.stats().processing)  # the worker's unacked: reserved
                time.sleep(0.05)  # (sampling what another process holds)
    finally:
        worker.stop()
    assert max(leased) == 3, leased  # each task acked as it starts: 3 reserved behind it


@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_a_warm_shutdown_finishes_and_acknowledges_a_running_acks_late_task(
    broker: Broker, env: dict[str, str], tasks: Any, pool: str
) -> None:
    worker = Worker(env, "-P", pool, "-c", "2")
    try:
        result = tasks.long.delay(3.0)
        until(lambda: bool(events(env, "long-started")))
        worker.proc.send_signal(signal.SIGTERM)  # warm: running tasks finish first
        assert worker.proc.wait(60) == 0
        assert result.get(timeout=10) == "ok"
        with connect(broker.url) as client:
            stats = client.queue(QUEUE).stats()
        assert (stats.completed, stats.pending, stats.processing) == (1, 0, 0)
        assert len(events(env, "long-started")) == len(events(env, "long-done")) == 1
    finally:
        worker.stop()


def test_an_acks_late_task_of_a_killed_worker_is_finished_once_by_another(
    env: dict[str, str], tasks: Any, tmp_path: Path
) -> None:
    workers = [Worker(env), Worker(env)]
    try:
        result = tasks.slow.delay(str(tmp_path / "started-once"))
        until(lambda: bool(events(env, "slow-started")))
        (_, pid), *_ = events(env, "slow-started")
        (dying,) = [w for w in workers if w.proc.pid == int(pid)]
        killed = time.monotonic()
        dying.kill()
        assert result.get(timeout=60) == "ok"
        # at once: the broker gave the lease of the dead worker's subscription back, it did
        # not wait for the visibility timeout (30 s)
        assert time.monotonic() - killed < 15
        done = events(env, "slow-done")
        assert [task for task, _ in done] == [result.id]
        assert int(done[0][1]) != int(pid)
    finally:
        for worker in workers:
            worker.stop()


def test_a_task_longer_than_its_lease_runs_once(
    broker: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = environment(tmp_path, f"s3q://127.0.0.1:{broker.port}/", 2.0)
    tasks = tasks_for(env, monkeypatch)
    workers = [Worker(env), Worker(env)]
    try:
        result = tasks.long.delay(7.0)  # 3.5 leases: renewed while it runs
        assert result.get(timeout=60) == "ok"
        assert [task for task, _ in events(env, "long-started")] == [result.id]
        assert [task for task, _ in events(env, "long-done")] == [result.id]
    finally:
        for worker in workers:
            worker.stop()


def test_reject_on_worker_lost_requeues_and_its_absence_acknowledges(
    broker: Broker, env: dict[str, str], tasks: Any, tmp_path: Path
) -> None:
    worker = Worker(env, "-P", "prefork", "-c", "2")
    worker.expect_errors = True  # (Celery logs each lost pool process)
    try:
        requeued = tasks.lost_and_requeued.delay(str(tmp_path / "requeued"))
        assert requeued.get(timeout=60) == "ok"
        assert len(events(env, "requeued-killed")) == len(events(env, "requeued-done")) == 1
        acked = tasks.lost_and_acked.delay(str(tmp_path / "acked"))
        with pytest.raises(Exception, match="Worker exited prematurely"):
            acked.get(timeout=60)

        def settled() -> bool:
            with connect(broker.url) as client:
                stats = client.queue(QUEUE).stats()
            return stats.pending + stats.processing + stats.delayed + stats.retry == 0

        until(settled)  # acknowledged: completed, never delivered again
        assert len(events(env, "acked-killed")) == 1 and not events(env, "acked-done")
    finally:
        worker.stop()


def test_a_broker_killed_under_load_loses_no_acknowledged_task(
    broker: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = environment(tmp_path, f"s3q://127.0.0.1:{broker.port}/", 5.0)
    tasks = tasks_for(env, monkeypatch)
    worker = Worker(env)
    worker.expect_errors = True  # (what the worker logs while the broker is away)
    acknowledged: list[str] = []
    done = threading.Event()

    def produce() -> None:
        for i in range(600):
            acknowledged.append(tasks.add.delay(i, 0).id)  # returned: durable in s3q
        done.set()

    producer = threading.Thread(target=produce)
    try:
        producer.start()
        until(lambda: len(acknowledged) >= 150 and len(events(env, "add")) >= 50)
        broker.kill()
        sent_before, ran_before = len(acknowledged), len(events(env, "add"))
        time.sleep(1.0)  # the broker away for a while: sends wait, the worker reconnects
        broker.start()
        assert done.wait(180), "the producer never finished"
        producer.join()
        until(lambda: {task for task, _ in events(env, "add")} >= set(acknowledged), 180)
        ran = Counter(task for task, _ in events(env, "add"))
        assert set(acknowledged) <= set(ran)
        assert sent_before < len(acknowledged) and ran_before < len(ran)  # (killed mid-stream)
        print(f"{len(acknowledged)} acknowledged, {sum(ran.values())} runs")  # at least once
    finally:
        worker.stop()


def test_embedded_queues_with_a_worker_in_the_producing_process(tmp_path: Path) -> None:
    from celery import Celery
    from celery.contrib.testing.worker import start_worker

    import s3q.celery  # noqa: F401

    app = Celery(
        "embedded",
        broker=f"s3q+file://{tmp_path}/store",
        backend=f"file://{tmp_path}",
    )
    app.conf.task_default_queue = "embedded"
    ran: list[int] = []

    @app.task
    def double(x: int) -> int:
        ran.append(x)
        return 2 * x

    with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False):
        results = [double.delay(i) for i in range(50)]
        sent = time.time()
        later = double.apply_async((100,), countdown=2)
        assert [r.get(timeout=60) for r in results] == [2 * i for i in range(50)]
        assert later.get(timeout=60) == 200 and time.time() >= sent + 2 - 0.1
    assert sorted(ran) == [*range(50), 100]
