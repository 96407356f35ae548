"""The broker over real HTTP: uvicorn on 127.0.0.1, a file:// store, the s3q.client API."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgspec
import pytest
from broker_harness import TOKEN, Broker, free_port
from conftest import Parked

import s3q
from s3q.broker import serve
from s3q.client import AuthError, Client, QueueNotFound, connect, connect_async


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"file://{tmp_path}/store"


@pytest.fixture
def broker(store: str) -> Iterator[Broker]:
    with Broker(store, retry_delay=0.01, retry_delay_max=0.01) as b:
        yield b


@pytest.fixture
def client(broker: Broker) -> Iterator[Client]:
    with connect(broker.url) as c:
        yield c


def test_enqueue_dequeue_complete(client: Client) -> None:
    q = client.queue("jobs")
    mid = q.enqueue(b"hello", attributes={"k": "v"})
    assert q.status(mid) is s3q.MessageStatus.PENDING
    [msg] = q.dequeue()
    assert isinstance(msg, s3q.Message)
    assert (msg.id, msg.payload, msg.attributes, msg.attempts) == (mid, b"hello", {"k": "v"}, 1)
    assert q.status(mid) is s3q.MessageStatus.PROCESSING
    q.extend(msg, 60)
    q.complete(msg)
    assert q.status(mid) is s3q.MessageStatus.COMPLETED
    assert q.dequeue() == []
    ids = q.enqueue_batch([b"a", {"payload": b"b", "priority": 5}])
    got = q.dequeue(max_messages=10)
    assert [m.payload for m in got] == [b"b", b"a"]
    q.complete_batch(got)
    stats = q.stats()
    assert isinstance(stats, s3q.QueueStats)
    assert (stats.completed, stats.pending, stats.total_enqueued) == (3, 0, 3)
    assert len(ids) == 2
    assert client.queues() == ["jobs"]
    report = q.compact()
    assert isinstance(report, s3q.CompactionReport)
    assert q.cleanup() == 0


def test_fail_retry_dead_redrive_release(client: Client) -> None:
    q = client.queue("retry")
    mid = q.enqueue(b"x")
    for attempt in range(1, 4):
        deadline = time.monotonic() + 5
        got: list[s3q.Message] = []
        while not got:
            assert time.monotonic() < deadline
            got = q.dequeue(wait=1)
        assert got[0].attempts == attempt
        q.fail(got[0], error=f"boom {attempt}")
    assert q.status(mid) is s3q.MessageStatus.DEAD
    [dead] = q.dead_letters()
    assert (dead.id, dead.last_error) == (mid, "boom 3")
    assert q.redrive() == 1
    [msg] = q.dequeue()
    assert msg.attempts == 1
    q.release(msg)
    [again] = q.dequeue()
    assert again.attempts == 1  # release does not count the delivery
    q.complete(again)
    with pytest.raises(s3q.MessageNotFound):
        q.redrive([mid])


def test_priorities_groups_dedup_peek_purge(client: Client) -> None:
    q = client.queue("order")
    q.enqueue(b"low", priority=1)
    q.enqueue(b"high", priority=200)
    q.enqueue(b"mid", priority=50)
    assert [m.payload for m in q.peek()] == [b"high", b"mid", b"low"]
    assert all(m.receipt is None for m in q.peek())
    assert [m.payload for m in q.dequeue(3)] == [b"high", b"mid", b"low"]

    g = client.queue("groups")
    g.enqueue(b"g1", group="a")
    g.enqueue(b"g2", group="a")
    g.enqueue(b"other")
    first = g.dequeue(10)
    assert sorted(m.payload for m in first) == [b"g1", b"other"]
    g.complete_batch(first)
    assert [m.payload for m in g.dequeue(10)] == [b"g2"]

    d = client.queue("dedup")
    one = d.enqueue(b"1", dedup_id="same")
    assert d.enqueue(b"2", dedup_id="same") == one
    assert d.stats().pending == 1
    d.enqueue(b"3", delay=60)
    assert d.stats().delayed == 1
    assert d.purge() == 2


def test_binary_payloads_round_trip(client: Client) -> None:
    q = client.queue("bin")
    every = bytes(range(256))
    payloads = [every, b"", every * 1000, b"\x00", "é€".encode()]
    ids = q.enqueue_batch(payloads)
    got = q.dequeue(len(payloads))
    assert [m.payload for m in got] == payloads
    assert [m.id for m in got] == ids


def test_errors_map_to_the_same_classes(broker: Broker, store: str) -> None:
    with connect(broker.url) as c:
        q = c.queue("errs")
        with pytest.raises(s3q.InvalidPriority):
            q.enqueue(b"x", priority=256)
        with pytest.raises(s3q.InvalidArgument, match="payload must be bytes"):
            q.enqueue("text")  # type: ignore[arg-type]
        with pytest.raises(s3q.MessageNotFound):
            q.status("nope")
        with pytest.raises(s3q.InvalidArgument):
            q.dequeue(max_messages=0)
        q.enqueue(b"x")
        [msg] = q.dequeue(visibility_timeout=0.05)
        time.sleep(0.1)
        [again] = q.dequeue()
        with pytest.raises(s3q.ReceiptExpired):
            q.complete(msg)
        q.complete(again)
        with pytest.raises(s3q.InvalidArgument):
            c.queue("bad name!")
        assert q.stats().total_enqueued == 1
        small = c.queue("small")
        small.enqueue(b"x")  # opened with defaults
    with Broker(f"{store}x", max_message_size=10, max_queue_depth=1) as b, connect(b.url) as c:
        q = c.queue("limits")
        with pytest.raises(s3q.MessageTooLarge):
            q.enqueue(b"x" * 11)
        q.enqueue(b"x")
        with pytest.raises(s3q.QueueFull):
            q.enqueue(b"y")
    # raw HTTP: a bad name is a 400 with a JSON error; malformed bodies are 400 too
    r = httpx.post(f"{broker.url}/v1/queues/bad.name/dequeue", content=b"")
    assert r.status_code == 400
    assert r.json()["error"] == "InvalidArgument"
    r = httpx.post(
        f"{broker.url}/v1/queues/errs/enqueue",
        content=b"\xc1garbage",
        headers={"content-type": "application/msgpack"},
    )
    assert (r.status_code, r.json()["error"]) == (400, "InvalidArgument")
    r = httpx.post(
        f"{broker.url}/v1/queues/errs/complete",
        content=msgspec.msgpack.encode({"receipts": "abc"}),
        headers={"content-type": "application/msgpack", "accept": "application/msgpack"},
    )
    assert r.status_code == 400
    assert msgspec.msgpack.decode(r.content)["error"] == "InvalidArgument"


def test_queue_locked_maps_back(broker: Broker, store: str) -> None:
    holder = s3q.open(f"{store}/held")
    try:
        with connect(broker.url) as c, pytest.raises(s3q.QueueLocked):
            c.queue("held").stats()
    finally:
        holder.close()


def test_auth(store: str) -> None:
    with Broker(store, tokens={TOKEN, "other"}) as b:
        with connect(b.url) as anon:
            with pytest.raises(AuthError) as info:
                anon.queue("secure").enqueue(b"x")
            assert info.value.status == 401
        with connect(b.url, token="wrong") as bad:
            with pytest.raises(AuthError) as info:
                bad.queue("secure").enqueue(b"x")
            assert info.value.status == 403
        r = httpx.get(f"{b.url}/v1/queues")
        assert r.status_code == 401
        assert r.json()["error"] == "AuthError"
        with connect(b.url, token=TOKEN) as good:
            assert good.queues() == []  # the refused requests did not even open the queue
            q = good.queue("secure")
            with pytest.raises(QueueNotFound):  # nor made it: reads do not create a queue
                q.stats()
            q.enqueue(b"ok")
            assert q.stats().total_enqueued == 1


def test_refuses_public_bind_without_tokens(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("S3Q_TOKENS", raising=False)
    with pytest.raises(s3q.InvalidConfig, match="without tokens"):
        serve(store, host="0.0.0.0", port=free_port())
    with pytest.raises(s3q.InvalidConfig):
        serve(store, host="::", port=free_port(), tokens=set())


def test_openapi_lists_every_route(broker: Broker) -> None:
    doc = httpx.get(f"{broker.url}/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    paths = doc["paths"]
    assert "post" in paths["/v1/queues/{name}/enqueue-batch"]
    assert "get" in paths["/v1/queues/{name}/messages/{id}/status"]
    assert "Message" in doc["components"]["schemas"]
    from s3q.broker.routes import ENDPOINTS
    from s3q.wire.codec import API_PREFIX

    assert set(paths) == {API_PREFIX + e.path for e in ENDPOINTS}
    assert "post" in paths["/v1/queues/{name}/enqueue-staged"]


def test_long_poll_wakes_on_enqueue_from_another_client(broker: Broker, parked: Parked) -> None:
    async def main() -> None:
        async with connect_async(broker.url) as a, connect_async(broker.url) as b:
            qa, qb = a.queue("poll"), b.queue("poll")
            await qa.configure()  # make the queue first (a read would not)
            waiter = asyncio.create_task(qa.dequeue(wait=10))
            await parked.wait_async(1)  # a's long poll waits in the broker's writer
            assert not waiter.done()
            with parked.change() as enqueued:
                await qb.enqueue(b"wake")
            [msg] = await waiter
            assert msg.payload == b"wake"
            assert enqueued.woke(time.monotonic())
            await qa.complete(msg)
            start = time.monotonic()
            assert await qa.dequeue(wait=0.5) == []
            assert time.monotonic() - start >= 0.45

    asyncio.run(main())


def test_many_concurrent_clients_share_commits(broker: Broker) -> None:
    clients, each = 32, 200

    async def one(n: int) -> list[str]:
        async with connect_async(broker.url) as c:
            q = c.queue("busy")
            return [await q.enqueue(f"{n}-{i}".encode()) for i in range(each)]

    async def main() -> tuple[list[list[str]], s3q.QueueStats, s3q.QueueStats]:
        async with connect_async(broker.url) as c:
            await c.queue("busy").configure()
            before = await c.queue("busy").stats()
            results = await asyncio.gather(*(one(n) for n in range(clients)))
            after = await c.queue("busy").stats()
        return results, before, after

    start = time.monotonic()
    results, before, after = asyncio.run(main())
    elapsed = time.monotonic() - start
    ids = [i for r in results for i in r]
    assert len(set(ids)) == clients * each
    assert after.pending == clients * each
    commits = after.commits - before.commits
    print(f"\n{clients * each} enqueues in {elapsed:.2f}s, {commits} commits")
    assert commits < clients * each / 4


def test_queues_closed_on_shutdown(store: str) -> None:
    with Broker(store) as b, connect(b.url) as c:
        c.queue("closing").enqueue(b"survives")
    # the broker released the writer: the queue opens at once and holds the message
    with s3q.open(f"{store}/closing") as q:
        assert [m.payload for m in q.peek()] == [b"survives"]


def test_serve_sigterm_closes_queues(store: str) -> None:
    import signal
    import subprocess
    import sys

    port = free_port()
    code = f"from s3q.broker import serve; serve({store!r}, port={port}, log_level='warning')"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        with connect(f"http://127.0.0.1:{port}") as c:
            deadline = time.monotonic() + 15
            while True:
                try:
                    c.queue("term").enqueue(b"kept")
                    break
                except s3q.StoreError:
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it caught
        assert proc.wait(15) in (0, -signal.SIGTERM)
    finally:
        proc.kill()
    with s3q.open(f"{store}/term") as q:
        assert [m.payload for m in q.peek()] == [b"kept"]


def test_metrics_expose_operations_depth_and_commits(broker: Broker, client: Client) -> None:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    q = client.queue("metered")
    q.enqueue_batch([b"a", b"b", b"c"])
    [m] = q.dequeue()
    q.complete(m)
    with pytest.raises(s3q.InvalidPriority):
        q.enqueue(b"x", priority=300)
    with urllib.request.urlopen(broker.url + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("s3q_queue_messages", queue="metered", status="pending") == 2
    assert value("s3q_queue_messages", queue="metered", status="completed") == 1
    assert value("s3q_queue_commits", queue="metered") >= 3
    assert value("s3q_queue_commit_waits", queue="metered") == 0  # no window on a directory
    assert value("s3q_queue_store_requests", queue="metered", kind="put") >= 3
    # every commit after the opening one is timed and sized: 3 enqueues, 1 lease, 1 ack
    commits = value("s3q_queue_commit_seconds_count", queue="metered")
    assert commits == value("s3q_queue_commits", queue="metered") - 1 == 3
    assert value("s3q_queue_commit_seconds_sum", queue="metered") > 0
    assert value("s3q_queue_commit_operations_sum", queue="metered") == 5
    ok = [
        v
        for (n, labels), v in samples.items()
        if n == "s3q_broker_operations_total"
        and ("queue", "metered") in labels
        and ("outcome", "ok") in labels
    ]
    assert sum(ok) >= 3
    refused = [
        (n, labels)
        for (n, labels) in samples
        if n == "s3q_broker_operations_total" and ("outcome", "InvalidPriority") in labels
    ]
    assert refused


def test_metrics_need_the_token_when_tokens_are_set(store: str) -> None:
    import urllib.error
    import urllib.request

    with Broker(store, tokens={TOKEN}) as b:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(b.url + "/metrics", timeout=10)
        assert refused.value.code == 401
        request = urllib.request.Request(
            b.url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert b"s3q_broker_request_seconds" in answer.read()


def test_the_broker_logs_a_summary_of_its_requests_not_a_line_each(tmp_path: Path) -> None:
    """At info, one line a period with the requests answered in it by outcome; no access log
    line per request unless asked for (``access_log``)."""
    import queue
    import subprocess
    import sys
    import threading

    store, port = f"file://{tmp_path}/s", free_port()
    code = (
        f"from s3q.broker import serve; serve({store!r}, port={port}, log_level='info', "
        "summary_every=0.5)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stderr is not None
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr or ()])
    reader.start()
    try:
        with connect(f"http://127.0.0.1:{port}") as c:
            deadline = time.monotonic() + 15
            while True:  # (the child starting: until it answers)
                try:
                    q = c.queue("logged")
                    q.enqueue(b"one")
                    break
                except s3q.StoreError:
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
            q.enqueue(b"two")
            with pytest.raises(s3q.InvalidPriority):
                q.enqueue(b"bad", priority=999)
        seen: list[str] = []
        while not any("requests in the last" in line for line in seen):
            seen.append(lines.get(timeout=10))
        summary = next(line for line in seen if "requests in the last" in line)
        # (the client's own calls, as learning the cluster, count too: ok at least the two)
        found = re.search(
            r"requests in the last 0.5 s: (\d+) \(ok (\d+), InvalidPriority 1\)", summary
        )
        assert found is not None, summary
        total, ok = map(int, found.groups())
        assert ok >= 2 and total == ok + 1, summary
        assert not any("POST /v1/queues" in line for line in seen), seen
    finally:
        proc.kill()
        proc.wait()
        reader.join()
