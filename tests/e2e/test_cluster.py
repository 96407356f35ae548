"""Several brokers over one store: each queue led by one, the others forwarding to it, and a
takeover when the leader is killed with SIGKILL. Brokers are real processes on 127.0.0.1."""

from __future__ import annotations

import asyncio
import collections
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from cluster_node import Node
from conftest import MotoServer, free_port, state_of

import s3q
from s3q.client import WRITER_HEADER, Client, answers, connect, connect_async


@pytest.fixture(params=["file", "s3"])
def cluster_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, dict[str, Any]]]:
    if request.param == "file":
        yield f"file://{tmp_path}/store", {}
    else:
        server: MotoServer = request.getfixturevalue("moto_server")
        bucket: str = request.getfixturevalue("s3_bucket")
        # a short lease, so that the takeover after a SIGKILL comes quickly
        yield f"s3://{bucket}/{tmp_path.name}", {**server.store_options(), "lease_ttl": 2.0}


@pytest.fixture
def two_nodes(cluster_store: tuple[str, dict[str, Any]]) -> Iterator[tuple[Node, Node]]:
    store, options = cluster_store
    a = Node(store, {**options, "visibility_timeout": 3.0})
    b = Node(store, {**options, "visibility_timeout": 3.0})
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()


def test_any_node_serves_a_queue_its_leader_holds(two_nodes: tuple[Node, Node]) -> None:
    a, b = two_nodes
    with connect(a.url) as ca, connect(b.url) as cb:
        qa, qb = ca.queue("shared"), cb.queue("shared")
        first = qa.enqueue(b"via a")  # a opens the queue: it leads it
        second = qb.enqueue(b"via b", priority=5)
        assert a.led() == ["shared"] and b.led() == []  # b forwarded, it did not open it
        got = qb.dequeue(2)
        assert [(m.id, m.payload) for m in got] == [(second, b"via b"), (first, b"via a")]
        qb.complete(got[0])
        before = time.time()
        retry_at = qa.fail(got[1], "boom")  # the retry time, of a message leased through b
        after = time.time()
        # the first retry waits retry_delay (1 s by default) with equal jitter: 0.5 s to 1 s
        assert retry_at is not None and before + 0.5 <= retry_at <= after + 1.0, (before, retry_at)
        assert qb.status(first) is s3q.MessageStatus.RETRY
        assert qb.status(second) is s3q.MessageStatus.COMPLETED
        # the same queue seen from both (lease renewals move the request counters in between)
        assert state_of(qa.stats()) == state_of(qb.stats())
        # an error raised by the leader reaches the client of the other node as itself
        with pytest.raises(s3q.ReceiptExpired):
            qb.complete(got[0])
        with pytest.raises(s3q.InvalidPriority):
            qb.enqueue(b"x", priority=10**9)


def test_queues_spread_over_nodes(two_nodes: tuple[Node, Node]) -> None:
    a, b = two_nodes
    with connect(a.url) as ca, connect(b.url) as cb:
        ca.queue("one").enqueue(b"1")
        cb.queue("two").enqueue(b"2")
        ca.queue("two").enqueue(b"2 again")
        cb.queue("one").enqueue(b"1 again")
        assert (a.led(), b.led()) == (["one"], ["two"])
        assert ca.queue("two").stats().pending == cb.queue("one").stats().pending == 2


def test_a_cluster_client_spreads_queues_over_the_brokers(two_nodes: tuple[Node, Node]) -> None:
    a, b = two_nodes
    names = [f"spread-{i}" for i in range(16)]
    with connect([a.url, b.url]) as one, connect(f"{b.url},{a.url}") as other:
        for name in names:
            one.queue(name).enqueue(b"x")
            other.queue(name).enqueue(b"y")  # every client picks the same broker for a queue
        led_a, led_b = set(a.led()), set(b.led())
        assert led_a | led_b == set(names) and not led_a & led_b
        assert led_a and led_b, "16 queues all on one broker: the order is not spread"
        assert {one.queue(n).stats().pending for n in names} == {2}


class Ledger:
    """What the producers and consumers of the failover test saw acknowledged."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked_more = threading.Condition(self.lock)  # notified as acked grows
        self.acked: dict[str, str] = {}  # payload -> id, once its enqueue was answered
        self.completed: collections.Counter[str] = collections.Counter()  # id -> completes
        self.payload_of: dict[str, str] = {}
        self.after_kill = collections.Counter[str]()
        self.killed = threading.Event()
        self.errors = collections.Counter[str]()

    def note_error(self, exc: Exception) -> None:
        with self.lock:
            self.errors[type(exc).__name__] += 1


def produce(client: Client, ledger: Ledger, names: list[str], stop: threading.Event) -> None:
    q = client.queue("work")
    for name in names:
        while not stop.is_set():
            try:
                # the dedup id makes sending again after an unknown outcome safe
                id = q.enqueue(name.encode(), dedup_id=name)
            except s3q.S3QError as exc:
                ledger.note_error(exc)
                continue
            with ledger.lock:
                ledger.acked[name] = id
                ledger.acked_more.notify_all()
                if ledger.killed.is_set():
                    ledger.after_kill["enqueued"] += 1
            break


def consume(client: Client, ledger: Ledger, stop: threading.Event) -> None:
    q = client.queue("work")
    while not stop.is_set():
        try:
            messages = q.dequeue(10, wait=0.5)
        except s3q.S3QError as exc:
            ledger.note_error(exc)
            continue
        for m in messages:
            try:
                q.complete(m)
            except s3q.S3QError as exc:  # redelivered later; not counted
                ledger.note_error(exc)
                continue
            with ledger.lock:
                ledger.completed[m.id] += 1
                ledger.payload_of[m.id] = m.payload.decode()
                if ledger.killed.is_set():
                    ledger.after_kill["completed"] += 1


def test_leader_killed_work_goes_on_and_nothing_acknowledged_is_lost(
    two_nodes: tuple[Node, Node],
) -> None:
    a, b = two_nodes
    with connect(a.url) as warm:
        warm.queue("work").enqueue(b"warm-up", dedup_id="warm-up")  # a leads "work"
    assert a.led() == ["work"]
    ledger = Ledger()
    ledger.acked["warm-up"] = "?"
    total, producers = 1200, 4
    names = [f"m{i:05d}" for i in range(total)]
    stop_producing, stop_consuming = threading.Event(), threading.Event()
    # clients know both brokers (in either order: they agree on which to ask for a queue)
    clients = [connect([a.url, b.url]) if i % 2 else connect([b.url, a.url]) for i in range(6)]
    threads = [
        threading.Thread(
            target=produce, args=(clients[i], ledger, names[i::producers], stop_producing)
        )
        for i in range(producers)
    ] + [
        threading.Thread(target=consume, args=(clients[producers + i], ledger, stop_consuming))
        for i in range(2)
    ]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 60
        with ledger.acked_more:
            made_progress = ledger.acked_more.wait_for(
                lambda: len(ledger.acked) >= total // 3, timeout=60
            )
        assert made_progress, "producers made no progress"
        a.proc.kill()  # SIGKILL: no lease released, commits cut short
        a.proc.wait()
        ledger.killed.set()
        for t in threads[:producers]:
            t.join(90)
            assert not t.is_alive(), "a producer is stuck"
        assert len(ledger.acked) == total + 1
        with connect(b.url) as cb:
            queue = cb.queue("work")
            while True:  # consumers drain what is left, redeliveries included
                stats = queue.stats()
                if stats.completed == total + 1 or time.monotonic() > deadline + 60:
                    break
                time.sleep(0.05)  # watching threads' progress: no event to await
    finally:
        stop_producing.set()
        stop_consuming.set()
        for t in threads:
            t.join(30)
        for c in clients:
            c.close()

    assert ledger.after_kill["enqueued"] > 0 and ledger.after_kill["completed"] > 0
    assert b.led() == ["work"]  # b took the queue over
    twice = {i: n for i, n in ledger.completed.items() if n != 1}
    assert not twice, f"completed more than once: {twice}"
    for id in ledger.completed:  # completed under the id its enqueue was answered with
        assert ledger.acked[ledger.payload_of[id]] in (id, "?")
    with connect(b.url) as cb:
        queue = cb.queue("work")
        stats = queue.stats()
        # nothing enqueued twice (retries carried a dedup id), nothing left over
        counts = (stats.pending, stats.delayed, stats.processing, stats.retry, stats.dead)
        assert counts == (0, 0, 0, 0, 0) and stats.completed == total + 1, stats
        # every acknowledged message is completed (a consumer whose complete was cut short by
        # the kill did not count it, but the broker had made it durable: completed all the same)
        statuses = {
            name: queue.status(id) for name, id in ledger.acked.items() if name != "warm-up"
        }
        wrong = {n: s for n, s in statuses.items() if s is not s3q.MessageStatus.COMPLETED}
        assert not wrong, wrong
    print(f"\nerrors seen by clients during the failover: {dict(ledger.errors)}")


def test_a_leader_stopped_with_sigterm_hands_its_queues_over_at_once(
    moto_server: MotoServer, s3_bucket: str, tmp_path: Path
) -> None:
    """A long lease (60 s, beyond the 30 s a forwarding broker waits): the other broker can
    only serve the queue if the stopping leader released its lease."""
    store = f"s3://{s3_bucket}/{tmp_path.name}"
    options = {**moto_server.store_options(), "lease_ttl": 60.0}
    a, b = Node(store, options), Node(store, options)
    try:
        with connect(a.url) as ca, connect(b.url) as cb:
            first = ca.queue("handover").enqueue(b"before")
            assert cb.queue("handover").stats().pending == 1  # forwarded to a
            a.stop()  # SIGTERM: commits finish, leases are released
            assert a.proc.returncode in (0, -15)
            second = cb.queue("handover").enqueue(b"after")
            assert b.led() == ["handover"]
            got = cb.queue("handover").dequeue(2)
            assert [(m.id, m.payload) for m in got] == [(first, b"before"), (second, b"after")]
    finally:
        a.stop()
        b.stop()


def test_a_paused_leader_is_taken_over_and_its_late_commits_are_refused(
    moto_server: MotoServer, s3_bucket: str, tmp_path: Path
) -> None:
    """SIGSTOP the leader: once its lease lapses the forwarding broker leads the queue, and a
    deduplicated enqueue forwarded to the paused leader is made again there, once (a plain
    one ends in OutcomeUnknown: ``test_cluster_stall``); the old leader, woken by SIGCONT,
    acknowledges nothing: it forwards to the new one. (On S3: a local directory's lease is a
    lock the paused process still holds.)"""
    store = f"s3://{s3_bucket}/{tmp_path.name}"
    options = {**moto_server.store_options(), "lease_ttl": 1.5}
    a, b = Node(store, options), Node(store, options)
    try:
        with connect(a.url, timeout=30) as ca, connect(b.url, timeout=30) as cb:
            first = ca.queue("held").enqueue(b"before", dedup_id="before")
            assert a.led() == ["held"]
            a.proc.send_signal(signal.SIGSTOP)
            try:
                during = cb.queue("held").enqueue(b"during", dedup_id="during")
                assert b.led() == ["held"]
                again = cb.queue("held").enqueue(b"during", dedup_id="during")  # a retry
                assert again == during
                after = cb.queue("held").enqueue(b"after", dedup_id="after")
            finally:
                a.proc.send_signal(signal.SIGCONT)
            # the old leader serves the queue through the new one
            assert ca.queue("held").enqueue(b"after", dedup_id="after") == after
            assert ca.queue("held").stats().pending == 3
            assert b.led() == ["held"] and a.led() == []
            got = cb.queue("held").dequeue(10)
            assert sorted(m.id for m in got) == sorted([first, again, after])
    finally:
        a.stop()
        b.stop()


def _read_aheads(node: Node) -> dict[str, float]:
    """The broker's ``s3q_broker_read_aheads`` by outcome, from its /metrics."""
    found: dict[str, float] = {}
    for line in httpx.get(node.url + "/metrics").text.splitlines():
        if line.startswith('s3q_broker_read_aheads{outcome="'):
            outcome, value = line[len('s3q_broker_read_aheads{outcome="') :].split('"} ')
            found[outcome] = float(value)
    return found


def test_a_killed_leaders_queue_is_read_while_its_lease_runs_out(
    moto_server: MotoServer, s3_bucket: str, tmp_path: Path
) -> None:
    """SIGKILL the leader of a queue with a checkpoint and a log after it: the broker its calls
    go to reads the queue while the dead leader's lease runs out, and its open after the lapse
    reads on from that (``taken``), with every message there, once."""
    store = f"s3://{s3_bucket}/{tmp_path.name}"
    options = {**moto_server.store_options(), "lease_ttl": 3.0}
    a, b = Node(store, options), Node(store, options)
    try:
        with connect(a.url, timeout=30) as ca:
            queue = ca.queue("big")
            sent = [queue.enqueue(b"m%d" % i, dedup_id=f"d{i}") for i in range(20)]
            queue.compact()  # a checkpoint, then a log after it
            sent += [queue.enqueue(b"m%d" % i, dedup_id=f"d{i}") for i in range(20, 30)]
        assert a.led() == ["big"]
        assert _read_aheads(b) == {"started": 0, "taken": 0, "dropped": 0}
        a.proc.kill()
        a.proc.wait()
        with connect(b.url, timeout=30) as cb:
            queue = cb.queue("big")
            after = queue.enqueue(b"after", dedup_id="after")
            assert b.led() == ["big"]
            assert _read_aheads(b) == {"started": 1, "taken": 1, "dropped": 0}
            assert queue.enqueue(b"m3", dedup_id="d3") == sent[3]  # (dedup ids known)
            got = queue.dequeue(40)
            assert [m.id for m in got] == [*sent, after]
    finally:
        a.stop()
        b.stop()


# --------------------------------------------------------------------------- trust


TOKEN = "cluster-secret-token"


class Collector:
    """A listening socket the test controls, standing for whatever a forged lease names: it
    records every byte sent to it, and answers each request with ``answer`` (or closes)."""

    def __init__(self, answer: bytes | None = None) -> None:
        self.answer = answer
        self.received = bytearray()
        self.requests: list[bytes] = []  # each request as sent: head and body
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                    self.received += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":", 1)[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                while len(body) < length:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    body += chunk
                    self.received += chunk
                self.requests.append(head + b"\r\n\r\n" + body)
                if self.answer is not None:
                    conn.sendall(self.answer)
            except OSError:
                pass

    def close(self) -> None:
        self._server.close()


def msgpack_answer(body: Any) -> bytes:
    content = msgspec.msgpack.encode(body)
    head = (
        "HTTP/1.1 200 OK\r\ncontent-type: application/msgpack\r\n"
        f"content-length: {len(content)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + content


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    try:
        yield c
    finally:
        c.close()


def forge_lease(store: str, queue: str, address: str) -> Node:
    """A broker that opens ``queue`` and names ``address`` in its writer lease, as anyone who
    can write the store could: the other brokers find the queue led by ``address``."""
    forger = Node(store, {}, tokens={TOKEN}, advertise=address)
    with connect(forger.url, token=TOKEN) as client:
        client.queue(queue).enqueue(b"held")
    assert forger.led() == [queue]
    return forger


@pytest.mark.parametrize("listed", [False, True], ids=["no-peers", "other-peers"])
def test_a_lease_naming_an_address_not_among_the_peers_gets_no_call_and_no_token(
    tmp_path: Path, collector: Collector, listed: bool
) -> None:
    """Whatever address a lease names, a broker with tokens forwards only to its configured
    peers (none by default): the call answers a precise 503, the address receives nothing."""
    store = f"file://{tmp_path}/store"
    forger = forge_lease(store, "stolen", collector.url)
    settings: dict[str, Any] = {"tokens": {TOKEN}}
    if listed:
        settings["peers"] = [forger.url, f"http://127.0.0.1:{free_port()}/"]
    b = Node(store, {}, **settings)
    try:
        answer = httpx.post(
            b.url + "/v1/queues/stolen/enqueue",
            content=msgspec.msgpack.encode({"payload": b"secret payload"}),
            headers={
                **b.headers,
                "content-type": "application/msgpack",
                "accept": "application/json",
            },
            timeout=60,
        )
        assert answer.status_code == 503, answer.text
        error = answer.json()
        assert error["error"] == "Unavailable"
        assert collector.url in error["message"] and "not a configured peer" in error["message"]
        with connect(b.url, token=TOKEN) as client:
            if not listed:
                with pytest.raises(s3q.Unavailable, match="peer"):
                    client.queue("stolen").stats()
            else:  # the client follows b's configured peers: the forger's broker serves it
                assert client.queue("stolen").stats().total_enqueued == 1
        time.sleep(0.2)  # anything sent would have arrived by now
        assert bytes(collector.received) == b""
        assert b.led() == []
    finally:
        b.stop()
        forger.stop()


def test_a_configured_peer_gets_a_signed_call_not_the_token(tmp_path: Path) -> None:
    """A forwarded call carries an HMAC of itself, bound to its destination and to a minute,
    keyed by the token: not the token. What a peer (or a collector among them) receives cannot
    be sent to another broker."""
    collector = Collector(answer=msgpack_answer({"id": "from-the-peer"}))
    store = f"file://{tmp_path}/store"
    forger = forge_lease(store, "signed", collector.url)
    b = Node(store, {}, tokens={TOKEN}, peers=[collector.url + "/"])  # normalised: one peer
    try:
        with connect(b.url, token=TOKEN) as client:
            assert client.queue("signed").enqueue(b"forwarded") == "from-the-peer"
        [request] = collector.requests
        assert TOKEN.encode() not in request
        head, _, body = request.partition(b"\r\n\r\n")
        assert b"authorization: s3q-hmac-sha256 " in head.lower()
        assert b"bearer" not in head.lower()
        assert body and msgspec.msgpack.decode(body)["payload"] == b"forwarded"
        # the captured request, sent as it is to a broker of the cluster: refused
        lines = head.decode().split("\r\n")
        method, path, _ = lines[0].split(" ")
        headers = dict(line.split(": ", 1) for line in lines[1:])
        headers.pop("Host", None)
        headers.pop("host", None)
        replayed = httpx.request(method, b.url + path, content=body, headers=headers)
        assert replayed.status_code == 403, replayed.text
        assert "signature" in replayed.text
    finally:
        b.stop()
        forger.stop()
        collector.close()


def test_answers_name_the_writer_and_a_forwarding_broker_passes_it_on(tmp_path: Path) -> None:
    """Every answer about a queue names its writer (s3q-writer), the leader's when another
    broker forwarded the call, errors too; a takeover shows as a new writer; concurrent calls
    within answers() each see their own."""
    store = f"file://{tmp_path}/store"
    a, b = Node(store, {}), Node(store, {})
    try:
        with connect(a.url) as ca, connect(b.url) as cb:
            with answers() as seen:
                ca.queue("shared").enqueue(b"x")  # a opens the queue: it leads it
            first = seen.writer
            assert first and a.led() == ["shared"]
            with answers() as seen:
                [msg] = cb.queue("shared").dequeue()  # b forwards to a
            assert seen.writer == first and b.led() == []
            cb.queue("shared").complete(msg)
            with answers() as seen, pytest.raises(s3q.ReceiptExpired):
                cb.queue("shared").complete(msg)
            assert seen.writer == first
            assert httpx.get(f"{b.url}/v1/queues/shared/stats").headers[WRITER_HEADER] == first
            cb.queue("other").enqueue(b"y")  # b opens and leads this one

            async def both() -> list[str | None]:
                async with connect_async(a.url) as client:  # a forwards "other" to b

                    async def named(queue: str) -> str | None:
                        with answers() as seen:
                            for _ in range(5):  # interleaved with the other task's calls
                                await client.queue(queue).stats()
                        return seen.writer

                    return list(await asyncio.gather(named("shared"), named("other")))

            mine, others = asyncio.run(both())
            assert mine == first and others not in (None, first)

            a.stop()  # its lease released: b takes the queue over at the next call
            with answers() as seen:
                cb.queue("shared").enqueue(b"z")
            assert seen.writer not in (None, first, others)
            assert b.led() == ["other", "shared"]
    finally:
        a.stop()
        b.stop()


def test_brokers_with_tokens_forward_to_their_configured_peers(tmp_path: Path) -> None:
    store = f"file://{tmp_path}/store"
    ports = [free_port(), free_port()]
    peers = [f"http://127.0.0.1:{port}" for port in ports]
    a = Node(store, {}, port=ports[0], tokens={TOKEN, "another"}, peers=peers)
    b = Node(store, {}, port=ports[1], tokens={TOKEN, "another"}, peers=peers)
    try:
        with connect(a.url, token=TOKEN) as ca, connect(b.url, token="another") as cb:
            first = ca.queue("shared").enqueue(b"via a")
            second = cb.queue("shared").enqueue(b"via b", priority=5)
            assert a.led() == ["shared"] and b.led() == []  # b forwarded
            got = cb.queue("shared").dequeue(2, wait=1)
            assert [m.id for m in got] == [second, first]
            cb.queue("shared").complete_batch(got)
            assert ca.queue("shared").stats().completed == 2
    finally:
        a.stop()
        b.stop()


def test_a_broker_checks_the_signature_of_a_forwarded_call(tmp_path: Path) -> None:
    from s3q.broker.peerauth import AUTH_SCHEME, sign

    a = Node(f"file://{tmp_path}/store", {}, tokens={"other", TOKEN})
    body = msgspec.msgpack.encode({"payload": b"x"})
    path = "/v1/queues/checked/enqueue"

    def send(
        *, key: str = TOKEN, target: str = a.url, at: float | None = None, content: bytes = body
    ) -> httpx.Response:
        headers = sign(key, target, "POST", path, {}, body, now=at)
        headers.update({"content-type": "application/msgpack", "x-s3q-forwarded": "1"})
        return httpx.post(a.url + path, content=content, headers=headers)

    try:
        assert send().status_code == 200  # signed with any of the broker's tokens
        assert send(key="other", target=a.url + "/").status_code == 200
        refused = {
            "wrong key": send(key="guess"),
            "another broker": send(target="http://127.0.0.1:1"),
            "stale": send(at=time.time() - 600),
            "from the future": send(at=time.time() + 600),
            "another body": send(content=msgspec.msgpack.encode({"payload": b"y"})),
        }
        assert {k: r.status_code for k, r in refused.items()} == dict.fromkeys(refused, 403)
        assert "body does not match" in refused["another body"].json()["message"]
        assert "clock" in refused["stale"].json()["message"]
        garbled = httpx.post(
            a.url + path,
            content=body,
            headers={
                "authorization": f"{AUTH_SCHEME} nonsense",
                "content-type": "application/msgpack",
            },
        )
        assert garbled.status_code == 401
        with connect(a.url, token=TOKEN) as client:
            assert client.queue("checked").stats().pending == 2  # the refused changed nothing
    finally:
        a.stop()


def test_serve_refuses_a_peer_that_is_not_a_url(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from s3q.cli import main

    args = ["serve", "--store", f"file://{tmp_path}", "--port", "0", "--peer", "node-a:8765"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert "not a broker URL: 'node-a:8765'" in result.output
