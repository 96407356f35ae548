"""Where a queue lives: a plain path or a file:// URL, a directory made on first open, S3
prefixes as independent queues, a queue at the root of a bucket."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FakeClock, FileEnv

import s3q

S = s3q.MessageStatus


def test_plain_path_and_file_url_are_the_same_queue(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "plain"
    with s3q.open(str(path), clock=clock) as q:
        mid = q.enqueue(b"x")
    with s3q.open("file://" + str(path), clock=clock) as q:
        assert q.status(mid) is S.PENDING
        assert q.dequeue()[0].payload == b"x"


def test_file_queue_directory_is_created(tmp_path: Path) -> None:
    env = FileEnv(tmp_path / "deep" / "er")
    with env.open() as q:
        q.enqueue(b"x")
    assert env.path.is_dir()


def test_s3_prefixes_are_independent_queues(moto_server, s3_bucket, clock: FakeClock) -> None:
    from conftest import S3Env

    a, b = S3Env(moto_server, s3_bucket), S3Env(moto_server, s3_bucket)
    qa, qb = a.open(clock=clock), b.open(clock=clock)
    ia = qa.enqueue(b"a")
    qb.enqueue(b"b")
    assert [m.payload for m in qa.dequeue(max_messages=5)] == [b"a"]
    with pytest.raises(s3q.MessageNotFound):
        qb.status(ia)
    qa.close()
    qb.close()
    assert a.log_keys() and b.log_keys()


def test_s3_bucket_root_queue(moto_server, clock: FakeClock) -> None:
    """A queue at the root of its own bucket (no prefix)."""
    import uuid

    bucket = "s3q-root-" + uuid.uuid4().hex[:8]
    moto_server.client().create_bucket(Bucket=bucket)
    with s3q.open(f"s3://{bucket}", clock=clock, **moto_server.store_options()) as q:
        mid = q.enqueue(b"root")
    with s3q.open(f"s3://{bucket}", clock=clock, **moto_server.store_options()) as q:
        assert q.status(mid) is S.PENDING
    listing = moto_server.client().list_objects_v2(Bucket=bucket)
    assert any(o["Key"].startswith("log/") for o in listing.get("Contents", []))
