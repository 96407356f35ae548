"""How long a queue stalls when the broker leading it is killed with SIGKILL.

    python benchmarks/failover.py [--store file|s3] [--lease-ttl 10] [--brokers 3]
        [--log-objects 0] [--backlog 0] [--partitions 1]

Starts ``--brokers`` brokers over one store (a temporary directory, or a local moto S3 server).
Broker A leads queue ``q`` and first writes ``--log-objects`` log objects to it (one enqueue
each) and a backlog of ``--backlog`` messages (in batches of 1,000, each with a dedup id, so
the index the next leader reads holds that many ids); then a client of the other brokers
enqueues one message after another, each answered only once durable. A is killed with SIGKILL
mid-stream; another broker takes the queue over when A's writer lease lapses (at once on a
directory, whose lock dies with its process; after ``--lease-ttl`` on S3). Prints the longest
wait for one enqueue around the kill, which brokers led the queue after the kill (one
takeover, no ping-pong), and checks that every enqueue that was answered is in the queue
afterwards.

With ``--partitions N`` the queue is made with N partitions, led by the brokers in turn (each
broker the others' peer), and each enqueue carries a dedup id, which sends it to that id's
partition: the kill stops A's partitions alone. Printed besides: when each partition A led was
led again, and the longest wait of the enqueues that went to the other partitions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shlex
import sys
import tempfile
import threading
import time
from typing import Any

import httpx
import local_s3  # (also puts tests/support, the fault harness, on the path)
from fault_harness.cluster import holder

import s3q
from s3q.broker import spawn
from s3q.client import connect
from s3q.lease import broker_expiry
from s3q.store import open_store, queue_url

BATCH = 1000  # messages per enqueue of the backlog


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=["file", "s3"], default="file")
    parser.add_argument("--lease-ttl", type=float, default=10.0)
    parser.add_argument("--port", type=int, default=8781)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--log-objects", type=int, default=0)
    parser.add_argument("--backlog", type=int, default=0)
    parser.add_argument("--partitions", type=int, default=1)
    args = parser.parse_args()
    options: dict[str, Any] = {"lease_ttl": args.lease_ttl}
    moto = None
    tmp = tempfile.mkdtemp(prefix="s3q-failover-")
    if args.store == "file":
        store = f"file://{tmp}/store"
    else:
        moto = local_s3.start("failover")
        options.update(moto.store_options())
        store = "s3://failover/queues"
    urls = [f"http://127.0.0.1:{args.port + i}" for i in range(args.brokers)]
    brokers = [
        spawn(store, args.port + i, options, log_level="error", peers=urls[:i] + urls[i + 1 :])
        for i in range(args.brokers)
    ]
    (a, a_url), others = brokers[0], [url for _, url in brokers[1:]]
    logs = ["q"] + [f"q@{i}" for i in range(1, args.partitions)]
    leaders: dict[str, list[tuple[float, str]]] = {name: [] for name in logs}  # changes
    acked: list[str] = []
    errors: list[str] = []
    waits: list[tuple[float, float, str | None]] = []  # (start, how long, id answered)
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for url in others:
                with contextlib.suppress(httpx.HTTPError):
                    led = httpx.get(url + "/v1/queues", timeout=1).json()["queues"]
                    for name in logs:
                        seen = leaders[name]
                        if name in led and (not seen or seen[-1][1] != url):
                            seen.append((time.monotonic(), url))
            stop.wait(0.05)

    def produce() -> None:
        with connect(others) as client:
            q = client.queue("q")
            i = 0
            while not stop.is_set():
                started = time.monotonic()
                answered = None
                try:
                    answered = q.enqueue(f"m{i}".encode(), dedup_id=f"m{i}")
                    acked.append(answered)
                    i += 1
                except s3q.S3QError as exc:  # cut off by the kill: sent again, same dedup id
                    errors.append(type(exc).__name__)
                waits.append((started, time.monotonic() - started, answered))

    try:
        with connect(a_url) as first:
            if args.partitions > 1:
                first.queue("q").configure(partitions=args.partitions)
            first.queue("q").enqueue(b"a leads q")
            for i in range(args.log_objects):
                first.queue("q").enqueue(b"before %d" % i)
            for start in range(0, args.backlog, BATCH):
                first.queue("q").enqueue_batch(
                    [
                        {"payload": b"backlog %d" % i, "dedup_id": f"backlog-{i}"}
                        for i in range(start, min(start + BATCH, args.backlog))
                    ]
                )
        producer = threading.Thread(target=produce)
        watcher = threading.Thread(target=watch)
        producer.start()
        watcher.start()
        time.sleep(2.0)  # a steady stream before the kill
        killed_at = time.monotonic()
        a.kill()
        a.wait()
        lapses_at = None
        if args.store == "s3" and args.partitions == 1:  # (its last renewal is the one stored)
            lapses_at = asyncio.run(_lease_end(store, options)) - time.time() + time.monotonic()
        time.sleep(args.lease_ttl + 5.0 if args.store == "s3" else 5.0)
        stop.set()
        producer.join()
        watcher.join()
        with connect(others) as client:
            stats = client.queue("q").stats()
        held = {name for name, seen in leaders.items() if not seen or seen[0][0] > killed_at}
        ids = stats.queue_id.split(",")
        away = {ids[0] if name == "q" else ids[int(name[2:])] for name in held}
        around = [w for started, w, _ in waits if started >= killed_at - 1.0]
        untouched = [
            w
            for started, w, mid in waits
            if started >= killed_at - 1.0 and mid is not None and mid[:8] not in away
        ]
        before = sorted(w for started, w, _ in waits if started < killed_at)
        print(
            f"store {args.store}, lease_ttl {args.lease_ttl:g} s, {args.brokers} brokers, "
            f"{args.log_objects:,} log objects and a backlog of {args.backlog:,} written "
            "before the kill"
        )
        print(f"enqueues answered: {len(acked):,}; in the queue afterwards: {stats.pending:,}")
        print(f"typical enqueue before the kill: {before[len(before) // 2] * 1000:.1f} ms")
        print(f"longest wait for one enqueue around the kill: {max(around):.2f} s")
        print(f"errors the client saw: {len(errors)} {sorted(set(errors))}")
        if lapses_at is not None:
            served = min(s + w for s, w, mid in waits if mid is not None and s + w > lapses_at)
            print(
                f"A's lease lapsed {lapses_at - killed_at:+.2f} s after the kill; the queue "
                f"served again {served - lapses_at:.2f} s after that"
            )
        for name in logs:
            moves = [(when, url) for when, url in leaders[name] if when > killed_at - 0.5]
            print(
                f"{name}: led after the kill by "
                + (", ".join(f"{url} from {when - killed_at:+.2f} s" for when, url in moves) or "-")
                + (" (A led it)" if name in held else "")
            )
        if args.partitions > 1 and untouched:
            print(
                f"longest wait around the kill of an enqueue into a partition A did not lead: "
                f"{max(untouched):.2f} s ({len(untouched)} enqueues)"
            )
        expected = len(set(acked)) + 1 + args.log_objects + args.backlog
        assert stats.pending == expected, "an answered enqueue is missing"
    finally:
        stop.set()
        for proc, _ in brokers:
            proc.kill()
            proc.wait()
        if moto is not None:
            moto.stop()
    print("command: python " + shlex.join(sys.argv))


async def _lease_end(store: str, options: dict[str, Any]) -> float:
    """When the writer lease of queue ``q`` runs out (unix time): its broker's lease's end."""
    raw = open_store(queue_url(store, "q"), {k: v for k, v in options.items() if k != "lease_ttl"})
    try:
        lease = await holder(raw)
        assert lease is not None, "q has no writer lease"
        if lease.broker is None:
            return lease.expires_at or 0.0
        return await broker_expiry(raw, lease.broker)
    finally:
        await raw.close()


if __name__ == "__main__":
    main()
