"""`s3q worker MODULE:FUNCTION` runs a handler over a queue and stops cleanly on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from conftest import LineReader, child_env

import s3q

HANDLER = """
import sys
import s3q.worker

@s3q.worker.handler("jobs")
def shout(msg):
    sys.stdout.write(msg.payload.decode().upper() + "\\n")  # one write: threads do not interleave
    sys.stdout.flush()
    if msg.payload == b"boom":
        raise ValueError("no")
"""


def run_until_three_handled(tmp_path: Path, env: dict[str, str]) -> None:
    """`s3q worker tasks:shout` in ``tmp_path``, stopped by SIGTERM once it handled 3 messages."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "s3q.cli", "worker", "tasks:shout", "--concurrency", "2"],
        cwd=tmp_path,
        env={**child_env(), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    reader = LineReader(proc)
    try:
        assert sorted(reader.next() for _ in range(3)) == ["BOOM", "HELLO", "WORLD"]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def test_worker_command_handles_messages_and_stops_on_sigterm(tmp_path: Path) -> None:
    (tmp_path / "tasks.py").write_text(HANDLER)
    store = tmp_path / "store"
    with s3q.open(str(store / "jobs"), max_attempts=1) as q:
        ids = q.enqueue_batch([b"hello", b"world", b"boom"])
    run_until_three_handled(tmp_path, {"S3Q_STORE": str(store)})
    with s3q.open(str(store / "jobs"), max_attempts=1) as q:
        statuses = [q.status(i) for i in ids]
        dead = q.dead_letters()
    assert statuses[:2] == [s3q.MessageStatus.COMPLETED] * 2
    assert statuses[2] is s3q.MessageStatus.DEAD
    assert dead[0].last_error == "ValueError: no"


def test_worker_command_names_a_bad_handler_path_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "s3q.cli", "worker", "no_such_module:fn", "--queue", "jobs"],
        cwd=tmp_path,
        env={**child_env(), "S3Q_STORE": str(tmp_path / "store")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "no module named 'no_such_module'" in done.stderr


def test_worker_command_through_a_broker(tmp_path: Path) -> None:
    """--store http://broker: the worker leases and acknowledges through the broker, which
    keeps the queue open as its writer all along (a local worker could not open it)."""
    from broker_harness import TOKEN, Broker

    from s3q.client import connect

    (tmp_path / "tasks.py").write_text(HANDLER)
    store = f"file://{tmp_path}/store"
    with (
        Broker(store, tokens={TOKEN}, max_attempts=1) as broker,
        connect(broker.url, token=TOKEN) as client,
    ):
        q = client.queue("jobs")
        ids = q.enqueue_batch([b"hello", b"world", b"boom"])
        run_until_three_handled(tmp_path, {"S3Q_STORE": broker.url, "S3Q_TOKEN": TOKEN})
        statuses = [q.status(i) for i in ids]
        assert statuses[:2] == [s3q.MessageStatus.COMPLETED] * 2
        assert statuses[2] is s3q.MessageStatus.DEAD
        assert q.dead_letters()[0].last_error == "ValueError: no"
        stats = q.stats()
        assert (stats.processing, stats.pending) == (0, 0)  # no lease left behind


def test_worker_command_through_a_broker_without_the_token(tmp_path: Path) -> None:
    from broker_harness import TOKEN, Broker

    (tmp_path / "tasks.py").write_text(HANDLER)
    with Broker(f"file://{tmp_path}/store", tokens={TOKEN}) as broker:
        done = subprocess.run(
            [sys.executable, "-m", "s3q.cli", "worker", "tasks:shout"],
            cwd=tmp_path,
            env={**child_env(), "S3Q_STORE": broker.url},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert "bearer token" in done.stderr and "Traceback" not in done.stderr


ATTEMPTS = """
import sys
import s3q

@s3q.handler("jobs", concurrency=2, max_attempts=2, retry_delay=0.0)
def count(msg):
    sys.stdout.write(f"{msg.payload.decode()} {msg.attempts}\\n")
    sys.stdout.flush()
    raise ValueError("never")
"""


def test_worker_through_a_broker_gives_its_queue_settings_to_the_broker_s_queue(
    tmp_path: Path,
) -> None:
    """The handler's queue settings (max_attempts=2 here, the broker's queue having 3) apply
    through a broker as they would on a queue the worker opens: it configures them there."""
    from broker_harness import Broker

    from s3q.client import connect

    (tmp_path / "tasks.py").write_text(ATTEMPTS)
    with Broker(f"file://{tmp_path}/store") as broker, connect(broker.url) as client:
        q = client.queue("jobs")
        [poison] = q.enqueue_batch([b"poison"])
        assert q.configure()["max_attempts"] == 3
        command = ["worker", "tasks:count", "--queue", f"{broker.url}/jobs"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "s3q.cli", *command],
            cwd=tmp_path,
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        reader = LineReader(proc)
        try:
            assert [reader.next() for _ in range(2)] == ["poison 1", "poison 2"]
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0, proc.communicate()
        assert q.configure()["max_attempts"] == 2 and q.configure()["retry_delay"] == 0.0
        assert q.status(poison) is s3q.MessageStatus.DEAD
        assert q.dead_letters()[0].attempts == 2


def test_a_worker_through_a_broker_refuses_the_broker_s_own_options(tmp_path: Path) -> None:
    from s3q.worker import Worker

    for option in ("lease_ttl", "commit_window", "endpoint_url"):
        try:
            Worker("http://127.0.0.1:1/jobs", print, options={option: 1.0})
        except s3q.InvalidArgument as exc:
            assert option in str(exc) and "s3q serve" in str(exc), exc
        else:
            raise AssertionError(f"{option} was taken")
