"""A partitioned queue at its edges, through a cluster of two brokers over one S3 store (moto).

A queue of 4 partitions, 2 led by each broker (lease ttl ``--lease-ttl``); calls through broker
``b`` with a client that talks to it alone (``follow=False``).

1. **Woken long polls.** ``dequeue(10, wait=5)`` through ``b`` while a batch of 10 messages a
   partition (dedup ids placed in each) lands in every partition (sent through ``a``),
   ``--polls`` times, through a third broker ``c`` that leads none of them, its event loop
   busy for a moment as the batch lands (``c`` stopped ``--pause`` seconds). Printed: the
   largest answer (at most 10 is the promise), how many answers were over 10, and whether every
   message was then delivered once within a few seconds (nothing held until its visibility
   timeout of 60 s).
2. **An outage.** A producer (no key: into ``b``'s own partitions, 10 messages every 50 ms,
   fewer than the consumer could take) and a consumer
   (``dequeue(10, wait=1)`` + ``complete_batch``) through ``b``; ``a`` is killed (SIGKILL) and
   its partitions taken over by ``b`` once their leases lapse. Printed: messages delivered a
   second in the ``--before`` seconds before the kill, and between the kill and ``b`` leading
   every partition; the longest dequeue in each.

    python benchmarks/partition_edges.py [--polls 100] [--lease-ttl 4]
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import threading
import time
import uuid

import local_s3
from cluster_node import Node

import s3q
from s3q.client import Client, connect

try:
    from s3q.partitions.placement import home
except ImportError:  # a build before the house's folders (old against new)
    from s3q.partitions import home  # type: ignore[attr-defined,no-redef]

NAME, COUNT = "edges", 4


def _pair(store: str, options: dict[str, object]) -> tuple[Node, Node]:
    import socket

    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(int(s.getsockname()[1]))
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    a = Node(store, options, port=ports[0], peers=[urls[1]])
    b = Node(store, options, port=ports[1], peers=[urls[0]])
    with connect([a.url, b.url]) as c:
        c.queue(NAME).configure(partitions=COUNT)
    with Client(a.url, follow=False) as ca, Client(b.url, follow=False) as cb:
        ca.queue(NAME).stats()
        cb.queue(NAME).stats()
        deadline = time.monotonic() + 30
        while len(a.led()) + len(b.led()) < COUNT:  # each broker opens what it is given
            ca.queue(NAME).enqueue(b"warm")
            cb.queue(NAME).enqueue(b"warm")
            assert time.monotonic() < deadline, "the partitions were not led"
        while cb.queue(NAME).dequeue(100, visibility_timeout=1):
            pass
    return a, b


def woken_polls(a: Node, b: Node, polls: int, pause: float) -> dict[str, object]:
    """Polls through a third broker that leads none of the partitions."""
    c = Node(a.store, a.options, peers=[a.url, b.url])
    try:
        assert not c.led()
        return _woken(a, c, polls, pause)
    finally:
        c.stop()


def _woken(a: Node, c: Node, polls: int, pause: float) -> dict[str, object]:
    keyed: dict[int, list[str]] = {p: [] for p in range(COUNT)}
    k = 0
    while any(len(keys) < 10 * polls for keys in keyed.values()):  # dedup ids by partition
        if len(keyed[home(f"d{k}", COUNT)]) < 10 * polls:
            keyed[home(f"d{k}", COUNT)].append(f"d{k}")
        k += 1
    sizes: list[int] = []
    sent: list[str] = []
    received: list[str] = []
    with Client(a.url, follow=False) as ca, Client(c.url, follow=False) as cb:
        qa, qb = ca.queue(NAME), cb.queue(NAME)
        for n in range(polls):
            batch = [
                {"payload": b"p", "dedup_id": key}
                for keys in keyed.values()
                for key in keys[10 * n : 10 * n + 10]
            ]
            answer: list[s3q.Message] = []
            poll = threading.Thread(
                target=lambda into=answer: into.extend(
                    qb.dequeue(10, visibility_timeout=60, wait=5)
                )
            )
            poll.start()
            time.sleep(0.05)  # (a benchmark: the poll is parked by then, mostly)
            if pause:  # c's event loop busy for a moment: the answers come in together
                os.kill(c.proc.pid, signal.SIGSTOP)
            sent += qa.enqueue_batch(batch)
            if pause:
                time.sleep(pause)
                os.kill(c.proc.pid, signal.SIGCONT)
            poll.join()
            sizes.append(len(answer))
            received += [m.id for m in answer]
            qb.complete_batch(answer)
        deadline = time.monotonic() + 10
        while len(set(received)) < len(sent) and time.monotonic() < deadline:
            got = qb.dequeue(100, visibility_timeout=60, wait=1)
            received += [m.id for m in got]
            qb.complete_batch(got)
        stats = qa.stats()
    return {
        "messages left (pending, processing)": (stats.pending, stats.processing),
        "polls": polls,
        "largest answer": max(sizes),
        "answers over 10": sum(1 for s in sizes if s > 10),
        "all delivered within 10 s": sorted(set(received)) == sorted(sent),
        "delivered twice": len(received) - len(set(received)),
    }


def outage(a: Node, b: Node, before: float, lease_ttl: float) -> dict[str, object]:
    stop = threading.Event()
    delivered: list[tuple[float, int]] = []
    slowest: list[tuple[float, float]] = []

    def produce() -> None:
        with Client(b.url, follow=False) as cb:
            q = cb.queue(NAME)
            while not stop.is_set():
                q.enqueue_batch([b"x"] * 10)
                time.sleep(0.05)

    def consume() -> None:
        with Client(b.url, follow=False) as cb:
            q = cb.queue(NAME)
            while not stop.is_set():
                began = time.monotonic()
                got = q.dequeue(10, visibility_timeout=60, wait=1)
                ended = time.monotonic()
                delivered.append((ended, len(got)))
                slowest.append((ended, ended - began))
                if got:
                    q.complete_batch(got)

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    time.sleep(before)
    killed = time.monotonic()
    a.proc.kill()
    a.proc.wait()
    deadline = killed + 4 * lease_ttl + 10
    while len(b.led()) < COUNT and time.monotonic() < deadline:
        time.sleep(0.05)
    taken = time.monotonic()
    stop.set()
    for t in threads:
        t.join()

    def rate(lo: float, hi: float) -> float:
        return sum(n for at, n in delivered if lo <= at < hi) / max(hi - lo, 1e-9)

    def longest(lo: float, hi: float) -> float:
        return max((took for at, took in slowest if lo <= at < hi), default=0.0)

    return {
        "delivered/s before the kill": round(rate(killed - before, killed)),
        "delivered/s until the takeover": round(rate(killed, taken)),
        "kill to takeover s": round(taken - killed, 2),
        "longest dequeue before s": round(longest(killed - before, killed), 3),
        "longest dequeue during s": round(longest(killed, taken), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--polls", type=int, default=100)
    parser.add_argument("--lease-ttl", type=float, default=4.0)
    parser.add_argument("--before", type=float, default=3.0)
    parser.add_argument(
        "--pause", type=float, default=0.2, help="seconds c is stopped while the batch lands"
    )
    args = parser.parse_args()
    print("command: python " + shlex.join(sys.argv), flush=True)
    server = local_s3.start("edges")
    options = {**server.store_options(), "lease_ttl": args.lease_ttl, "visibility_timeout": 60}
    try:
        a, b = _pair(f"s3://edges/{uuid.uuid4().hex[:8]}", options)
        try:
            for key, value in woken_polls(a, b, args.polls, args.pause).items():
                print(f"woken polls: {key}: {value}", flush=True)
        finally:
            a.stop()
            b.stop()
        a, b = _pair(f"s3://edges/{uuid.uuid4().hex[:8]}", options)
        try:
            for key, value in outage(a, b, args.before, args.lease_ttl).items():
                print(f"outage: {key}: {value}", flush=True)
        finally:
            a.stop()
            b.stop()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
