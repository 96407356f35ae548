"""What a queue keeps in its store: log objects and the writer lease (renewed in the
background), and storage that stays bounded while live payloads survive compaction."""

from __future__ import annotations

import re

import pytest
from conftest import FakeClock, StoreEnv

import s3q

S = s3q.MessageStatus

LOG_KEY = re.compile(r"^log/\d{20}$")


def test_layout_log_objects_and_lease(raw_env: StoreEnv) -> None:
    q = raw_env.open()
    q.enqueue(b"x")
    keys = raw_env.keys()
    logs = [k for k in keys if k.startswith("log/")]
    assert logs and all(LOG_KEY.match(k) for k in logs), logs
    assert "writer.lease" in keys
    if raw_env.kind == "file":
        assert "writer.lock" in keys
    n = len(logs)
    q.enqueue(b"y")
    assert len(raw_env.log_seqs()) == n + 1
    assert raw_env.log_seqs()[-1] == raw_env.log_seqs()[-2] + 1
    q.close()


def test_s3_writer_lease_is_renewed_in_background(moto_server, s3_bucket) -> None:
    """With a short writer lease and the real clock, the open queue keeps renewing its lease:
    past the first expiry a second open is still refused and the writer still commits."""
    import time

    from conftest import S3Env

    env = S3Env(moto_server, s3_bucket)
    q = env.open(lease_ttl=1.5)
    try:
        opened_at = time.time()  # the first lease ends no later than this + 1.5 s
        q.enqueue(b"x")
        first = env.read("writer.lease")
        deadline = time.monotonic() + 15
        # await the renewal: the lease object changes (polling the store: no event to await)
        while env.read("writer.lease") == first:
            assert time.monotonic() < deadline, "the writer lease was never renewed"
            time.sleep(0.05)
        while time.time() <= opened_at + 1.8:
            time.sleep(0.05)  # real time must pass the first expiry: that is the point
        with pytest.raises(s3q.QueueLocked):
            env.open(lease_ttl=1.5)
        mid = q.enqueue(b"still the writer")
        assert q.status(mid) is S.PENDING
    finally:
        q.close()


def test_storage_stays_bounded_and_live_payloads_survive_compaction(
    raw_env: StoreEnv, clock: FakeClock
) -> None:
    """Many commits over a long (fake) time: old log objects are collected, while the payload of
    a message that stayed pending all along is kept (copied forward) and survives reopen."""
    q = raw_env.open(clock=clock, completed_retention=10.0)
    keeper_payload = b"K" * 5000
    keeper = q.enqueue(keeper_payload, priority=0)
    for r in range(40):
        ids = [q.enqueue(f"r{r}-{i}".encode() * 40, priority=1) for i in range(5)]
        msgs = q.dequeue(max_messages=5)
        assert [m.id for m in msgs] == ids
        q.complete_batch(msgs)
        clock.advance(61)
        q.cleanup()
    commits = q.stats().commits
    assert commits >= 40 * 7
    q.close()
    n_logs = len(raw_env.log_keys())
    assert n_logs < commits / 4, f"{n_logs} log objects kept after {commits} commits"
    q = raw_env.open(clock=clock, completed_retention=10.0)
    [m] = q.dequeue(max_messages=10)
    assert (m.id, m.payload) == (keeper, keeper_payload)
    assert q.stats().total_enqueued == 1 + 40 * 5
    q.close()
