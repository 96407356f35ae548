"""s3q on Azure Blob Storage: Azurite, Microsoft's emulator (npm's ``azurite``, installed from
tests/support/js's lock file), serves ``az://`` queues on 127.0.0.1 as Azure would.

Besides a round trip of its own, this module runs the suite's tests of the store guarantees on
an Azure queue (``AzureEnv`` in conftest.py), rather than copying them:

(a) everything acknowledged survives a close and reopen, and a kill -9 of the writer
    (test_store_reopen.py, test_durability.py);
(b) fencing rests on create-if-absent (``If-None-Match: *``): a rival's log object at the next
    sequence number stops the writer for good, and nothing it tried afterwards is visible
    (test_fencing.py);
(c) the writer lease (compare-and-swap on ``writer.lease``, ``If-Match``): a second open of a
    held queue raises QueueLocked, and a lapsed lease is taken over, fencing the old writer
    (test_fencing.py).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
import test_durability
import test_fencing
import test_store_reopen
from conftest import (
    AzureEnv,
    AzuriteServer,
    FakeClock,
    LineReader,
    StoreEnv,
    drain,
    spawn_child,
)

import s3q
from s3q.store import AlreadyExists, Conflict, open_store

# one worker runs them all (pytest-xdist, --dist loadgroup): one Azurite, not one per worker
pytestmark = pytest.mark.xdist_group("azure")

S = s3q.MessageStatus


@pytest.fixture
def azure_env(azurite: AzuriteServer, azure_container: str) -> Iterator[StoreEnv]:
    """A fresh queue location in a container of the session's Azurite."""
    env = AzureEnv(azurite, azure_container)
    yield env
    env.close_all()


# --------------------------------------------------------------------------- the store itself


def test_the_store_primitives_hold_on_azurite(azure_env: AzureEnv) -> None:
    """Two clients of one Azure location: create-if-absent lets one of them win, and the loser
    changes nothing; compare-and-swap refuses a stale ETag; tails and ranges read right."""
    a = open_store(azure_env.url, dict(azure_env.options))
    b = open_store(azure_env.url, dict(azure_env.options))

    async def main() -> None:
        await a.put_new("log/00000000000000000001", b"from a")
        with pytest.raises(AlreadyExists):
            await b.put_new("log/00000000000000000001", b"from b")
        assert await b.get("log/00000000000000000001") == b"from a"

        etag = await a.put_versioned("writer.lease", b"a holds", None)
        with pytest.raises(Conflict):
            await b.put_versioned("writer.lease", b"b holds", None)  # it exists already
        newer = await b.put_versioned("writer.lease", b"b holds", etag)
        with pytest.raises(Conflict):
            await a.put_versioned("writer.lease", b"a again", etag)  # a's ETag is stale
        assert await a.get_versioned("writer.lease") == (b"b holds", newer)

        await a.put_new("blob", b"0123456789")
        assert await b.get_tail("blob", 4) == b"6789"
        assert await b.get_tail("blob", 100) == b"0123456789"
        assert await b.get_range("blob", 2, 5) == b"234"
        assert await b.keys("") == ["blob", "log/00000000000000000001", "writer.lease"]
        await a.close()
        await b.close()

    asyncio.run(main())
    # what Azurite holds, read without s3q
    assert azure_env.keys() == ["blob", "log/00000000000000000001", "writer.lease"]
    assert azure_env.read("writer.lease") == b"b holds"


def test_store_options_ride_in_the_url_and_unknown_ones_are_refused(
    azure_env: AzureEnv, clock: FakeClock
) -> None:
    url = f"{azure_env.url}?endpoint_url={azure_env.server.endpoint}&allow_http=true"
    with s3q.open(url, clock=clock) as q:
        mid = q.enqueue(b"by query")
        assert q.url == azure_env.url  # the options are not part of the store's name
    with azure_env.open(clock=clock) as q:
        assert q.status(mid) is S.PENDING
    with pytest.raises(s3q.InvalidConfig, match="region"):
        s3q.open(azure_env.url, region="us-east-1", **azure_env.options)
    with pytest.raises(s3q.InvalidConfig, match="allow_http"):
        s3q.open(azure_env.url, endpoint_url=azure_env.server.endpoint, allow_http="yes")
    # GCS takes no endpoint_url: no GCS emulator here serves what obstore's GCS client needs
    with pytest.raises(s3q.InvalidConfig, match="endpoint_url"):
        s3q.open("gs://bucket/q", endpoint_url="http://127.0.0.1:9", allow_http=True)


# --------------------------------------------------------------------------- (a) round trip


def test_round_trip_and_reopen_lose_nothing_acknowledged(
    azure_env: AzureEnv, clock: FakeClock
) -> None:
    q = azure_env.open(clock=clock, max_attempts=2, retry_delay=1.0, retry_delay_max=1.0)
    ids = q.enqueue_batch([f"m{i}".encode() for i in range(10)])
    done = q.dequeue(max_messages=4)
    assert [m.payload for m in done] == [b"m0", b"m1", b"m2", b"m3"]
    q.complete_batch(done[:3])
    q.fail(done[3], "boom")  # back after a retry delay
    [leased] = q.dequeue(visibility_timeout=600)
    assert leased.payload == b"m4"
    urgent = q.enqueue(b"urgent", priority=9)
    before = {mid: q.status(mid) for mid in [*ids, urgent]}
    total = q.stats().total_enqueued
    q.close()

    # the queue's objects are in Azurite: log objects named by sequence number, and the lease
    keys = azure_env.keys()
    assert azure_env.log_seqs() and "writer.lease" in keys, keys

    q = azure_env.open(clock=clock, max_attempts=2, retry_delay=1.0, retry_delay_max=1.0)
    assert {mid: q.status(mid) for mid in [*ids, urgent]} == before
    assert q.stats().total_enqueued == total == 11
    assert [m.payload for m in q.dequeue(max_messages=3)][:1] == [b"urgent"]
    q.complete(leased)  # the lease granted before the reopen still holds, receipt and all
    assert q.status(leased.id) is S.COMPLETED
    clock.advance(601)
    rest = drain(q)
    payloads = sorted(m.payload for m in rest)
    assert b"m0" not in payloads and b"m4" not in payloads  # completed: never again
    assert b"m3" in payloads  # failed once, retried
    q.close()


def test_everything_survives_close_and_reopen(azure_env: StoreEnv, clock: FakeClock) -> None:
    test_store_reopen.test_everything_survives_close_and_reopen(azure_env, clock)


def test_untouched_messages_read_their_tables_back_from_the_log(
    azure_env: StoreEnv, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads the ends of log objects: Azure serves no suffix ranges (``bytes=-N``)."""
    test_store_reopen.test_untouched_messages_read_their_tables_back_from_the_log(
        azure_env, clock, monkeypatch
    )


def test_every_operation_kind_survives_sigkill(azure_env: StoreEnv) -> None:
    test_durability.test_every_operation_kind_survives_sigkill(azure_env)


def test_purge_survives_sigkill(azure_env: StoreEnv) -> None:
    test_durability.test_purge_survives_sigkill(azure_env)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_acknowledged_enqueues_survive_sigkill(azure_env: StoreEnv) -> None:
    test_durability.test_acknowledged_enqueues_survive_sigkill(azure_env)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_acknowledged_completions_survive_sigkill(azure_env: StoreEnv) -> None:
    test_durability.test_acknowledged_completions_survive_sigkill(azure_env)


# --------------------------------------------------------------------------- (b) fencing


@pytest.mark.parametrize("first_op", test_fencing.FIRST_OPS)
def test_raw_object_at_next_seq_fences_writer(
    azure_env: StoreEnv, clock: FakeClock, first_op: str
) -> None:
    test_fencing.test_raw_object_at_next_seq_fences_writer(azure_env, clock, first_op)


def test_fenced_writer_lost_ops_not_visible_and_new_writer_continues(
    azure_env: StoreEnv, clock: FakeClock
) -> None:
    test_fencing.test_fenced_writer_lost_ops_not_visible_and_new_writer_continues(azure_env, clock)


def test_any_object_at_next_seq_fences_writer(azure_env: StoreEnv, clock: FakeClock) -> None:
    test_fencing.test_any_object_at_next_seq_fences_writer(azure_env, clock)


# --------------------------------------------------------------------------- (c) the lease


def test_second_open_of_live_queue_raises_queue_locked(azure_env: StoreEnv) -> None:
    test_fencing.test_second_open_of_live_queue_raises_queue_locked(azure_env)


def test_close_releases_the_queue_at_once(azure_env: StoreEnv) -> None:
    test_fencing.test_close_releases_the_queue_at_once(azure_env)


def test_queue_locked_across_processes(azure_env: StoreEnv) -> None:
    test_fencing.test_queue_locked_across_processes(azure_env)


@pytest.mark.parametrize("lease", ["absent", "lapsed"])
def test_of_two_writers_racing_for_the_lease_one_wins(azure_env: StoreEnv, lease: str) -> None:
    """Writer B takes the lease between writer A's read of it and A's write: A's write, made
    with create-if-absent (no lease yet) or with If-Match on the version it read (a lapsed
    lease), must fail, and A must find B holding the queue."""
    from s3q.lease import CasLease, read_record

    clock = FakeClock()

    async def main() -> None:
        store_a = open_store(azure_env.url, dict(azure_env.options))
        store_b = open_store(azure_env.url, dict(azure_env.options))
        if lease == "lapsed":
            await CasLease(store_b, "gone", "t-gone", 10.0, clock).acquire()
            clock.advance(11)
        b = CasLease(store_b, "writer B", "t-b", 10.0, clock)
        raced: list[bool] = []

        class BetweenReadAndWrite:
            """Store A, whose first lease write lets B acquire the lease first."""

            def __getattr__(self, name: str) -> Any:
                return getattr(store_a, name)

            async def put_versioned(self, key: str, data: bytes, version: str | None) -> str:
                if not raced:
                    raced.append(True)
                    await b.acquire()
                return await store_a.put_versioned(key, data, version)

        a = CasLease(BetweenReadAndWrite(), "writer A", "t-a", 10.0, clock)
        with pytest.raises(s3q.QueueLocked) as info:
            await a.acquire()
        assert info.value.holder == "writer B"
        current = await read_record(store_b)
        assert current is not None and current[0] is not None
        assert current[0].token == "t-b"
        await b.renew()  # B's own compare-and-swap still succeeds: A changed nothing
        await store_a.close()
        await store_b.close()

    asyncio.run(main())


def test_takeover_after_lease_lapsed_fences_old_writer(azure_env: StoreEnv) -> None:
    test_fencing.test_takeover_after_lease_lapsed_fences_old_writer(azure_env)


def test_takeover_with_short_lease_ttl(azure_env: StoreEnv) -> None:
    test_fencing.test_takeover_with_short_lease_ttl(azure_env)


def test_takeover_under_load_short_lease(azure_env: StoreEnv) -> None:
    test_fencing.test_takeover_under_load_short_lease(azure_env)


def test_lease_of_a_killed_writer_lapses_in_real_time(azure_env: StoreEnv) -> None:
    """No fake clock: a writer killed with SIGKILL keeps the queue until its lease runs out by
    the wall clock, and not a moment longer than the lease the refusal names."""
    ttl = 4.0  # renewed every ttl/3: at least 2.7 s left at the kill, to see it refused
    proc = spawn_child("child_hold.py", azure_env, lease_ttl=ttl)
    reader = LineReader(proc)
    line = reader.next()
    assert line.startswith("ready "), line
    child_mid = line.split()[1]
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    for f in (proc.stdin, proc.stdout, proc.stderr):
        assert f is not None
        f.close()

    with pytest.raises(s3q.QueueLocked) as info:
        azure_env.open(lease_ttl=ttl)
    expires_at = info.value.expires_at
    assert expires_at is not None and time.time() < expires_at <= time.time() + ttl + 1
    time.sleep(max(0.0, expires_at - time.time()) + 0.2)  # the lease the refusal named
    with azure_env.open(lease_ttl=ttl) as q:
        assert q.status(child_mid) is S.PENDING
        assert [m.payload for m in q.dequeue()] == [b"from-child"]
