"""Queue semantics, on every store, with the injectable fake clock for all time decisions."""

from __future__ import annotations

import threading

import pytest
from conftest import T0, FakeClock, drain

import s3q

S = s3q.MessageStatus


# --------------------------------------------------------------------------- basics


def test_enqueue_dequeue_complete_roundtrip(make_queue, clock: FakeClock) -> None:
    q = make_queue()
    clock.advance(12.5)
    mid = q.enqueue(
        b"hello",
        priority=7,
        group=None,
        dedup_id="d-1",
        attributes={"kind": "greeting", "lang": "en"},
    )
    assert isinstance(mid, str) and mid
    assert q.status(mid) is S.PENDING

    [m] = q.dequeue()
    assert isinstance(m, s3q.Message)
    assert m.id == mid
    assert m.payload == b"hello"
    assert isinstance(m.payload, bytes)
    assert m.priority == 7
    assert m.attempts == 1
    assert m.enqueued_at == pytest.approx(T0 + 12.5)
    assert isinstance(m.receipt, str) and m.receipt
    assert m.group is None
    assert m.dedup_id == "d-1"
    assert m.attributes == {"kind": "greeting", "lang": "en"}
    assert m.last_error is None
    assert q.status(mid) is S.PROCESSING

    q.complete(m)
    assert q.status(mid) is S.COMPLETED
    assert q.dequeue() == []
    st = q.stats()
    assert (st.pending, st.processing, st.completed, st.total_enqueued) == (0, 0, 1, 1)


def test_complete_accepts_receipt_string(make_queue) -> None:
    q = make_queue()
    mid = q.enqueue(b"x")
    [m] = q.dequeue()
    q.complete(m.receipt)
    assert q.status(mid) is S.COMPLETED


def test_ids_are_unique(make_queue) -> None:
    q = make_queue()
    ids = [q.enqueue(b"p") for _ in range(50)] + q.enqueue_batch([b"p"] * 50)
    assert len(set(ids)) == 100


def test_empty_payload_roundtrips(make_queue) -> None:
    q = make_queue()
    mid = q.enqueue(b"")
    [m] = q.dequeue()
    assert (m.id, m.payload) == (mid, b"")


def test_binary_payload_roundtrips_exactly(make_queue) -> None:
    q = make_queue()
    payload = bytes(range(256)) * 40
    q.enqueue(payload)
    [m] = q.dequeue()
    assert m.payload == payload


def test_dequeue_on_empty_queue_returns_empty_list(make_queue) -> None:
    q = make_queue()
    assert q.dequeue() == []
    assert q.dequeue(max_messages=10) == []


def test_status_of_unknown_id_raises_message_not_found(make_queue) -> None:
    q = make_queue()
    with pytest.raises(s3q.MessageNotFound):
        q.status("no-such-id")


# --------------------------------------------------------------------------- ordering


def test_priority_higher_first_fifo_within_priority(make_queue) -> None:
    q = make_queue()
    spec = [(0, "a"), (5, "b"), (0, "c"), (255, "d"), (5, "e"), (1, "f"), (255, "g"), (0, "h")]
    for prio, name in spec:
        q.enqueue(name.encode(), priority=prio)
    got = [q.dequeue()[0].payload.decode() for _ in spec]
    assert got == ["d", "g", "b", "e", "f", "a", "c", "h"]
    assert q.dequeue() == []


def test_dequeue_max_messages_returns_in_order_and_respects_limit(make_queue) -> None:
    q = make_queue()
    ids = [q.enqueue(str(i).encode(), priority=i % 3) for i in range(12)]
    expected = sorted(range(12), key=lambda i: (-(i % 3), i))
    first = q.dequeue(max_messages=5)
    assert [m.id for m in first] == [ids[i] for i in expected[:5]]
    rest = q.dequeue(max_messages=100)
    assert [m.id for m in rest] == [ids[i] for i in expected[5:]]


def test_redelivered_message_keeps_its_place_in_order(make_queue, clock: FakeClock) -> None:
    q = make_queue()
    a = q.enqueue(b"a")
    b = q.enqueue(b"b")
    [m] = q.dequeue(visibility_timeout=5)
    assert m.id == a
    clock.advance(5.5)
    got = q.dequeue(max_messages=2)
    assert [x.id for x in got] == [a, b]


def test_batch_enqueue_items_and_dicts(make_queue, clock: FakeClock) -> None:
    q = make_queue()
    ids = q.enqueue_batch(
        [
            b"plain",
            {"payload": b"hi", "priority": 9, "attributes": {"k": "v"}},
            {"payload": b"later", "delay": 10.0},
            {"payload": b"grouped", "group": "g", "dedup_id": "dd"},
        ]
    )
    assert len(ids) == 4 and len(set(ids)) == 4
    assert q.status(ids[2]) is S.DELAYED
    got = q.dequeue(max_messages=10)
    assert [m.id for m in got] == [ids[1], ids[0], ids[3]]
    assert got[0].attributes == {"k": "v"} and got[0].priority == 9
    assert got[2].group == "g" and got[2].dedup_id == "dd"
    clock.advance(10.5)
    [m] = q.dequeue()
    assert m.id == ids[2] and m.payload == b"later"


# --------------------------------------------------------------------------- delay


def test_delay_keeps_message_delayed_until_due(make_queue, clock: FakeClock) -> None:
    q = make_queue()
    mid = q.enqueue(b"x", delay=10.0)
    assert q.status(mid) is S.DELAYED
    assert q.stats().delayed == 1
    assert q.dequeue() == []
    clock.advance(9.9)
    assert q.status(mid) is S.DELAYED
    assert q.dequeue() == []
    clock.advance(0.2)
    assert q.status(mid) is S.PENDING
    st = q.stats()
    assert (st.delayed, st.pending) == (0, 1)
    [m] = q.dequeue()
    assert m.id == mid and m.attempts == 1


def test_delayed_message_does_not_block_later_ones(make_queue, clock: FakeClock) -> None:
    q = make_queue()
    q.enqueue(b"later", priority=9, delay=30)
    now = q.enqueue(b"now", priority=0)
    assert [m.id for m in q.dequeue(max_messages=5)] == [now]


# --------------------------------------------------------------------------- leases


def test_leased_message_not_handed_out_until_lease_expires(make_queue, clock: FakeClock) -> None:
    q = make_queue()
    mid = q.enqueue(b"x")
    [m1] = q.dequeue(visibility_timeout=5)
    assert q.status(mid) is S.PROCESSING
    assert q.stats().processing == 1
    clock.advance(4.9)
    assert q.dequeue(max_messages=10) == []
    clock.advance(0.2)
    assert q.status(mid) is S.PENDING
    [m2] = q.dequeue()
    assert m2.id == mid
    assert m2.attempts == 2
    assert m2.receipt != m1.receipt


def test_default_visibility_timeout_option(make_queue, clock: FakeClock) -> None:
    q = make_queue(visibility_timeout=7.0)
    mid = q.enqueue(b"x")
    q.dequeue()
    clock.advance(6.9)
    assert q.status(mid) is S.PROCESSING
    clock.advance(0.2)
    assert q.status(mid) is S.PENDING


def test_stale_receipt_after_redelivery_is_rejected_and_changes_nothing(
    make_queue, clock: FakeClock
) -> None:
    q = make_queue()
    mid = q.enqueue(b"x")
    [old] = q.dequeue(visibility_timeout=5)
    clock.advance(6)
    q.dequeue(visibility_timeout=5)  # redelivered: a new receipt
    before = q.stats()
    with pytest.raises(s3q.ReceiptExpired):
        q.complete(old)
    with pytest.raises(s3q.ReceiptExpired):
        q.fail(old, "nope")
    with pytest.raises(s3q.ReceiptExpired):
        q.extend(old, 100)
    assert q.status(mid) is S.PROCESSING
    after = q.stats()
    assert (after.processing, after.completed, after.commits) == (
        before.processing,
        before.completed,
        before.commits,
    )
    # the new lease is untouched: it still expires on schedule
    clock.advance(5.1)
    assert q.status(mid) is S.PENDING
    [again] = q.dequeue()
    q.complete(again)
    assert q.status(mid) is S.COMPLETED


def test_receipt_of_completed_message_is_expired(make_queue) -> None:
    q = make_queue()
    q.enqueue(b"x")
    [m] = q.dequeue()
    q.complete(m)
    with pytest.raises(s3q.ReceiptExpired):
        q.complete(m)


def test_unknown_receipt_raises_receipt_expired(make_queue) -> None:
    q = make_queue()
    q.enqueue(b"x")
    with pytest.raises(s3q.ReceiptExpired):
        q.complete("definitely-not-a-receipt")


def test_extend_prolongs_lease(make_queue, clock: FakeClock) -> None:
    q = make_queue()
    mid = q.enqueue(b"x")
    [m] = q.dequeue(visibility_timeout=5)
    clock.advance(4)
    q.extend(m, 10)  # lease now ends at +14
    clock.advance(9.8)
    assert q.status(mid) is S.PROCESSING
    assert q.dequeue() == []
    q.complete(m)  # the receipt survives extend
    assert q.status(mid) is S.COMPLETED


def test_extend_lease_ends_seconds_from_now(make_queue, clock: FakeClock) -> None:
    q = make_queue()
    mid = q.enqueue(b"x")
    [m] = q.dequeue(visibility_timeout=100)
    clock.advance(10)
    q.extend(m, 3)  # shortening is allowed: ends 3 s from now
    clock.advance(3.1)
    assert q.status(mid) is S.PENDING


def test_extend_zero_makes_visible_at_once(make_queue) -> None:
    q = make_queue()
    mid = q.enqueue(b"x")
    [m] = q.dequeue(visibility_timeout=60)
    q.extend(m, 0)
    assert q.status(mid) is S.PENDING
    [m2] = q.dequeue()
    assert m2.id == mid and m2.attempts == 2


def test_extend_revives_a_lapsed_lease_nobody_took_since(make_queue, clock: FakeClock) -> None:
    q = make_queue()
    mid = q.enqueue(b"x")
    [m] = q.dequeue(visibility_timeout=5)
    clock.advance(6)
    with pytest.raises(s3q.ReceiptExpired):
        q.extend(m, 30)  # a lapsed lease is not extended unless asked to revive it
    assert q.status(mid) is S.PENDING
    q.extend(m, 30, revive=True)
    assert q.status(mid) is S.PROCESSING
    assert q.dequeue() == []
    q.complete(m)  # the same receipt still holds the message
    assert q.status(mid) is S.COMPLETED

    other = q.enqueue(b"y")
    [first] = q.dequeue(visibility_timeout=5)
    clock.advance(6)
    [second] = q.dequeue(visibility_timeout=5)  # delivered again: the first lease is gone
    with pytest.raises(s3q.ReceiptExpired):
        q.extend(first, 30, revive=True)
    q.complete(second)
    assert q.status(other) is S.COMPLETED
    with pytest.raises(s3q.InvalidArgument):
        q.extend(second, 30, revive="yes")


def test_first_delivered_at_is_the_first_counted_delivery(make_queue, clock: FakeClock) -> None:
    """Set by the first dequeue, kept by later ones, unset by a release that uncounts the
    only delivery; from the log, so a reopened queue says the same."""
    q = make_queue()
    mid, other = q.enqueue_batch([b"x", b"y"])
    assert [m.first_delivered_at for m in q.peek()] == [None, None]
    start = clock()
    [m, n] = q.dequeue(2, visibility_timeout=5)
    assert m.first_delivered_at == n.first_delivered_at == start
    q.release(n)
    clock.advance(6)
    [again, n2] = q.dequeue(2)
    assert again.id == mid and again.attempts == 2 and again.first_delivered_at == start
    assert n2.id == other and n2.attempts == 1 and n2.first_delivered_at == start + 6
    q.close()
    q = make_queue()
    clock.advance(3600)  # the leases lapse: peek shows the messages again
    assert {m.id: m.first_delivered_at for m in q.peek()} == {mid: start, other: start + 6}


def test_concurrent_consumers_never_share_a_lease(make_queue) -> None:
    q = make_queue()
    ids = q.enqueue_batch([str(i).encode() for i in range(300)])
    got: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(6)

    def worker() -> None:
        barrier.wait()
        while True:
            batch = q.dequeue(max_messages=7)
            if not batch:
                return
            with lock:
                got.extend(m.id for m in batch)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(got) == sorted(ids)
    assert len(got) == len(set(got))
    assert q.stats().processing == 300


# --------------------------------------------------------------------------- fail / retry / dead


def test_fail_schedules_retry_with_last_error(make_queue, clock: FakeClock) -> None:
    q = make_queue(max_attempts=3, retry_delay=1.0, retry_delay_max=5.0)
    mid = q.enqueue(b"x")
    [m] = q.dequeue()
    q.fail(m, "boom")
    assert q.status(mid) is S.RETRY
    assert q.stats().retry == 1
    assert q.dequeue() == []
    clock.advance(5.1)  # past retry_delay_max: backoff is over whatever the jitter
    assert q.status(mid) is S.PENDING
    [m2] = q.dequeue()
    assert m2.id == mid
    assert m2.attempts == 2
    assert m2.last_error == "boom"


def test_fail_after_max_attempts_goes_dead(make_queue, clock: FakeClock) -> None:
    q = make_queue(max_attempts=2, retry_delay=0.5, retry_delay_max=2.0)
    mid = q.enqueue(b"x")
    [m] = q.dequeue()
    q.fail(m, "first")
    clock.advance(2.1)
    [m] = q.dequeue()
    assert m.attempts == 2
    q.fail(m, "second")
    assert q.status(mid) is S.DEAD
    clock.advance(1000)
    assert q.dequeue() == []
    st = q.stats()
    assert (st.dead, st.pending, st.retry) == (1, 0, 0)
    [d] = q.dead_letters()
    assert d.id == mid and d.payload == b"x" and d.attempts == 2
    assert d.last_error == "second"


def test_max_attempts_one_fail_goes_dead_immediately(make_queue) -> None:
    q = make_queue(max_attempts=1)
    mid = q.enqueue(b"x")
    [m] = q.dequeue()
    q.fail(m, "bad")
    assert q.status(mid) is S.DEAD


def test_expired_lease_at_max_attempts_goes_dead(make_queue, clock: FakeClock) -> None:
    q = make_queue(max_attempts=2)
    mid = q.enqueue(b"x")
    q.dequeue(visibility_timeout=5)
    clock.advance(5.5)
    assert q.status(mid) is S.PENDING
    [m] = q.dequeue(visibility_timeout=5)
    assert m.attempts == 2
    clock.advance(5.5)
    assert q.status(mid) is S.DEAD
    assert q.dequeue() == []
    assert [d.id for d in q.dead_letters()] == [mid]


def test_fail_without_error_message(make_queue, clock: FakeClock) -> None:
    q = make_queue(retry_delay_max=2.0)
    mid = q.enqueue(b"x")
    [m] = q.dequeue()
    q.fail(m)
    assert q.status(mid) is S.RETRY


def test_retry_backoff_is_bounded_by_retry_delay_max(make_queue, clock: FakeClock) -> None:
    q = make_queue(max_attempts=10, retry_delay=3.0, retry_delay_max=3.0)  # 3, 6, 12... capped
    mid = q.enqueue(b"x")
    for attempt in range(1, 5):
        [m] = q.dequeue()
        assert m.attempts == attempt
        q.fail(m, f"e{attempt}")
        assert q.status(mid) is S.RETRY
        clock.advance(3.1)


def test_redrive_all_dead(make_queue, clock: FakeClock) -> None:
    q = make_queue(max_attempts=1)
    ids = [q.enqueue(f"m{i}".encode()) for i in range(3)]
    for m in q.dequeue(max_messages=3):
        q.fail(m, "x")
    assert q.stats().dead == 3
    assert q.redrive() == 3
    for mid in ids:
        assert q.status(mid) is S.PENDING
    got = q.dequeue(max_messages=10)
    assert [m.id for m in got] == ids
    assert all(m.attempts == 1 for m in got)  # attempts reset to 0, then one delivery
    assert q.stats().dead == 0


def test_redrive_selected_ids(make_queue) -> None:
    q = make_queue(max_attempts=1)
    ids = [q.enqueue(f"m{i}".encode()) for i in range(3)]
    for m in q.dequeue(max_messages=3):
        q.fail(m, "x")
    assert q.redrive(ids=[ids[1]]) == 1
    assert q.status(ids[0]) is S.DEAD
    assert q.status(ids[1]) is S.PENDING
    assert q.status(ids[2]) is S.DEAD
    assert {d.id for d in q.dead_letters()} == {ids[0], ids[2]}


def test_redrive_nothing_dead_returns_zero(make_queue) -> None:
    q = make_queue()
    q.enqueue(b"x")
    assert q.redrive() == 0


def test_dead_letters_limit(make_queue) -> None:
    q = make_queue(max_attempts=1)
    q.enqueue_batch([b"x"] * 5)
    for m in q.dequeue(max_messages=5):
        q.fail(m, "e")
    assert len(q.dead_letters(limit=2)) == 2
    assert len(q.dead_letters()) == 5


# --------------------------------------------------------------------------- dedup


def test_dedup_within_window_returns_first_id(make_queue, clock: FakeClock) -> None:
    q = make_queue(dedup_window=300.0)
    a = q.enqueue(b"one", dedup_id="k")
    clock.advance(100)
    b = q.enqueue(b"two", dedup_id="k")
    assert b == a
    st = q.stats()
    assert (st.pending, st.total_enqueued) == (1, 1)
    [m] = q.dequeue(max_messages=10)
    assert m.payload == b"one"


def test_dedup_applies_after_completion_within_window(make_queue, clock: FakeClock) -> None:
    q = make_queue(dedup_window=300.0)
    a = q.enqueue(b"one", dedup_id="k")
    [m] = q.dequeue()
    q.complete(m)
    assert q.enqueue(b"again", dedup_id="k") == a
    assert q.dequeue() == []


def test_dedup_after_window_enqueues_anew(make_queue, clock: FakeClock) -> None:
    q = make_queue(dedup_window=300.0)
    a = q.enqueue(b"one", dedup_id="k")
    clock.advance(301)
    b = q.enqueue(b"two", dedup_id="k")
    assert b != a
    assert q.stats().total_enqueued == 2
    assert {m.payload for m in q.dequeue(max_messages=10)} == {b"one", b"two"}


def test_dedup_ids_are_independent(make_queue) -> None:
    q = make_queue()
    a = q.enqueue(b"1", dedup_id="a")
    b = q.enqueue(b"2", dedup_id="b")
    c = q.enqueue(b"3")
    d = q.enqueue(b"4")
    assert len({a, b, c, d}) == 4


def test_dedup_within_one_batch(make_queue) -> None:
    q = make_queue()
    ids = q.enqueue_batch(
        [{"payload": b"1", "dedup_id": "z"}, {"payload": b"2", "dedup_id": "z"}, b"3"]
    )
    assert ids[0] == ids[1] != ids[2]
    assert q.stats().total_enqueued == 2


# --------------------------------------------------------------------------- groups


def test_group_delivers_one_at_a_time_in_order(make_queue) -> None:
    q = make_queue()
    g = [q.enqueue(f"g{i}".encode(), group="G") for i in range(3)]
    other = q.enqueue(b"other")
    first = q.dequeue(max_messages=10)
    assert [m.id for m in first] == [g[0], other]
    assert q.dequeue(max_messages=10) == []
    q.complete(first[0])
    [m] = q.dequeue(max_messages=10)
    assert m.id == g[1] and m.group == "G"
    assert q.dequeue(max_messages=10) == []
    q.complete(m)
    [m] = q.dequeue(max_messages=10)
    assert m.id == g[2]


def test_per_group_delivers_a_groups_messages_together_in_order(
    make_queue, clock: FakeClock
) -> None:
    q = make_queue()
    a = [q.enqueue(f"a{i}".encode(), group="A") for i in range(4)]
    b = q.enqueue(b"b0", group="B")
    plain = q.enqueue(b"plain")
    first = q.dequeue(10, visibility_timeout=30, per_group=3)
    assert [m.id for m in first] == [*a[:3], b, plain]
    assert q.dequeue(10, per_group=3) == []  # A's fourth waits while the three are leased
    q.complete(first[0])
    assert q.dequeue(10, per_group=3) == []  # ... and while any of them is
    q.complete_batch(first[1:3])
    [last] = q.dequeue(10, per_group=3)
    assert last.id == a[3]
    q.complete_batch([last, first[3], first[4]])

    c = [q.enqueue(f"c{i}".encode(), group="C") for i in range(2)]
    held = q.dequeue(10, visibility_timeout=30, per_group=10)
    assert [m.id for m in held] == c
    q.extend(held[1], 100)  # the second stays leased after the first's lease runs out
    clock.advance(31)
    assert q.status(c[0]) is S.PENDING
    assert q.dequeue(10, per_group=10) == [], "the head waits for the message after it"
    clock.advance(70)
    again = q.dequeue(10, per_group=10)
    assert [(m.id, m.attempts) for m in again] == [(c[0], 2), (c[1], 2)]
    for bad in (0, 11, 2.5):
        with pytest.raises(s3q.InvalidArgument):
            q.dequeue(1, per_group=bad)


@pytest.mark.parametrize("ending", ["complete", "release", "fail"])
def test_a_head_waiting_for_the_message_after_it_goes_once_that_ones_lease_ends(
    make_queue, ending: str
) -> None:
    """The head of a group given back while the message delivered after it is leased waits
    for that lease; once it ends early (completed, released, failed), the head goes at once,
    not at the end of the lease it waited for."""
    q = make_queue(retry_delay=50.0, retry_delay_max=50.0)
    a, b = (q.enqueue(name, group="G") for name in (b"a", b"b"))
    first, second = q.dequeue(10, visibility_timeout=30, per_group=2)
    q.release(first)
    assert q.dequeue(10, per_group=2) == [], "the head waits for the message after it"
    getattr(q, ending)(second)
    got = [m.id for m in q.dequeue(10, per_group=2)]
    assert got == ([a, b] if ending == "release" else [a])  # (a failed b waits for its retry)


def test_group_order_beats_priority(make_queue) -> None:
    q = make_queue()
    low = q.enqueue(b"low-first", group="G", priority=0)
    high = q.enqueue(b"high-second", group="G", priority=200)
    [m] = q.dequeue(max_messages=10)
    assert m.id == low
    q.complete(m)
    [m] = q.dequeue(max_messages=10)
    assert m.id == high


def test_group_blocked_while_head_in_retry(make_queue, clock: FakeClock) -> None:
    q = make_queue(retry_delay_max=2.0)
    a = q.enqueue(b"a", group="G")
    b = q.enqueue(b"b", group="G")
    [m] = q.dequeue()
    q.fail(m, "e")
    assert q.dequeue(max_messages=10) == []
    clock.advance(2.1)
    [m] = q.dequeue(max_messages=10)
    assert m.id == a
    q.complete(m)
    [m] = q.dequeue(max_messages=10)
    assert m.id == b


def test_group_advances_after_head_dies(make_queue) -> None:
    q = make_queue(max_attempts=1)
    a = q.enqueue(b"a", group="G")
    b = q.enqueue(b"b", group="G")
    [m] = q.dequeue(max_messages=10)
    assert m.id == a
    q.fail(m, "e")
    assert q.status(a) is S.DEAD
    [m] = q.dequeue(max_messages=10)
    assert m.id == b


def test_a_group_head_buried_on_expiry_frees_the_next_in_the_same_dequeue(
    make_queue, clock: FakeClock
) -> None:
    q = make_queue(max_attempts=1, visibility_timeout=5)
    head = q.enqueue(b"head", group="g")
    other = q.enqueue(b"other", priority=1)
    second = q.enqueue(b"second", group="g", priority=9)
    [m] = q.dequeue()
    assert m.id == other  # priority 1 before the head (priority 0)
    [m] = q.dequeue()
    assert m.id == head
    clock.advance(6)  # the head's only lease runs out: it dies, and frees "second" at once
    assert [m.id for m in q.dequeue(max_messages=10)] == [second]
    assert q.status(head) == S.DEAD


def test_group_head_redelivered_after_lease_expiry(make_queue, clock: FakeClock) -> None:
    q = make_queue()
    a = q.enqueue(b"a", group="G")
    q.enqueue(b"b", group="G")
    q.dequeue(visibility_timeout=5)
    clock.advance(5.1)
    [m] = q.dequeue(max_messages=10)
    assert m.id == a and m.attempts == 2


def test_groups_are_independent(make_queue) -> None:
    q = make_queue()
    a1 = q.enqueue(b"a1", group="A")
    q.enqueue(b"a2", group="A")
    b1 = q.enqueue(b"b1", group="B")
    q.enqueue(b"b2", group="B")
    assert [m.id for m in q.dequeue(max_messages=10)] == [a1, b1]


# ------------------------------------------------------------------ depth, retention, purge


def test_max_queue_depth_raises_queue_full(make_queue) -> None:
    q = make_queue(max_queue_depth=3)
    ids = [q.enqueue(b"x") for _ in range(3)]
    before = q.stats()
    with pytest.raises(s3q.QueueFull):
        q.enqueue(b"y")
    with pytest.raises(s3q.QueueFull):
        q.enqueue_batch([b"y"])
    assert q.stats().total_enqueued == before.total_enqueued
    assert q.stats().pending == 3
    [m] = q.dequeue()
    q.complete(m)
    ids.append(q.enqueue(b"z"))  # room again once one is completed
    assert q.status(ids[-1]) is S.PENDING


def test_batch_over_depth_enqueues_nothing(make_queue) -> None:
    q = make_queue(max_queue_depth=5)
    q.enqueue_batch([b"x"] * 3)
    with pytest.raises(s3q.QueueFull):
        q.enqueue_batch([b"y"] * 3)
    st = q.stats()
    assert (st.pending, st.total_enqueued) == (3, 3)


def test_completed_retention_and_cleanup(make_queue, clock: FakeClock) -> None:
    q = make_queue(completed_retention=100.0)
    mid = q.enqueue(b"x")
    keep = q.enqueue(b"y")
    [m] = q.dequeue()
    q.complete(m)
    clock.advance(99)
    assert q.cleanup() == 0
    assert q.status(mid) is S.COMPLETED
    clock.advance(2)
    assert q.cleanup() == 1
    with pytest.raises(s3q.MessageNotFound):
        q.status(mid)
    assert q.status(keep) is S.PENDING
    assert q.stats().completed == 0


def test_cleanup_prunes_expired_dedup_entries(make_queue, clock: FakeClock) -> None:
    q = make_queue(dedup_window=10.0, completed_retention=10_000.0)
    a = q.enqueue(b"x", dedup_id="k")
    clock.advance(11)
    assert q.cleanup() >= 1  # the expired dedup entry
    assert q.status(a) is S.PENDING
    assert q.enqueue(b"y", dedup_id="k") != a


def test_purge_removes_everything_not_completed(make_queue, clock: FakeClock) -> None:
    q = make_queue(max_attempts=1, retry_delay_max=2.0)
    done = q.enqueue(b"done")
    [m] = q.dequeue()
    q.complete(m)
    q.enqueue(b"dead")
    [m] = q.dequeue()
    q.fail(m, "e")
    pending = q.enqueue(b"pending")
    delayed = q.enqueue(b"delayed", delay=50)
    q.enqueue(b"processing", priority=9)
    [proc] = q.dequeue()
    assert proc.payload == b"processing"
    st = q.stats()
    assert (st.pending, st.delayed, st.processing, st.dead, st.completed) == (1, 1, 1, 1, 1)
    assert q.purge() == 4
    st = q.stats()
    assert (st.pending, st.delayed, st.processing, st.retry, st.dead) == (0, 0, 0, 0, 0)
    assert st.completed == 1
    assert q.status(done) is S.COMPLETED
    for mid in (pending, delayed, proc.id):
        with pytest.raises(s3q.MessageNotFound):
            q.status(mid)
    clock.advance(100)
    assert q.dequeue(max_messages=10) == []
    assert q.dead_letters() == []
    with pytest.raises(s3q.ReceiptExpired):  # its message was purged: the receipt is stale
        q.complete(proc)
    assert q.purge() == 0


def test_purge_counts_retry_messages(make_queue) -> None:
    q = make_queue(max_attempts=5)
    q.enqueue(b"x")
    [m] = q.dequeue()
    q.fail(m, "e")
    assert q.purge() == 1
    assert q.stats().retry == 0


# --------------------------------------------------------------------------- stats


def test_stats_counts_every_state(make_queue, clock: FakeClock) -> None:
    q = make_queue(max_attempts=2, retry_delay_max=2.0)
    q.enqueue_batch([b"p"] * 4)
    q.enqueue(b"d", delay=100)
    ms = q.dequeue(max_messages=3)
    q.complete(ms[0])
    q.fail(ms[1], "r")
    st = q.stats()
    assert isinstance(st, s3q.QueueStats)
    assert (st.pending, st.delayed, st.processing, st.retry, st.completed, st.dead) == (
        1,
        1,
        1,
        1,
        1,
        0,
    )
    assert st.total_enqueued == 5
    assert st.commits >= 1
    assert st.mean_ops_per_commit > 0
    assert st.store_requests >= st.commits


def test_mean_ops_per_commit_reflects_batches(make_queue) -> None:
    q = make_queue()
    c0 = q.stats().commits
    q.enqueue_batch([b"x"] * 500)
    st = q.stats()
    assert st.commits - c0 <= 2
    assert st.mean_ops_per_commit > 1


def test_read_only_calls_make_no_commits(make_queue) -> None:
    q = make_queue(lease_ttl=3600.0)
    mid = q.enqueue(b"x")
    c = q.stats().commits
    for _ in range(20):
        q.status(mid)
        q.stats()
        q.dead_letters()
    assert q.stats().commits == c


def test_idle_queue_makes_no_store_requests(make_queue) -> None:
    q = make_queue(lease_ttl=3600.0)
    mid = q.enqueue(b"x")
    [m] = q.dequeue()
    q.complete(m)
    r0 = q.stats().store_requests
    for _ in range(20):
        assert q.dequeue() == []
        q.status(mid)
        q.stats()
    assert q.stats().store_requests == r0


def test_context_manager_closes(env) -> None:
    with env.open() as q:
        mid = q.enqueue(b"x")
    with env.open() as q2:
        assert q2.status(mid) is S.PENDING


def test_calls_after_close_raise(make_queue) -> None:
    q = make_queue()
    q.enqueue(b"x")
    q.close()
    with pytest.raises(s3q.QueueClosed, match="is closed"):
        q.enqueue(b"y")
    with pytest.raises(s3q.QueueClosed, match="is closed"):
        q.dequeue()


def test_message_status_enum_members() -> None:
    names = {m.name for m in s3q.MessageStatus}
    assert names == {"PENDING", "DELAYED", "PROCESSING", "RETRY", "COMPLETED", "DEAD"}


def test_error_hierarchy() -> None:
    for name in (
        "MessageNotFound",
        "MessageTooLarge",
        "QueueFull",
        "InvalidPriority",
        "ReceiptExpired",
        "QueueLocked",
        "WriterFenced",
        "StoreError",
        "InvalidConfig",
        "InvalidArgument",
    ):
        assert issubclass(getattr(s3q, name), s3q.S3QError), name
    for name in ("MessageTooLarge", "InvalidPriority", "InvalidConfig"):
        assert issubclass(getattr(s3q, name), s3q.InvalidArgument), name
    assert issubclass(s3q.InvalidArgument, ValueError)


def test_complete_batch(make_queue) -> None:
    q = make_queue()
    ids = q.enqueue_batch([b"a", b"b", b"c"])
    ms = q.dequeue(max_messages=3)
    q.complete_batch([ms[0], ms[1].receipt, ms[2]])
    for mid in ids:
        assert q.status(mid) is S.COMPLETED


def test_complete_batch_with_stale_receipt_completes_nothing(make_queue, clock) -> None:
    q = make_queue()
    ids = q.enqueue_batch([b"a", b"b"])
    ms = q.dequeue(max_messages=2)
    with pytest.raises(s3q.ReceiptExpired):
        q.complete_batch([ms[0], "bogus-receipt"])
    assert q.status(ids[0]) is S.PROCESSING
    assert q.status(ids[1]) is S.PROCESSING


def test_dequeue_completes_the_last_batch_in_the_commit_of_the_next(make_queue) -> None:
    q = make_queue()
    ids = q.enqueue_batch([b"%d" % i for i in range(6)])
    first = q.dequeue(max_messages=3)
    commits = q.stats().commits
    second = q.dequeue(max_messages=3, complete=[first[0], first[1].receipt, first[2]])
    assert [m.id for m in second] == ids[3:]
    assert [q.status(mid) for mid in ids] == [S.COMPLETED] * 3 + [S.PROCESSING] * 3
    assert q.stats().commits == commits + 1  # the completion rode the lease's commit
    with pytest.raises(s3q.ReceiptExpired):
        q.complete(first[0])
    # nothing left to take: the completion is durable all the same when the call returns
    assert q.dequeue(max_messages=3, complete=second) == []
    assert q.stats().completed == 6


def test_dequeue_with_a_stale_receipt_to_complete_does_nothing(make_queue) -> None:
    q = make_queue()
    ids = q.enqueue_batch([b"a", b"b", b"c"])
    first = q.dequeue(max_messages=2)
    with pytest.raises(s3q.ReceiptExpired):
        q.dequeue(max_messages=1, complete=[first[0], "bogus-receipt"])
    assert [q.status(mid) for mid in ids] == [S.PROCESSING, S.PROCESSING, S.PENDING]


def test_drain_helper_leases_everything(make_queue) -> None:
    q = make_queue()
    q.enqueue_batch([b"x"] * 2500)
    assert len(drain(q)) == 2500
