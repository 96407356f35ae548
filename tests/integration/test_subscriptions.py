"""Subscriptions: the broker pushes messages to a consumer on a WebSocket of its own, up to the
consumer's prefetch, and takes its settles on the same channel. A broker on 127.0.0.1 (real
sockets, the same protocol stack as ``s3q serve``), a file:// store, the real clients."""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgspec
import pytest
from broker_harness import TOKEN, Broker
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

import s3q
from s3q.broker.server import spawn
from s3q.client import AsyncClient, AuthError, Client, connect, connect_async
from s3q.client.nodes import rank
from s3q.errors import InvalidArgument, ReceiptExpired
from s3q.wire import subscriptions as frames
from s3q.worker import Worker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    with Broker(f"file://{tmp_path}/store", tokens={TOKEN}, max_attempts=5) as b:
        yield b


@pytest.fixture
def client(broker: Broker) -> Iterator[Client]:
    with connect(broker.url, token=TOKEN) as c:
        yield c


def _ws_url(broker: Broker, name: str) -> str:
    return broker.url.replace("http", "ws", 1) + f"/v1/queues/{name}/subscribe"


def _dequeued(q: s3q.client.RemoteQueue, count: int, within: float = 10.0) -> list[str]:
    """The ids of ``count`` messages dequeued (long polls woken by the release), in time."""
    got: list[str] = []
    deadline = time.monotonic() + within
    while len(got) < count and time.monotonic() < deadline:
        got += [m.id for m in q.dequeue(count - len(got), visibility_timeout=60, wait=5)]
    return got


def _raw(broker: Broker, name: str = "jobs", **headers: str) -> ClientConnection:
    return ws_connect(
        _ws_url(broker, name),
        additional_headers={"authorization": f"Bearer {TOKEN}", **headers},
        max_size=None,
    )


def test_the_broker_pushes_up_to_the_prefetch_and_more_as_messages_are_settled(
    client: Client,
) -> None:
    q = client.queue("jobs")
    ids = q.enqueue_batch([b"m%d" % i for i in range(20)])
    with q.subscribe(prefetch=5, visibility_timeout=60) as sub:
        first = [sub.get(5) for _ in range(5)]
        assert [m.id for m in first if m] == ids[:5]
        assert sub.get(0.5) is None  # five unsettled: nothing more is pushed
        assert q.stats().processing == 5
        sub.complete(first[0])
        sub.complete_batch(first[1:3])
        more = [sub.get(5) for _ in range(3)]
        assert [m.id for m in more if m] == ids[5:8]
        assert sub.get(0.5) is None
        st = q.stats()
        assert (st.completed, st.processing) == (3, 5)


def test_acks_travel_together_and_are_durable_once_flushed(client: Client) -> None:
    q = client.queue("jobs")
    ids = q.enqueue_batch([b"m%d" % i for i in range(300)])
    got: list[str] = []
    with q.subscribe(prefetch=100) as sub:
        for msg in sub:
            got.append(msg.id)
            sub.ack(msg)
            if len(got) == len(ids):
                break
        sub.flush()
        st = q.stats()
        assert (st.completed, st.processing, st.pending) == (300, 0, 0)
    assert got == ids  # each once, in the queue's order


def test_closing_a_subscription_gives_its_leases_back_at_once(client: Client) -> None:
    q = client.queue("jobs")
    ids = q.enqueue_batch([b"m%d" % i for i in range(8)])
    with q.subscribe(prefetch=5, visibility_timeout=300) as sub:
        held = [sub.get(5) for _ in range(5)]
        assert all(held)
        sub.complete(held[0])
    # not after the 300 s lease: as soon as the broker has seen the channel close
    assert sorted(_dequeued(q, 7)) == sorted(ids[1:])
    assert q.status(ids[0]) == s3q.MessageStatus.COMPLETED


def test_a_consumer_that_vanishes_gives_its_leases_back(broker: Broker, client: Client) -> None:
    q = client.queue("jobs")
    ids = q.enqueue_batch([b"m%d" % i for i in range(3)])
    with _raw(broker) as ws:
        ws.send(frames.encode(frames.Open(prefetch=10, visibility_timeout=300)))
        assert isinstance(frames.decode_server(ws.recv(5)), frames.Opened)
        pushed = frames.decode_server(ws.recv(5))
        assert isinstance(pushed, frames.Pushed)
        assert q.stats().processing == 3
        ws.socket.shutdown(socket.SHUT_RDWR)  # gone, without a close frame
        assert sorted(_dequeued(q, 3)) == sorted(ids)


def test_groups_hold_as_for_a_dequeue(client: Client) -> None:
    q = client.queue("jobs")
    g1, g2 = q.enqueue(b"g1", group="g"), q.enqueue(b"g2", group="g")
    loose = q.enqueue(b"loose")
    with q.subscribe(prefetch=10, visibility_timeout=60) as sub:
        first = {m.id: m for m in (sub.get(5), sub.get(5)) if m}
        assert set(first) == {g1, loose}  # one of the group at a time
        assert sub.get(0.5) is None
        sub.complete(first[g1])  # the group's next one comes once its first is settled
        after = sub.get(5)
        assert after is not None and after.id == g2


def test_fail_release_and_extend_travel_on_the_channel(client: Client) -> None:
    q = client.queue("jobs")
    a, b, c = q.enqueue_batch([b"a", b"b", b"c"])
    with q.subscribe(prefetch=3, visibility_timeout=60) as sub:
        got = {m.id: m for m in (sub.get(5), sub.get(5), sub.get(5)) if m}
        assert set(got) == {a, b, c}
        retry_at = sub.fail(got[a], "boom")
        assert retry_at is not None and retry_at > time.time() - 1
        assert q.status(a) == s3q.MessageStatus.RETRY
        sub.extend(got[b], 120)
        sub.release(got[c])  # given back: pushed again, with a lease of its own
        again = sub.get(5)
        assert again is not None and again.id == c and again.receipt != got[c].receipt
        with pytest.raises(ReceiptExpired):
            sub.complete(got[c])  # the receipt of the lease given back is stale
        with pytest.raises(ReceiptExpired):
            sub.fail(got[a])  # failed already
        sub.complete(got[b])
        assert q.status(b) == s3q.MessageStatus.COMPLETED


def test_a_refused_receipt_in_a_batch_is_named_and_the_others_are_done(client: Client) -> None:
    q = client.queue("jobs")
    q.enqueue_batch([b"a", b"b", b"c"])
    with q.subscribe(prefetch=3, visibility_timeout=60) as sub:
        msgs = [sub.get(5) for _ in range(3)]
        sub.release(msgs[1])
        with pytest.raises(ReceiptExpired, match=msgs[1].id):  # type: ignore[union-attr]
            sub.complete_batch(msgs)
        st = q.stats()  # (the one given back was pushed again: leased)
        assert (st.completed, st.pending, st.processing) == (2, 0, 1)


def _refused(ws: ClientConnection) -> frames.Refused:
    frame = frames.decode_server(ws.recv(5))
    assert isinstance(frame, frames.Refused)
    return frame


@pytest.mark.parametrize(
    "first",
    [
        "text",
        b"\xc1 not msgpack",
        msgspec.msgpack.encode({"type": "open"}),  # no prefetch
        msgspec.msgpack.encode({"type": "open", "prefetch": 0}),
        msgspec.msgpack.encode({"type": "open", "prefetch": 10, "visibility_timeout": -1}),
        msgspec.msgpack.encode({"type": "open", "prefetch": 10, "surprise": 1}),
        frames.encode(frames.Settle(1, "complete", ["x~y"])),  # not opened first
    ],
    ids=["text", "garbage", "no-prefetch", "prefetch-0", "bad-vt", "unknown-field", "settle"],
)
def test_a_bad_opening_is_refused_and_changes_nothing(
    broker: Broker, client: Client, first: bytes | str
) -> None:
    q = client.queue("jobs")
    q.enqueue(b"x")
    with _raw(broker) as ws:
        ws.send(first)
        refused = _refused(ws)
        assert refused.error["error"] == "InvalidArgument"
    st = q.stats()
    assert (st.pending, st.processing) == (1, 0)


@pytest.mark.parametrize(
    "frame",
    [
        frames.Settle(1, "fail", ["a~b", "c~d"]),
        frames.Settle(1, "extend", ["a~b"]),  # no seconds
        frames.Open(prefetch=3),  # opened twice
        frames.Prefetch(prefetch=0),
    ],
    ids=["fail-two", "extend-no-seconds", "open-twice", "prefetch-0"],
)
def test_a_bad_frame_closes_the_channel_and_gives_its_leases_back(
    broker: Broker, client: Client, frame: frames.ClientFrame
) -> None:
    q = client.queue("jobs")
    q.enqueue(b"x")
    with _raw(broker) as ws:
        ws.send(frames.encode(frames.Open(prefetch=5, visibility_timeout=300)))
        assert isinstance(frames.decode_server(ws.recv(5)), frames.Opened)
        assert isinstance(frames.decode_server(ws.recv(5)), frames.Pushed)
        ws.send(frames.encode(frame))
        assert _refused(ws).error["error"] == "InvalidArgument"
    assert [m.payload for m in q.dequeue(1, wait=5)] == [b"x"]


def test_a_subscription_needs_the_token_and_the_brokers_own_origin(
    broker: Broker, client: Client
) -> None:
    q = client.queue("jobs")
    q.enqueue(b"x")
    for token, why in ((None, "missing bearer token"), ("wrong", "invalid bearer token")):
        with Client(broker.url, token=token) as other, pytest.raises(AuthError, match=why):
            other.queue("jobs").subscribe().open()
    with pytest.raises(Exception, match="403"):
        _raw(broker, origin="http://evil.example")
    st = q.stats()
    assert (st.pending, st.processing) == (1, 0)


def test_a_subscription_waits_for_a_queue_not_made_yet(client: Client) -> None:
    with client.queue("later").subscribe(prefetch=5) as sub:
        assert sub.get(0.3) is None
        mid = client.queue("later").enqueue(b"here")
        got = sub.get(10)
        assert got is not None and got.id == mid


def test_an_async_subscription_settles_in_one_frame_per_loop_turn(broker: Broker) -> None:
    async def main() -> None:
        async with connect_async(broker.url, token=TOKEN) as c:
            q = c.queue("jobs")
            ids = await q.enqueue_batch([b"m%d" % i for i in range(50)])
            async with q.subscribe(prefetch=50, visibility_timeout=60) as sub:
                got = await sub.take(50, 5)
                while len(got) < 50:
                    got += await sub.take(50, 5)
                assert [m.id for m in got] == ids
                await asyncio.gather(*(sub.complete(m) for m in got[:25]))
                for m in got[25:]:
                    sub.ack(m)
                await sub.flush()
                with pytest.raises(ReceiptExpired):
                    await sub.complete(got[0])
            st = await q.stats()
            assert (st.completed, st.processing) == (50, 0)

    asyncio.run(main())


def _metric(broker: Broker, name: str, label: str = "") -> float:
    text = httpx.get(broker.url + "/metrics", headers={"authorization": f"Bearer {TOKEN}"}).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and label in line
    )


def _pushes(broker: Broker) -> float:
    return _metric(broker, "s3q_broker_operations_total", 'operation="push"')


def test_the_broker_counts_its_subscriptions(broker: Broker, client: Client) -> None:
    assert _metric(broker, "s3q_broker_subscriptions ") == 0
    with client.queue("jobs").subscribe() as sub:
        assert _metric(broker, "s3q_broker_subscriptions ") == 1
        mid = client.queue("jobs").enqueue(b"x")
        got = sub.get(10)
        assert got is not None and got.id == mid
        assert _pushes(broker) == 1
    deadline = time.monotonic() + 10  # (the broker sees the close a moment later)
    while _metric(broker, "s3q_broker_subscriptions ") != 0:
        assert time.monotonic() < deadline
        time.sleep(0.02)


@pytest.mark.parametrize("push", [True, False])
def test_a_worker_through_a_broker_is_pushed_its_messages(broker: Broker, push: bool) -> None:
    with connect(broker.url, token=TOKEN) as c:
        ids = c.queue("jobs").enqueue_batch([b"m%d" % i for i in range(200)])
    seen: Counter[str] = Counter()

    async def main() -> None:
        done = asyncio.Event()

        async def handler(msg: s3q.Message) -> None:
            seen[msg.id] += 1
            if len(seen) == len(ids):
                done.set()

        async with connect_async(broker.url, token=TOKEN) as c:
            worker = Worker(c.queue("jobs"), handler, concurrency=4, push=push)
            serving = asyncio.create_task(worker.serve())
            await asyncio.wait_for(done.wait(), 30)
            worker.stop()
            await serving

    asyncio.run(main())
    assert set(seen) == set(ids) and max(seen.values()) == 1
    with connect(broker.url, token=TOKEN) as c:
        st = c.queue("jobs").stats()
    assert (st.completed, st.processing) == (200, 0)
    assert (_pushes(broker) > 0) == push


def test_a_worker_polls_a_broker_that_offers_no_subscriptions(tmp_path: Path) -> None:
    with Broker(f"file://{tmp_path}/store", websockets=False) as b:
        with connect(b.url) as c:
            ids = c.queue("jobs").enqueue_batch([b"m%d" % i for i in range(20)])
            with pytest.raises(s3q.client.SubscriptionsUnsupported):
                c.queue("jobs").subscribe().open()
        seen: list[str] = []

        async def main() -> None:
            done = asyncio.Event()

            async def handler(msg: s3q.Message) -> None:
                seen.append(msg.id)
                if len(seen) == len(ids):
                    done.set()

            async with connect_async(b.url) as c:
                worker = Worker(c.queue("jobs"), handler, concurrency=2)
                serving = asyncio.create_task(worker.serve())
                await asyncio.wait_for(done.wait(), 30)
                worker.stop()
                await serving

        asyncio.run(main())
        assert sorted(seen) == sorted(ids)


def test_prefetch_must_be_a_positive_integer(client: Client) -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(InvalidArgument):
            client.queue("jobs").subscribe(prefetch=bad)  # type: ignore[arg-type]


def test_acks_flushed_survive_a_kill_9_of_the_broker(tmp_path: Path) -> None:
    """What a subscription's flush said was durable is completed after a SIGKILL of the
    broker; what was pushed and not acknowledged is delivered again."""
    store = f"file://{tmp_path}/store"
    child, url = spawn(store, options={"visibility_timeout": 1.0})
    try:
        with connect(url) as c:
            q = c.queue("jobs")
            ids = q.enqueue_batch([b"m%d" % i for i in range(40)])
            with q.subscribe(prefetch=40, visibility_timeout=1.0) as sub:
                got = [sub.get(5) for _ in range(40)]
                for msg in got[:25]:
                    sub.ack(msg)
                sub.flush()
                child.send_signal(signal.SIGKILL)
                child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
    child, url = spawn(store, options={"visibility_timeout": 1.0})
    try:
        with connect(url) as c:
            q = c.queue("jobs")
            done = {m.id for m in got[:25] if m}
            assert all(q.status(mid) == s3q.MessageStatus.COMPLETED for mid in done)
            again = _dequeued(q, 15, within=20)  # their leases of 1 s run out
            assert sorted(again) == sorted(set(ids) - done)
    finally:
        child.kill()
        child.wait(10)


def test_a_subscription_goes_to_the_next_broker_when_one_is_not_reached(broker: Broker) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"  # (closed: nothing listens there)
    # a queue the client asks the dead broker about first
    name = next(f"q{i}" for i in range(100) if rank(f"q{i}", dead) < rank(f"q{i}", broker.url))
    with connect(broker.url, token=TOKEN) as c:
        mid = c.queue(name).enqueue(b"x")
    with (
        Client([dead, broker.url], token=TOKEN, follow=False) as c,
        c.queue(name).subscribe(prefetch=1) as sub,
    ):
        got = sub.get(10)
        assert got is not None and got.id == mid
        sub.release(got)

    async def main() -> None:
        async with (
            AsyncClient([dead, broker.url], token=TOKEN, follow=False) as c,
            c.queue(name).subscribe(prefetch=1) as sub,
        ):
            got = await sub.get(10)
            assert got is not None and got.id == mid

    asyncio.run(main())


def test_a_subscription_outlives_the_time_a_request_head_may_take(tmp_path: Path) -> None:
    """A connection that became a WebSocket has no request head to wait for: the head
    timeout (here 0.3 s) must not close it (it closed every subscription after 10 s)."""
    with Broker(f"file://{tmp_path}/store", head_timeout=0.3) as b, connect(b.url) as c:
        q = c.queue("jobs")
        with q.subscribe(prefetch=5) as sub:
            assert sub.get(1.0) is None  # (idle for more than the head timeout)
            mid = q.enqueue(b"late")
            got = sub.get(5)
            assert got is not None and got.id == mid
            sub.complete(got)
