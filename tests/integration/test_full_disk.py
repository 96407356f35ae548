"""A full disk is an error, never a loss: on a small real file system (a tmpfs of 4 MiB) that a
filler file fills, every call that needs a write answers StoreFull and changes nothing, the
writer goes on, and once the filler is gone the queue serves again without being reopened.

Mounting needs root: elsewhere these tests are skipped, saying why. (A full store injected
into a memory store is in tests/integration/test_faults.py.)
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from conftest import drain, state_of
from sqs_broker import SqsBroker

import s3q
from s3q.client import connect


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs mounted on a fresh directory, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where = tmp_path / "disk"
    where.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)]
    done = subprocess.run(mount, capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"could not mount a tmpfs: {done.stderr.strip()}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)]).returncode:  # busy: a test left a file open
            subprocess.run(["umount", "-l", str(where)], check=True)


def fill(disk: Path) -> Path:
    """Fill ``disk`` to its last byte with a file; the file."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for chunk in (1 << 16, 1 << 12, 1):
            try:
                while True:
                    os.write(fd, b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    return filler


def files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (the writer's lock and lease files aside) and its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith("writer.")
    }


def test_a_full_disk_answers_store_full_changes_nothing_and_passes(disk: Path) -> None:
    """Enqueues (inline and large payloads), a dequeue and a completion meet a full disk:
    each raises StoreFull, the queue's stats and files stay as they were (no partial file
    left), and the writer has not stopped. Once the filler is deleted the same queue object
    serves again, and a reopen finds every acknowledged message and none of the refused."""
    root = disk / "q"
    with s3q.open(str(root), large_payload=64 * 1024) as q:
        acked = {q.enqueue(f"before {i}".encode()): f"before {i}".encode() for i in range(5)}
        [leased] = q.dequeue(visibility_timeout=600)
        before, stored = state_of(q.stats()), files(root)
        filler = fill(disk)
        with pytest.raises(s3q.StoreFull, match="no space left"):
            q.enqueue(b"refused")
        with pytest.raises(s3q.StoreFull):
            q.enqueue(b"L" * (256 * 1024))  # a payload object of its own
        with pytest.raises(s3q.StoreFull):
            q.enqueue_batch([b"refused too"] * 50)
        with pytest.raises(s3q.StoreFull):
            q.dequeue()
        with pytest.raises(s3q.StoreFull):
            q.complete(leased)
        assert state_of(q.stats()) == before
        assert files(root) == stored

        filler.unlink()
        acked[q.enqueue(b"after")] = b"after"
        q.complete(leased)
        assert q.stats().completed == 1
    with s3q.open(str(root)) as again:
        got = {m.id: m.payload for m in drain(again)}
    del acked[leased.id]
    assert got == acked


def test_through_a_broker_native_and_sqs_callers_get_the_mapped_error(disk: Path) -> None:
    """A broker whose queues live on the full disk: the native client raises StoreFull (HTTP
    507), boto3 gets ServiceUnavailable (503) saying the store is full; both succeed again once
    the filler is gone, and what was acknowledged is there."""
    with SqsBroker(f"file://{disk / 'queues'}") as broker, connect(broker.url) as client:
        native = client.queue("native")
        sqs = broker.client()
        url = sqs.create_queue(QueueName="sqs")["QueueUrl"]
        native.enqueue(b"one")
        sqs.send_message(QueueUrl=url, MessageBody="one")
        filler = fill(disk)
        with pytest.raises(s3q.StoreFull, match="full") as native_error:
            native.enqueue(b"refused")
        assert "queues" not in str(native_error.value)  # no path in an answer
        with pytest.raises(ClientError) as sqs_error:
            sqs.send_message(QueueUrl=url, MessageBody="refused")
        error: dict[str, Any] = sqs_error.value.response["Error"]
        assert sqs_error.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
        assert error["Code"] == "ServiceUnavailable"
        assert "full" in error["Message"] and "nothing was done" in error["Message"]
        filler.unlink()
        native.enqueue(b"two")
        sqs.send_message(QueueUrl=url, MessageBody="two")
        assert sorted(m.payload for m in native.dequeue(max_messages=10)) == [b"one", b"two"]
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        assert sorted(m["Body"] for m in got) == ["one", "two"]
