"""Several brokers over one store: each queue led by one, the others forwarding to it, and a
takeover when the leader is killed with SIGKILL. Brokers are real processes on 127.0.0.1."""

from __future__ import annotations

import collections
import hashlib
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from conftest import MotoServer, free_port, state_of

import s3q
from s3q.broker import spawn
from s3q.client import Client, connect


class Node:
    """``s3q.broker.serve`` in a child process."""

    def __init__(self, store: str, options: dict[str, Any], **settings: Any) -> None:
        self.proc, self.url = spawn(store, options=options, **settings)
        tokens = settings.get("tokens")
        self.headers = {"authorization": f"Bearer {min(tokens)}"} if tokens else {}

    def led(self) -> list[str]:
        """The queues this broker leads."""
        return list(httpx.get(self.url + "/v1/queues", headers=self.headers).json()["queues"])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


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
        assert qa.fail(got[1], "boom") is not None  # the retry time comes back through b
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
        while len(ledger.acked) < total // 3:
            assert time.monotonic() < deadline, "producers made no progress"
            time.sleep(0.01)  # watching threads' progress: no event to await
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
    """SIGSTOP the leader: a call forwarded to it ends in OutcomeUnknown once its lease
    lapses, the forwarding broker leads the queue from then on, and the old leader, woken by
    SIGCONT, acknowledges nothing: it forwards to the new one. (On S3: a local directory's
    lease is a lock the paused process still holds.)"""
    store = f"s3://{s3_bucket}/{tmp_path.name}"
    options = {**moto_server.store_options(), "lease_ttl": 1.5}
    a, b = Node(store, options), Node(store, options)
    try:
        with connect(a.url, timeout=30) as ca, connect(b.url, timeout=30) as cb:
            first = ca.queue("held").enqueue(b"before", dedup_id="before")
            assert a.led() == ["held"]
            a.proc.send_signal(signal.SIGSTOP)
            try:
                with pytest.raises(s3q.OutcomeUnknown, match="stopped answering"):
                    cb.queue("held").enqueue(b"during", dedup_id="during")
                assert b.led() == ["held"]
                again = cb.queue("held").enqueue(b"during", dedup_id="during")  # a safe retry
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
