"""Every store keeps the whole queue state across close + reopen: messages in every state,
leases, payloads, settings, and what cleanup and purge removed."""

from __future__ import annotations

import pytest
from conftest import FakeClock, StoreEnv, drain, state_of

import s3q

S = s3q.MessageStatus


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


def test_untouched_messages_read_their_tables_back_from_the_log(
    env: StoreEnv, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no table kept in memory, runs read theirs back from the end of their log object
    (a header of over 64 KiB takes a second read) for status, peek, dequeue and reopen."""
    monkeypatch.setattr(s3q.index.state, "TABLE_BUDGET", 0)
    reads: list[int] = []
    appends = s3q.log.tables.appends

    async def counted(store, seq):  # type: ignore[no-untyped-def]
        reads.append(seq)
        return await appends(store, seq)

    monkeypatch.setattr(s3q.log.tables, "appends", counted)
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
