"""Subscriptions through a cluster: a broker that does not lead the queue pushes its messages
(leased at the leader, by forwarded calls), and a partitioned queue's subscription is pushed
from every partition. Brokers are real processes on 127.0.0.1 that know each other."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_node import Node

from s3q.client import Client, connect


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Node, Node]]:
    store = f"file://{tmp_path}/store"
    ports = _port(), _port()
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    a = Node(store, {"visibility_timeout": 30.0}, port=ports[0], peers=[urls[1]])
    b = Node(store, {"visibility_timeout": 30.0}, port=ports[1], peers=[urls[0]])
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()


def _drain(client: Client, name: str, count: int) -> list[str]:
    got: list[str] = []
    with client.queue(name).subscribe(prefetch=50) as sub:
        while len(got) < count:
            msg = sub.get(10)
            assert msg is not None, f"{len(got)} of {count} pushed"
            got.append(msg.id)
            sub.ack(msg)
        sub.flush()
    return got


def test_a_broker_that_does_not_lead_the_queue_pushes_its_messages(
    pair: tuple[Node, Node],
) -> None:
    a, b = pair
    with Client(a.url, follow=False) as ca, Client(b.url, follow=False) as cb:
        ids = ca.queue("plain").enqueue_batch([b"m%d" % i for i in range(120)])
        assert a.led() == ["plain"] and b.led() == []
        assert _drain(cb, "plain", 120) == ids  # in the queue's order, each once
        st = ca.queue("plain").stats()
        assert (st.completed, st.processing, st.pending) == (120, 0, 0)
        assert b.led() == []  # served by forwarding: the leader stayed the leader


def test_a_partitioned_queues_subscription_is_pushed_from_every_partition(
    pair: tuple[Node, Node],
) -> None:
    a, b = pair
    with connect([a.url, b.url]) as c:
        assert c.queue("hot").configure(partitions=4)["partitions"] == 4
    with Client(a.url, follow=False) as ca, Client(b.url, follow=False) as cb:
        ca.queue("hot").stats(), cb.queue("hot").stats()  # (each learns the partitions)
        ids = [ca.queue("hot").enqueue(b"a%d" % i) for i in range(100)]
        ids += [cb.queue("hot").enqueue(b"b%d" % i) for i in range(100)]
        assert len(a.led()) == len(b.led()) == 2  # its partitions led by both brokers
        got = _drain(ca, "hot", 200)
        assert sorted(got) == sorted(ids)
        st = ca.queue("hot").stats()
        assert (st.completed, st.processing, st.pending) == (200, 0, 0)
