"""Every store keeps the whole queue state across close + reopen; layout and group commit."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest
from conftest import FakeClock, FileEnv, MemoryEnv, StoreEnv, drain, state_of

import s3q

S = s3q.MessageStatus

LOG_KEY = re.compile(r"^log/\d{20}$")


def _statuses(q, ids):
    out = {}
    for mid in ids:
        try:
            out[mid] = q.status(mid)
        except s3q.MessageNotFound:
            out[mid] = None
    return out


def test_everything_survives_close_and_reopen(env: StoreEnv, clock: FakeClock) -> None:
    opts = dict(max_attempts=2, retry_delay=0.5, retry_delay_max=2.0, clock=clock)
    q = env.open(**opts)
    ids = {}
    ids["done"] = q.enqueue(b"done")
    [m] = q.dequeue()
    q.complete(m)
    ids["dead"] = q.enqueue(b"dead")
    [m] = q.dequeue()
    q.fail(m, "e1")
    clock.advance(2.1)
    [m] = q.dequeue()
    q.fail(m, "e2")
    ids["retry"] = q.enqueue(b"retry", priority=3)
    [m] = q.dequeue()
    assert m.id == ids["retry"]
    q.fail(m, "r1")
    ids["proc"] = q.enqueue(b"proc", priority=2)
    [leased] = q.dequeue(visibility_timeout=100)
    assert leased.id == ids["proc"]
    ids["delayed"] = q.enqueue(b"delayed", delay=500)
    ids["g1"] = q.enqueue(b"g1", group="G", attributes={"a": "1"})
    ids["g2"] = q.enqueue(b"g2", group="G")
    ids["hi"] = q.enqueue(b"hi", priority=200, dedup_id="dd")
    ids["lo"] = q.enqueue(b"lo", priority=0)
    statuses = _statuses(q, ids.values())
    stats = q.stats()
    q.close()

    q = env.open(**opts)
    assert _statuses(q, ids.values()) == statuses
    st = q.stats()
    for f in ("pending", "delayed", "processing", "retry", "completed", "dead", "total_enqueued"):
        assert getattr(st, f) == getattr(stats, f), f
    [d] = q.dead_letters()
    assert (d.id, d.payload, d.attempts, d.last_error) == (ids["dead"], b"dead", 2, "e2")
    assert q.enqueue(b"dup", dedup_id="dd") == ids["hi"]  # dedup state survives
    got = q.dequeue(max_messages=10)
    assert [x.id for x in got] == [ids["hi"], ids["g1"], ids["lo"]]
    assert got[1].attributes == {"a": "1"} and got[1].group == "G"
    # the lease survived the reopen: the old receipt still completes it
    q.complete(leased)
    assert q.status(ids["proc"]) is S.COMPLETED
    clock.advance(2.1)
    [r] = q.dequeue()
    assert (r.id, r.attempts, r.last_error) == (ids["retry"], 2, "r1")
    q.close()


def test_lease_survives_reopen_and_is_not_redelivered_early(
    env: StoreEnv, clock: FakeClock
) -> None:
    q = env.open(clock=clock)
    mid = q.enqueue(b"x")
    [m] = q.dequeue(visibility_timeout=60)
    q.close()
    clock.advance(30)
    q = env.open(clock=clock)
    assert q.status(mid) is S.PROCESSING
    assert q.dequeue(max_messages=10) == []
    clock.advance(29)
    assert q.dequeue(max_messages=10) == []
    clock.advance(2)
    [m2] = q.dequeue()
    assert m2.id == mid and m2.attempts == 2
    with pytest.raises(s3q.ReceiptExpired):
        q.complete(m)
    q.close()


def test_extend_survives_reopen(env: StoreEnv, clock: FakeClock) -> None:
    q = env.open(clock=clock)
    mid = q.enqueue(b"x")
    [m] = q.dequeue(visibility_timeout=5)
    q.extend(m, 100)
    q.close()
    clock.advance(50)
    q = env.open(clock=clock)
    assert q.status(mid) is S.PROCESSING
    q.extend(m, 0)
    assert q.status(mid) is S.PENDING
    q.close()


def test_payloads_survive_reopen_with_tiny_cache(env: StoreEnv, clock: FakeClock) -> None:
    payloads = [bytes([i % 251]) * (1000 + 37 * i) for i in range(120)]
    q = env.open(clock=clock, payload_cache_bytes=4096)
    ids = q.enqueue_batch(payloads[:60])
    ids += [q.enqueue(p) for p in payloads[60:]]
    got = drain(q)
    assert [m.payload for m in got] == payloads
    q.close()
    clock.advance(31)
    q = env.open(clock=clock, payload_cache_bytes=4096)
    got = drain(q)
    assert [m.id for m in got] == ids
    assert [m.payload for m in got] == payloads
    q.close()


def test_large_payload_roundtrip(env: StoreEnv, clock: FakeClock) -> None:
    big = bytes(range(256)) * (6 * 1024 * 1024 // 256)  # 6 MiB
    q = env.open(clock=clock)
    mid = q.enqueue(big)
    small = q.enqueue(b"small")
    q.close()
    q = env.open(clock=clock)
    [m1, m2] = q.dequeue(max_messages=2)
    assert m1.id == mid and m1.payload == big
    assert m2.id == small and m2.payload == b"small"
    q.close()


def test_reopen_many_times_accumulates(env: StoreEnv, clock: FakeClock) -> None:
    ids = []
    for i in range(5):
        with env.open(clock=clock) as q:
            ids.append(q.enqueue(f"m{i}".encode()))
            assert q.stats().total_enqueued == i + 1
    with env.open(clock=clock) as q:
        assert [m.id for m in q.dequeue(max_messages=10)] == ids


def test_reopen_after_cleanup_and_purge(env: StoreEnv, clock: FakeClock) -> None:
    q = env.open(clock=clock, completed_retention=10.0)
    a = q.enqueue(b"a")
    [m] = q.dequeue()
    q.complete(m)
    b = q.enqueue(b"b")
    clock.advance(11)
    assert q.cleanup() == 1
    assert q.purge() == 1
    c = q.enqueue(b"c")
    q.close()
    q = env.open(clock=clock, completed_retention=10.0)
    for gone in (a, b):
        with pytest.raises(s3q.MessageNotFound):
            q.status(gone)
    assert q.status(c) is S.PENDING
    assert [m.id for m in q.dequeue(max_messages=10)] == [c]
    q.close()


def test_batch_of_10000_makes_few_commits(env: StoreEnv, clock: FakeClock) -> None:
    q = env.open(clock=clock)
    c0 = q.stats().commits
    items = [f"m{i:05d}".encode() for i in range(10_000)]
    ids = q.enqueue_batch(items)
    assert len(ids) == 10_000 and len(set(ids)) == 10_000
    st = q.stats()
    assert st.commits - c0 <= 5, st
    assert st.pending == 10_000
    if env.raw:
        assert len(env.log_keys()) <= 10
    got = q.dequeue(max_messages=10_000)
    assert [m.payload for m in got] == items
    q.complete_batch(got)
    assert q.stats().commits - c0 <= 12
    assert q.stats().completed == 10_000
    q.close()
    q = env.open(clock=clock)
    assert q.stats().completed == 10_000
    q.close()


def test_concurrent_enqueues_are_group_committed(durable_env: StoreEnv) -> None:
    q = durable_env.open()
    c0 = q.stats().commits
    n_threads, per_thread = 16, 40
    barrier = threading.Barrier(n_threads)
    ids: list[str] = []
    lock = threading.Lock()

    def worker(t: int) -> None:
        barrier.wait()
        for i in range(per_thread):
            mid = q.enqueue(f"{t}-{i}".encode())
            with lock:
                ids.append(mid)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    total = n_threads * per_thread
    assert len(set(ids)) == total
    commits = q.stats().commits - c0
    assert commits < total, f"{commits} commits for {total} concurrent enqueues: no grouping"
    assert len(durable_env.log_keys()) < total
    q.close()
    with durable_env.open() as q:
        assert q.stats().pending == total


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


def test_memory_store_shared_by_name_within_process(clock: FakeClock) -> None:
    a, b = MemoryEnv(), MemoryEnv()
    with a.open(clock=clock) as q:
        mid = q.enqueue(b"x")
    with b.open(clock=clock) as q:
        assert q.stats().total_enqueued == 0
        with pytest.raises(s3q.MessageNotFound):
            q.status(mid)
    with a.open(clock=clock) as q:
        assert q.status(mid) is S.PENDING


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


def test_stats_survive_reopen(env: StoreEnv, clock: FakeClock) -> None:
    with env.open(clock=clock) as q:
        q.enqueue_batch([b"x"] * 10)
        q.dequeue(max_messages=3)
        before = state_of(q.stats())
    with env.open(clock=clock) as q:
        after = state_of(q.stats())
    for k in ("pending", "processing", "total_enqueued"):
        assert after[k] == before[k]


def test_cleanup_is_durable(env: StoreEnv, clock: FakeClock) -> None:
    """What cleanup() pruned stays pruned after close + reopen: a second cleanup finds nothing."""
    opts = dict(clock=clock, dedup_window=10.0, completed_retention=20.0)
    q = env.open(**opts)
    done = q.enqueue(b"done")
    [m] = q.dequeue()
    q.complete(m)
    q.enqueue(b"dedup", dedup_id="k")
    clock.advance(30)
    assert q.cleanup() >= 1
    assert q.cleanup() == 0
    q.close()
    q = env.open(**opts)
    with pytest.raises(s3q.MessageNotFound):
        q.status(done)
    assert q.cleanup() == 0, "entries pruned before the reopen were pruned again"
    q.close()


def test_producers_and_consumers_in_threads(durable_env: StoreEnv) -> None:
    """Mixed concurrent traffic: every message is completed exactly once, nothing is lost."""
    q = durable_env.open()
    n_prod, per_prod, n_cons = 4, 150, 4
    total = n_prod * per_prod
    produced: list[str] = []
    completed: list[str] = []
    lock = threading.Lock()
    producers_done = threading.Event()
    errors: list[BaseException] = []

    def producer(p: int) -> None:
        try:
            for i in range(per_prod):
                if i % 10 == 0:
                    ids = q.enqueue_batch([f"{p}-{i}-{j}".encode() for j in range(3)])
                else:
                    ids = [q.enqueue(f"{p}-{i}".encode(), priority=i % 3)]
                with lock:
                    produced.extend(ids)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    def consumer() -> None:
        try:
            while True:
                msgs = q.dequeue(max_messages=5, wait=0.2)
                if not msgs:
                    if producers_done.is_set():
                        with lock:
                            if len(completed) >= len(produced):
                                return
                    continue
                if len(msgs) > 1:
                    q.complete_batch(msgs)
                else:
                    q.complete(msgs[0])
                with lock:
                    completed.extend(m.id for m in msgs)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    prods = [threading.Thread(target=producer, args=(p,)) for p in range(n_prod)]
    cons = [threading.Thread(target=consumer) for _ in range(n_cons)]
    for t in prods + cons:
        t.start()
    for t in prods:
        t.join(120)
    producers_done.set()
    for t in cons:
        t.join(120)
    assert not errors, errors
    assert not any(t.is_alive() for t in prods + cons)
    expected_total = total + 2 * (n_prod * per_prod // 10)
    assert len(produced) == len(set(produced)) == expected_total
    assert sorted(completed) == sorted(produced), "a message was lost or completed twice"
    st = q.stats()
    assert (st.completed, st.pending, st.processing, st.total_enqueued) == (
        expected_total,
        0,
        0,
        expected_total,
    )
    q.close()
    with durable_env.open() as q2:
        assert q2.stats().completed == expected_total


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


def test_failed_store_requests_are_counted(tmp_path: Path) -> None:
    """A store that cannot be reached, or a directory that is a file: each failed request is a
    StoreError and counts in ``errors`` (``stats().store_errors``, the broker's metrics). A
    refused connection is transient: sent again until the store's patience runs out, each
    attempt counted, each repeat a retry; a local I/O error is not tried again."""
    import asyncio

    from conftest import free_port

    from s3q.store import RetryingStore, TransientError, open_store

    async def main() -> None:
        dead = open_store(
            f"s3://bucket/q?endpoint_url=http://127.0.0.1:{free_port()}&allow_http=true"
            "&access_key_id=a&secret_access_key=b&region=us-east-1"
        )
        assert isinstance(dead, RetryingStore)
        impatient = RetryingStore(dead.inner, patience=0.5)
        assert impatient.counts.errors == 0
        with pytest.raises(TransientError):
            await impatient.get("log/x")
        assert impatient.counts.errors >= 2
        assert impatient.counts.retries == impatient.counts.errors - 1
        await dead.close()
        (tmp_path / "not-a-dir").write_bytes(b"")
        local = open_store(str(tmp_path / "not-a-dir"))
        with pytest.raises(s3q.StoreError):
            await local.put("log/x", b"data")
        assert local.counts.errors == 1
        assert local.counts.retries == 0

    asyncio.run(main())
    with s3q.open(str(tmp_path / "fine")) as q:
        q.enqueue(b"x")
        assert q.stats().store_errors == 0


def test_untouched_messages_read_their_tables_back_from_the_log(
    env: StoreEnv, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no table kept in memory, runs read theirs back from the end of their log object
    (a header of over 64 KiB takes a second read) for status, peek, dequeue and reopen."""
    monkeypatch.setattr(s3q.state, "TABLE_BUDGET", 0)
    reads: list[int] = []
    appends = s3q.tables.appends

    async def counted(store, seq):  # type: ignore[no-untyped-def]
        reads.append(seq)
        return await appends(store, seq)

    monkeypatch.setattr(s3q.tables, "appends", counted)
    q = env.open(clock=clock)
    big = [(f"m{i}".encode() * (1 + i % 7), {"dedup_id": f"d{i:06d}"}) for i in range(20_000)]
    ids = q.enqueue_batch([{"payload": p, **kw} for p, kw in big])
    small = q.enqueue_batch([b"a", b"bb", {"payload": b"hi", "priority": 5}])
    assert q.status(ids[12_345]) == S.PENDING and reads
    assert [m.payload for m in q.peek(3)] == [b"hi", big[0][0], big[1][0]]
    q.close()

    q = env.open(clock=clock)
    reads.clear()
    [m] = q.dequeue()
    assert (m.id, m.payload) == (small[2], b"hi")
    got = q.dequeue(max_messages=1000)
    assert [m.payload for m in got] == [p for p, _ in big[:1000]] and reads
    q.complete_batch(got)
    q.close()

    q = env.open(clock=clock)  # replays the leases over runs with no table in memory
    rest = drain(q)
    assert [m.payload for m in rest] == [p for p, _ in big[1000:]] + [b"a", b"bb"]
    assert q.enqueue(b"again", dedup_id="d000007") == ids[7]
