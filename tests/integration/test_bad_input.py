"""Bad input gets a precise error and changes nothing."""

from __future__ import annotations

import contextlib
import socket
import time
import uuid
from pathlib import Path

import pytest
from conftest import FakeClock, StoreEnv, free_port

import s3q

S = s3q.MessageStatus


@pytest.fixture
def q(make_queue):
    # a long writer lease: no background renewal can touch store_requests during a test
    q = make_queue(max_message_size=1024, lease_ttl=3600.0)
    q.enqueue(b"existing")
    return q


def snapshot(q) -> tuple:
    st = q.stats()
    return (
        st.pending,
        st.delayed,
        st.processing,
        st.retry,
        st.completed,
        st.dead,
        st.total_enqueued,
        st.commits,
        st.store_requests,
    )


def assert_rejected(q, exc_type, call) -> None:
    before = snapshot(q)
    with pytest.raises(exc_type):
        call()
    assert snapshot(q) == before


# --------------------------------------------------------------------------- payload


@pytest.mark.parametrize(
    "payload", ["text", 123, None, 1.5, ["b"], {"a": b"b"}], ids=lambda p: type(p).__name__
)
def test_enqueue_wrong_payload_type(q, payload) -> None:
    assert_rejected(q, s3q.InvalidArgument, lambda: q.enqueue(payload))


def test_wrong_payload_type_is_also_value_error(q) -> None:
    assert_rejected(q, ValueError, lambda: q.enqueue("text"))


def test_oversize_payload(q) -> None:
    assert_rejected(q, s3q.MessageTooLarge, lambda: q.enqueue(b"x" * 1025))
    mid = q.enqueue(b"x" * 1024)  # exactly the limit is fine
    assert q.status(mid) is S.PENDING


def test_oversize_payload_in_batch_enqueues_nothing(q) -> None:
    assert_rejected(q, s3q.MessageTooLarge, lambda: q.enqueue_batch([b"ok", b"x" * 2000, b"ok2"]))


# --------------------------------------------------------------------------- priority


@pytest.mark.parametrize("priority", [256, -1, 1000, -256])
def test_priority_out_of_range(q, priority) -> None:
    assert_rejected(q, s3q.InvalidPriority, lambda: q.enqueue(b"x", priority=priority))


@pytest.mark.parametrize("priority", ["x", "5", 1.5, None, b"1"])
def test_priority_wrong_type(q, priority) -> None:
    assert_rejected(q, s3q.InvalidArgument, lambda: q.enqueue(b"x", priority=priority))


def test_priority_bounds_accepted(q) -> None:
    assert q.status(q.enqueue(b"x", priority=0)) is S.PENDING
    assert q.status(q.enqueue(b"x", priority=255)) is S.PENDING


def test_bad_priority_in_batch_enqueues_nothing(q) -> None:
    items = [{"payload": b"a"}, {"payload": b"b", "priority": 256}]
    assert_rejected(q, s3q.InvalidPriority, lambda: q.enqueue_batch(items))


# --------------------------------------------------------------------------- other enqueue args


@pytest.mark.parametrize("delay", [-1.0, "10", float("nan"), float("inf"), 1e308, 900.5])
def test_bad_delay(q, delay) -> None:
    assert_rejected(q, s3q.InvalidArgument, lambda: q.enqueue(b"x", delay=delay))


@pytest.mark.parametrize("dedup_id", [123, b"bytes", ["a"], "lone \ud800 surrogate"])
def test_bad_dedup_id(q, dedup_id) -> None:
    assert_rejected(q, s3q.InvalidArgument, lambda: q.enqueue(b"x", dedup_id=dedup_id))


@pytest.mark.parametrize("group", [123, b"bytes", ["a"], "\udfff"])
def test_bad_group(q, group) -> None:
    assert_rejected(q, s3q.InvalidArgument, lambda: q.enqueue(b"x", group=group))


@pytest.mark.parametrize(
    "attributes",
    [{"k": 1}, {1: "v"}, ["k", "v"], "k=v", {"k": b"v"}, {"k": "\ud800"}, {"\ud800": "v"}],
    ids=repr,
)
def test_bad_attributes(q, attributes) -> None:
    assert_rejected(q, s3q.InvalidArgument, lambda: q.enqueue(b"x", attributes=attributes))


@pytest.mark.parametrize(
    "items",
    [
        [b"ok", "text"],
        [b"ok", {"payload": "text"}],
        [b"ok", {"priority": 1}],  # no payload
        [b"ok", {"payload": b"x", "bogus": 1}],
        [b"ok", 42],
        "not a list",
    ],
    ids=repr,
)
def test_bad_batch_items_enqueue_nothing(q, items) -> None:
    assert_rejected(q, s3q.InvalidArgument, lambda: q.enqueue_batch(items))


def test_empty_batch_is_fine_and_changes_nothing(q) -> None:
    before = snapshot(q)
    assert q.enqueue_batch([]) == []
    assert snapshot(q)[:7] == before[:7]


def test_attributes_count_toward_max_message_size(q) -> None:
    # 10 bytes of payload and a 1 MB attribute value: SQS counts attributes, and so does s3q
    big = {"k": "v" * 1_000_000}
    assert_rejected(q, s3q.MessageTooLarge, lambda: q.enqueue(b"0123456789", attributes=big))
    assert_rejected(
        q, s3q.MessageTooLarge, lambda: q.enqueue_batch([{"payload": b"x", "attributes": big}])
    )
    # within the limit, names and values counted in UTF-8 bytes: 1,000 + 2 + 22 <= 1,024
    q.enqueue(b"x" * 1000, attributes={"k": "\u00e9" * 11})


def test_a_queue_allows_longer_delays_once_configured(q) -> None:
    assert_rejected(q, s3q.InvalidArgument, lambda: q.enqueue(b"x", delay=3600))
    assert q.configure(max_delay=3600)["max_delay"] == 3600
    q.enqueue(b"x", delay=3600)
    assert q.stats().delayed == 1
    assert_rejected(q, s3q.InvalidArgument, lambda: q.enqueue(b"x", delay=3601))


def test_fail_error_text_with_a_lone_surrogate_is_kept_writable(q) -> None:
    # error text often comes from a bad decode: it is stored with the surrogate replaced,
    # and the queue's writer goes on
    [m] = q.dequeue()
    q.fail(m, "bad byte \udcff here")
    q.enqueue(b"after")
    assert q.stats().total_enqueued == 2


def test_configure_out_of_bounds_changes_nothing_and_the_writer_goes_on(q) -> None:
    before = q.configure()
    for settings in ({"max_attempts": 10**29}, {"max_message_size": 2**62}, {"max_delay": 1e308}):
        assert_rejected(q, s3q.InvalidConfig, lambda settings=settings: q.configure(**settings))
    assert q.configure() == before
    q.enqueue(b"still writable")


# --------------------------------------------------------------------------- dequeue / receipts


@pytest.mark.parametrize("max_messages", [0, -1, "3", 1.5])
def test_bad_max_messages(q, max_messages) -> None:
    assert_rejected(q, s3q.InvalidArgument, lambda: q.dequeue(max_messages=max_messages))


@pytest.mark.parametrize("vt", [-1.0, "30", float("nan"), 1e308, 12 * 3600 + 1])
def test_bad_visibility_timeout(q, vt) -> None:
    assert_rejected(q, s3q.InvalidArgument, lambda: q.dequeue(visibility_timeout=vt))


@pytest.mark.parametrize("wait", [-1.0, "1", float("nan"), 1e9, 20.5])
def test_bad_wait(q, wait) -> None:
    assert_rejected(q, s3q.InvalidArgument, lambda: q.dequeue(wait=wait))


# ids fixed: a random one would differ between pytest-xdist's workers, which must agree
@pytest.mark.parametrize(
    "receipt", ["garbage", "x" * 500, str(uuid.uuid4())], ids=["garbage", "long", "uuid"]
)
def test_unknown_receipt(q, receipt) -> None:
    q.dequeue()  # a real lease exists; the bogus receipt must not touch it
    assert_rejected(q, s3q.ReceiptExpired, lambda: q.complete(receipt))
    assert_rejected(q, s3q.ReceiptExpired, lambda: q.fail(receipt, "e"))
    assert_rejected(q, s3q.ReceiptExpired, lambda: q.extend(receipt, 10))
    assert q.stats().processing == 1


@pytest.mark.parametrize("receipt", [None, 123, b"bytes", 1.5])
def test_receipt_wrong_type(q, receipt) -> None:
    assert_rejected(q, s3q.InvalidArgument, lambda: q.complete(receipt))
    assert_rejected(q, s3q.InvalidArgument, lambda: q.fail(receipt))
    assert_rejected(q, s3q.InvalidArgument, lambda: q.extend(receipt, 10))


def test_receipt_of_other_message_field_tampered(q) -> None:
    [m] = q.dequeue()
    assert_rejected(q, s3q.ReceiptExpired, lambda: q.complete(m.receipt + "x"))
    assert q.status(m.id) is S.PROCESSING


@pytest.mark.parametrize("seconds", [-1.0, "10", float("nan"), None, 1e308, 12 * 3600 + 1])
def test_bad_extend_seconds(q, seconds) -> None:
    [m] = q.dequeue()
    assert_rejected(q, s3q.InvalidArgument, lambda: q.extend(m, seconds))
    assert q.status(m.id) is S.PROCESSING


def test_bad_fail_error_type(q) -> None:
    [m] = q.dequeue()
    assert_rejected(q, s3q.InvalidArgument, lambda: q.fail(m, 42))
    assert q.status(m.id) is S.PROCESSING


def test_complete_batch_bad_entry_completes_nothing(q) -> None:
    q.enqueue(b"second")
    ms = q.dequeue(max_messages=2)
    assert_rejected(q, s3q.InvalidArgument, lambda: q.complete_batch([ms[0], 42]))
    assert q.stats().processing == 2


def test_status_unknown_and_bad_ids(q) -> None:
    assert_rejected(q, s3q.MessageNotFound, lambda: q.status("nope"))
    assert_rejected(q, s3q.InvalidArgument, lambda: q.status(42))


@pytest.mark.parametrize("limit", [-1, "10", 1.5])
def test_bad_dead_letters_limit(q, limit) -> None:
    assert_rejected(q, s3q.InvalidArgument, lambda: q.dead_letters(limit=limit))


def test_bad_redrive_ids(q) -> None:
    assert_rejected(q, s3q.InvalidArgument, lambda: q.redrive(ids="abc"))
    assert_rejected(q, s3q.InvalidArgument, lambda: q.redrive(ids=[1, 2]))


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    "options",
    [
        {"max_attempts": 0},
        {"max_attempts": -1},
        {"max_attempts": "3"},
        {"max_attempts": 2.5},
        {"retry_delay": -1.0},
        {"retry_delay_max": -5.0},
        {"visibility_timeout": -1},
        {"visibility_timeout": "30"},
        {"max_message_size": 0},
        {"max_message_size": -5},
        {"max_message_size": 2**62},
        {"max_attempts": 10**29},
        {"max_queue_depth": 2**64},
        {"visibility_timeout": 1e308},
        {"visibility_timeout": 12 * 3600 + 1},
        {"max_delay": -1},
        {"max_delay": 366 * 86400},
        {"attributes": {"k": "\ud800"}},
        {"max_queue_depth": -1},
        {"max_queue_depth": "many"},
        {"dedup_window": -1},
        {"completed_retention": -1},
        {"lease_ttl": 0},
        {"lease_ttl": -1},
        {"payload_cache_bytes": -1},
        {"clock": 123},
        {"clock": "now"},
        {"no_such_option": 1},
        {"visiblity_timeout": 30},  # misspelt
    ],
    ids=repr,
)
def test_bad_options_raise_invalid_config(env: StoreEnv, options) -> None:
    with pytest.raises(s3q.InvalidConfig):
        env.open(**options)
    # nothing was created or locked: the queue opens and is empty
    with env.open() as q:
        assert q.stats().total_enqueued == 0


def test_bad_options_leave_no_trace_on_disk(tmp_path: Path) -> None:
    target = tmp_path / "never"
    with pytest.raises(s3q.InvalidConfig):
        s3q.open(str(target), max_attempts=0)
    assert not target.exists() or not any(target.rglob("log/*"))


def test_invalid_config_is_invalid_argument_and_value_error(env: StoreEnv) -> None:
    with pytest.raises(ValueError):
        env.open(max_attempts=0)
    with pytest.raises(s3q.InvalidArgument):
        env.open(max_attempts=0)


# --------------------------------------------------------------------------- unreachable store


@pytest.mark.timeout(90)
def test_unreachable_endpoint_raises_store_error_quickly(clock: FakeClock) -> None:
    port = free_port()  # nothing listens here
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0
    t0 = time.monotonic()
    with pytest.raises(s3q.StoreError):
        q = s3q.open(
            f"s3://bucket-{uuid.uuid4().hex[:6]}/q",
            endpoint_url=f"http://127.0.0.1:{port}",
            region="us-east-1",
            access_key_id="testing",
            secret_access_key="testing",
            allow_http=True,
            clock=clock,
        )
        try:
            q.enqueue(b"x")
        finally:
            q.close()
    elapsed = time.monotonic() - t0
    assert elapsed < 30, f"took {elapsed:.1f} s to give up on a closed port"


def test_missing_bucket_raises_store_error(moto_server, clock: FakeClock) -> None:
    with pytest.raises(s3q.StoreError):
        q = s3q.open(
            f"s3://no-such-bucket-{uuid.uuid4().hex[:6]}/q",
            clock=clock,
            **moto_server.store_options(),
        )
        try:
            q.enqueue(b"x")
        finally:
            q.close()


def test_default_max_message_size_is_64_mib(clock: FakeClock) -> None:
    from conftest import MemoryEnv

    env = MemoryEnv()
    with env.open(clock=clock, lease_ttl=3600.0) as q:
        limit = 64 * 1024 * 1024
        big = bytes(limit + 1)
        assert_rejected(q, s3q.MessageTooLarge, lambda: q.enqueue(big))


@pytest.mark.timeout(120)
def test_store_vanishing_mid_session_answers_outcome_unknown(clock: FakeClock) -> None:
    """A queue whose S3 endpoint dies answers OutcomeUnknown after commit_timeout instead of
    hanging, and does not stop: the writer goes on trying the write, which the index holds."""
    from conftest import start_moto

    server = start_moto()
    try:
        server.client().create_bucket(Bucket="vanishing")
        q = s3q.open(
            "s3://vanishing/q",
            clock=clock,
            lease_ttl=3600.0,
            commit_timeout=2.0,
            **server.store_options(),
        )
        mid = q.enqueue(b"before")
        assert q.status(mid) is S.PENDING
    finally:
        server.stop()
    t0 = time.monotonic()
    with pytest.raises(s3q.OutcomeUnknown):
        q.enqueue(b"after")
    assert time.monotonic() - t0 < 10
    assert q.stats().total_enqueued == 2  # still being tried: it lands if the store returns
    with contextlib.suppress(s3q.S3QError):
        q.close()


def test_a_setting_saved_beyond_todays_bounds_stays_in_force(env: StoreEnv) -> None:
    # a queue configured by an older build, which allowed a 2-day visibility timeout: it
    # opens, keeps the setting, and takes other settings as before
    from s3q.log.ops import Configure

    async def save_old_setting(engine) -> None:
        batch = engine.commit.add(Configure({"visibility_timeout": 172800.0}))
        await engine.commit.durable_after(batch)

    with env.open() as q:
        q._run(save_old_setting(q._aq._engine))
    with env.open() as q:
        assert q.configure()["visibility_timeout"] == 172800.0
        assert q.configure(max_attempts=7)["max_attempts"] == 7
        assert q.config.visibility_timeout == 172800.0
