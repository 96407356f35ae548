"""At most one writer commits to a queue; a fenced writer changes nothing.

(a) Fencing: another writer commits the next log sequence number behind the writer's back (a raw
    object on file:// and s3://, a real takeover after the lease lapsed on memory:// and s3://);
    the stale writer's next commit raises WriterFenced, so does every later call, and nothing it
    tried after losing is visible after reopening.
(b) Locking: opening a queue held by a live writer raises QueueLocked naming the holder.
"""

from __future__ import annotations

import contextlib
import time

import pytest
from conftest import FakeClock, LineReader, StoreEnv, drain, spawn_child

import s3q

S = s3q.MessageStatus

BIG_TTL = 600.0  # no background renewal can happen during a test; lapse it with the fake clock


def _intrude(env: StoreEnv, clock: FakeClock) -> str:
    """Play a rival writer: snapshot the queue, commit on the snapshot, then create the new log
    objects in the real queue with create-if-absent, as a rival writer would.

    Returns the id the rival enqueued.
    """
    before = set(env.log_keys())
    scratch = env.sibling()
    env.copy_to(scratch)
    with scratch.open(clock=clock) as rival:
        rival_id = rival.enqueue(b"rival")
    new = sorted(k for k in scratch.log_keys() if k not in before)
    assert new, "the rival's commit made no log object"
    expected_next = max(env.log_seqs()) + 1
    assert int(new[0][len("log/") :]) == expected_next
    for k in new:
        assert env.put_if_absent(k, scratch.read(k)), f"{k} already existed"
    return rival_id


def _assert_fenced_for_good(q, msg) -> None:
    calls = {
        "enqueue": lambda: q.enqueue(b"after"),
        "enqueue_batch": lambda: q.enqueue_batch([b"after-1", b"after-2"]),
        "dequeue": lambda: q.dequeue(max_messages=10),
        "complete": lambda: q.complete(msg),
        "fail": lambda: q.fail(msg, "x"),
        "extend": lambda: q.extend(msg, 100),
        "status": lambda: q.status(msg.id),
        "stats": lambda: q.stats(),
        "dead_letters": lambda: q.dead_letters(),
        "redrive": lambda: q.redrive(),
        "purge": lambda: q.purge(),
        "cleanup": lambda: q.cleanup(),
    }
    for name, call in calls.items():
        with pytest.raises(s3q.WriterFenced):
            call()
            pytest.fail(f"{name} did not raise WriterFenced")


FIRST_OPS = ["enqueue", "dequeue", "complete", "extend", "purge"]


@pytest.mark.parametrize("first_op", FIRST_OPS)
def test_raw_object_at_next_seq_fences_writer(
    raw_env: StoreEnv, clock: FakeClock, first_op: str
) -> None:
    q = raw_env.open(clock=clock, lease_ttl=BIG_TTL)
    keep = q.enqueue(b"keep")
    leased_id = q.enqueue(b"leased", priority=1)
    [leased] = q.dequeue(visibility_timeout=100)
    assert leased.id == leased_id
    rival_id = _intrude(raw_env, clock)

    with pytest.raises(s3q.WriterFenced):
        if first_op == "enqueue":
            q.enqueue(b"lost")
        elif first_op == "dequeue":
            q.dequeue()
        elif first_op == "complete":
            q.complete(leased)
        elif first_op == "extend":
            q.extend(leased, 0)
        elif first_op == "purge":
            q.purge()
    _assert_fenced_for_good(q, leased)
    with contextlib.suppress(s3q.S3QError):
        q.close()

    clock.advance(BIG_TTL + 1)  # let the stale writer's lease lapse without sleeping
    with raw_env.open(clock=clock) as q2:
        assert q2.status(keep) is S.PENDING
        assert q2.status(rival_id) is S.PENDING
        # the lease was granted before the fence: still there, and nothing completed it
        assert q2.status(leased_id) in (S.PROCESSING, S.PENDING)
        assert q2.status(leased_id) is not S.COMPLETED
        st = q2.stats()
        assert st.total_enqueued == 3
        assert (st.completed, st.dead) == (0, 0)
        payloads = sorted(m.payload for m in drain(q2))
        assert b"lost" not in payloads and b"after" not in payloads
        assert set(payloads) <= {b"keep", b"leased", b"rival"}
        # the new writer carries on after the rival's objects
        q2.enqueue(b"new")


def test_fenced_writer_lost_ops_not_visible_and_new_writer_continues(
    raw_env: StoreEnv, clock: FakeClock
) -> None:
    q = raw_env.open(clock=clock, lease_ttl=BIG_TTL)
    ids = q.enqueue_batch([b"a", b"b", b"c"])
    _intrude(raw_env, clock)
    seqs_after_intrusion = raw_env.log_seqs()
    with pytest.raises(s3q.WriterFenced):
        q.enqueue_batch([b"lost"] * 5)
    with pytest.raises(s3q.WriterFenced):
        q.enqueue(b"lost-2")
    # the stale writer created no further log objects
    assert raw_env.log_seqs() == seqs_after_intrusion
    with contextlib.suppress(s3q.S3QError):
        q.close()
    clock.advance(BIG_TTL + 1)
    with raw_env.open(clock=clock) as q2:
        assert q2.stats().total_enqueued == 4
        for mid in ids:
            assert q2.status(mid) is S.PENDING
        mid = q2.enqueue(b"next")
    with raw_env.open(clock=clock) as q3:
        assert q3.status(mid) is S.PENDING
        assert sorted(m.payload for m in drain(q3)) == [b"a", b"b", b"c", b"next", b"rival"]


@pytest.fixture(params=["memory", "s3"])
def lease_env(request, tmp_path):
    from conftest import make_env

    e = make_env(request.param, request, tmp_path)
    yield e
    e.close_all()


def test_takeover_after_lease_lapsed_fences_old_writer(lease_env: StoreEnv) -> None:
    clock = FakeClock()
    q1 = lease_env.open(clock=clock, lease_ttl=BIG_TTL)
    a = q1.enqueue(b"a")
    [leased] = q1.dequeue(visibility_timeout=10_000)
    with pytest.raises(s3q.QueueLocked):
        lease_env.open(clock=clock, lease_ttl=BIG_TTL)
    clock.advance(BIG_TTL + 1)
    q2 = lease_env.open(clock=clock, lease_ttl=BIG_TTL)
    b = q2.enqueue(b"b")

    with pytest.raises(s3q.WriterFenced):
        q1.enqueue(b"lost")
    _assert_fenced_for_good(q1, leased)
    with contextlib.suppress(s3q.S3QError):
        q1.close()

    # the stale writer's close did not disturb the new one
    c = q2.enqueue(b"c")
    assert q2.status(a) is S.PROCESSING
    q2.complete(leased)  # the lease granted by the old writer is honoured
    assert [m.id for m in q2.dequeue(max_messages=10)] == [b, c]
    assert q2.stats().total_enqueued == 3
    q2.close()
    with lease_env.open(clock=clock) as q3:
        assert q3.stats().total_enqueued == 3
        assert q3.status(a) is S.COMPLETED


@pytest.mark.parametrize("read", ["stats", "status", "peek"])
def test_a_writer_whose_lease_ran_out_answers_no_read_from_its_stale_index(
    lease_env: StoreEnv, read: str
) -> None:
    """A writer paused past its lease, whose queue was taken over meanwhile, is asked a read
    first (no commit of its own to find the rival's log object): WriterFenced, not its stale
    index's answer."""
    clock = FakeClock()
    q1 = lease_env.open(clock=clock, lease_ttl=BIG_TTL)
    a = q1.enqueue(b"a")
    clock.advance(BIG_TTL + 1)
    with lease_env.open(clock=clock, lease_ttl=BIG_TTL) as q2:
        q2.complete(q2.dequeue()[0])
        calls = {"stats": q1.stats, "status": lambda: q1.status(a), "peek": q1.peek}
        for call in (calls[read], *calls.values()):  # the first, and every one after it
            with pytest.raises(s3q.WriterFenced):
                call()
        assert q2.status(a) is S.COMPLETED
    with contextlib.suppress(s3q.S3QError):
        q1.close()


def test_takeover_with_short_lease_ttl(lease_env: StoreEnv) -> None:
    """A lapsed lease: lease_ttl=0.5 and a fake clock advanced past it.

    A background renewal may win the race against the second open; advancing again and retrying
    is bounded.
    """
    clock = FakeClock()
    q1 = lease_env.open(clock=clock, lease_ttl=0.5)
    q1.enqueue(b"a")
    q2 = None
    for _ in range(50):
        clock.advance(1.0)
        try:
            q2 = lease_env.open(clock=clock, lease_ttl=0.5)
            break
        except s3q.QueueLocked:
            continue
    assert q2 is not None, "the lapsed lease was never taken over"
    q2.enqueue(b"b")
    with pytest.raises(s3q.WriterFenced):
        q1.enqueue(b"lost")
    with pytest.raises(s3q.WriterFenced):
        q1.dequeue()
    with contextlib.suppress(s3q.S3QError):
        q1.close()
    assert sorted(m.payload for m in q2.dequeue(max_messages=10)) == [b"a", b"b"]
    q2.close()


# --------------------------------------------------------------------------- locking


def test_second_open_of_live_queue_raises_queue_locked(env: StoreEnv) -> None:
    q = env.open()
    q.enqueue(b"x")
    with pytest.raises(s3q.QueueLocked) as info:
        env.open()
    exc = info.value
    assert isinstance(exc.holder, str) and exc.holder.strip()
    assert exc.holder in str(exc)
    if env.kind != "file":
        assert exc.expires_at is not None and exc.expires_at > time.time()
    # the failed open changed nothing and the writer carries on
    assert q.stats().total_enqueued == 1
    q.enqueue(b"y")
    q.close()


def test_close_releases_the_queue_at_once(env: StoreEnv) -> None:
    q = env.open()
    mid = q.enqueue(b"x")
    q.close()
    q = env.open()  # no waiting for a lease to lapse
    assert q.status(mid) is S.PENDING
    q.close()


def test_queue_locked_across_processes(durable_env: StoreEnv) -> None:
    proc = spawn_child("child_hold.py", durable_env)
    reader = LineReader(proc)
    try:
        line = reader.next()
        assert line.startswith("ready "), line
        child_mid = line.split()[1]
        with pytest.raises(s3q.QueueLocked) as info:
            durable_env.open()
        assert info.value.holder.strip()
        assert info.value.holder in str(info.value)
    finally:
        proc.stdin.close()
    assert reader.next() == "closed"
    assert proc.wait(timeout=30) == 0
    with durable_env.open() as q:
        assert q.status(child_mid) is S.PENDING


def test_any_object_at_next_seq_fences_writer(raw_env: StoreEnv, clock: FakeClock) -> None:
    """Fencing rests on create-if-absent alone: even an object that is not a valid log entry,
    created at the next sequence number, stops the writer before it commits anything more."""
    q = raw_env.open(clock=clock, lease_ttl=BIG_TTL)
    q.enqueue(b"keep-this-payload")
    nxt = max(raw_env.log_seqs()) + 1
    assert raw_env.put_if_absent(f"log/{nxt:020d}", b"not a log object")
    with pytest.raises(s3q.WriterFenced):
        q.enqueue(b"lost")
    with pytest.raises(s3q.WriterFenced):
        q.enqueue(b"lost-again")
    assert raw_env.log_seqs()[-1] == nxt, "the fenced writer wrote past the foreign object"
    assert raw_env.read(f"log/{nxt:020d}") == b"not a log object"
    with contextlib.suppress(s3q.S3QError):
        q.close()
    clock.advance(BIG_TTL + 1)
    # the next writer refuses to open over a log object that is not one, naming it, rather than
    # skip it (what it held is unknown); and it is no transient fault to be retried
    with pytest.raises(s3q.StoreError, match=f"corrupt object log/{nxt:020d}") as refused:
        raw_env.open(clock=clock)
    assert not isinstance(refused.value, s3q.TransientError)
    assert raw_env.log_seqs()[-1] == nxt
    assert raw_env.read(f"log/{nxt:020d}") == b"not a log object"
    # what was acknowledged before it is still in place
    assert b"keep-this-payload" in raw_env.read(f"log/{nxt - 1:020d}")


class Jumping:
    """``clock``, jumped ``by`` seconds when first read: a new writer's clock that lapses the
    old writer's lease at the last moment, leaving it the least time to renew first."""

    def __init__(self, clock: FakeClock, by: float) -> None:
        self.clock, self.by, self.jumped = clock, by, False

    def __call__(self) -> float:
        if not self.jumped:
            self.jumped = True
            self.clock.advance(self.by)
        return self.clock()


def _takeover_under_load(lease_env: StoreEnv, ttl: float, open_within: float) -> None:
    """Writer 1 commits from six threads while writer 2 takes the queue over, the fake clock
    jumping past writer 1's lease as writer 2 first reads it (in its acquire, right before its
    compare-and-swap). Writer 1 renews as it commits, so it may still win that race (writer 2
    then gets QueueLocked and tries again); writer 2 must get the queue within ``open_within``
    seconds, writer 1 must then be fenced, and the queue hold exactly what was acknowledged:
    every enqueue that returned an id, none that raised."""
    import threading

    clock = FakeClock()
    q1 = lease_env.open(clock=clock, lease_ttl=ttl)
    results: dict[bytes, str | None] = {}
    lock = threading.Lock()
    enough = threading.Event()
    stop = threading.Event()
    errors: list[BaseException] = []
    unknown: set[bytes] = set()  # enqueues answered OutcomeUnknown

    def worker(t: int) -> None:
        i = 0
        while not stop.is_set():
            payload = f"{t}-{i}".encode()
            i += 1
            try:
                mid = q1.enqueue(payload)
            except s3q.WriterFenced:
                with lock:
                    results[payload] = None
                return
            except s3q.OutcomeUnknown:
                # its log object may have landed before writer 2 read the log, or not: a
                # writer whose lease ran out while it answered says so (never "done")
                with lock:
                    unknown.add(payload)
                return
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)
                return
            with lock:
                results[payload] = mid
                if len(results) >= 100:
                    enough.set()

    opened: list[object] = []

    def take_over() -> None:
        for _ in range(100):
            try:
                opened.append(lease_env.open(clock=Jumping(clock, ttl + 1), lease_ttl=ttl))
                return
            except s3q.QueueLocked:
                continue  # writer 1 renewed just in time: lapse it again
            except BaseException as e:
                errors.append(e)
                return

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    taker = threading.Thread(target=take_over)
    try:
        assert enough.wait(60), "writer 1 made no progress"
        taker.start()
        taker.join(open_within)
        in_time = not taker.is_alive()
    finally:
        stop.set()
        for t in threads:
            t.join(120)
        taker.join(120)
    assert not errors, errors
    assert in_time, f"writer 2's attempts to open took more than {open_within} s"
    acked = {p: mid for p, mid in results.items() if mid is not None}
    refused = {p for p, mid in results.items() if mid is None}
    assert opened, "writer 2 never got the queue: every open was refused"
    q2 = opened[0]
    extra = q2.enqueue(b"from writer 2")
    with pytest.raises(s3q.WriterFenced):
        q1.enqueue(b"late")
    with contextlib.suppress(s3q.S3QError):
        q1.close()
    q2.close()
    with lease_env.open(clock=clock) as q3:
        got = {m.payload: m.id for m in drain(q3)}
    assert got.pop(b"from writer 2") == extra
    assert b"late" not in got
    lost = set(acked) - set(got)
    assert not lost, f"{len(lost)} acknowledged enqueues lost, e.g. {sorted(lost)[:3]}"
    for payload in unknown:  # applied or not, but never twice
        got.pop(payload, None)
    assert got == acked, f"refused enqueues visible: {sorted(set(got) & refused)[:3]}"


def test_takeover_under_load_short_lease(lease_env: StoreEnv) -> None:
    """lease_ttl=0.5: writer 1's background renewal notices the takeover within ttl/3."""
    _takeover_under_load(lease_env, ttl=0.5, open_within=20.0)


def test_takeover_under_load_long_lease() -> None:
    """lease_ttl=600: no background renewal happens during the test, so writer 1 learns of the
    takeover only from the log or by checking its own lease before committing. A writer whose
    lease has lapsed by its own clock must not keep a new holder spinning."""
    from conftest import MemoryEnv

    env = MemoryEnv()
    try:
        _takeover_under_load(env, ttl=BIG_TTL, open_within=10.0)
    finally:
        env.close_all()
