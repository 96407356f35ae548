"""How long a queue stalls when the broker leading it is killed with SIGKILL.

    python benchmarks/failover.py [--store file|s3] [--lease-ttl 10] [--brokers 3]
        [--log-objects 0]

Starts ``--brokers`` brokers over one store (a temporary directory, or a local moto S3 server).
Broker A leads queue ``q`` and first writes ``--log-objects`` log objects to it (one enqueue
each); then a client of the other brokers enqueues one message after another, each answered
only once durable. A is killed with SIGKILL mid-stream; another broker takes the queue over
when A's writer lease lapses (at once on a directory, whose lock dies with its process; after
``--lease-ttl`` on S3). Prints the longest wait for one enqueue around the kill, which brokers
led the queue after the kill (one takeover, no ping-pong), and checks that every enqueue that
was answered is in the queue afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
import tempfile
import threading
import time
from typing import Any

import httpx
import local_s3

import s3q
from s3q.broker import spawn
from s3q.client import connect


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=["file", "s3"], default="file")
    parser.add_argument("--lease-ttl", type=float, default=10.0)
    parser.add_argument("--port", type=int, default=8781)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--log-objects", type=int, default=0)
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
    brokers = [spawn(store, args.port + i, options, log_level="error") for i in range(args.brokers)]
    (a, a_url), others = brokers[0], [url for _, url in brokers[1:]]
    leaders: list[tuple[float, str]] = []  # (when, leader) each time it changed
    acked: list[str] = []
    errors: list[str] = []
    waits: list[tuple[float, float]] = []  # (when it started, how long it took)
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for url in others:
                with contextlib.suppress(httpx.HTTPError):
                    led = httpx.get(url + "/v1/queues", timeout=1).json()["queues"]
                    if "q" in led and (not leaders or leaders[-1][1] != url):
                        leaders.append((time.monotonic(), url))
            stop.wait(0.05)

    def produce() -> None:
        with connect(others) as client:
            q = client.queue("q")
            i = 0
            while not stop.is_set():
                started = time.monotonic()
                try:
                    acked.append(q.enqueue(f"m{i}".encode(), dedup_id=f"m{i}"))
                    i += 1
                except s3q.S3QError as exc:  # cut off by the kill: sent again, same dedup id
                    errors.append(type(exc).__name__)
                waits.append((started, time.monotonic() - started))

    try:
        with connect(a_url) as first:
            first.queue("q").enqueue(b"a leads q")
            for i in range(args.log_objects):
                first.queue("q").enqueue(b"before %d" % i)
        producer = threading.Thread(target=produce)
        watcher = threading.Thread(target=watch)
        producer.start()
        watcher.start()
        time.sleep(2.0)  # a steady stream before the kill
        killed_at = time.monotonic()
        a.kill()
        a.wait()
        time.sleep(args.lease_ttl + 5.0 if args.store == "s3" else 5.0)
        stop.set()
        producer.join()
        watcher.join()
        around = [w for started, w in waits if started >= killed_at - 1.0]
        before = sorted(w for started, w in waits if started < killed_at)
        with connect(others) as client:
            stats = client.queue("q").stats()
        print(
            f"store {args.store}, lease_ttl {args.lease_ttl:g} s, {args.brokers} brokers, "
            f"{args.log_objects:,} log objects written before the kill"
        )
        print(f"enqueues answered: {len(acked):,}; in the queue afterwards: {stats.pending:,}")
        print(f"typical enqueue before the kill: {before[len(before) // 2] * 1000:.1f} ms")
        print(f"longest wait for one enqueue around the kill: {max(around):.2f} s")
        print(f"errors the client saw: {len(errors)} {sorted(set(errors))}")
        print(
            "leaders after the kill: "
            + ", ".join(f"{url} from {when - killed_at:+.2f} s" for when, url in leaders)
        )
        expected = len(set(acked)) + 1 + args.log_objects
        assert stats.pending == expected, "an answered enqueue is missing"
    finally:
        stop.set()
        for proc, _ in brokers:
            proc.kill()
            proc.wait()
        if moto is not None:
            moto.stop()
    print("command: python " + shlex.join(sys.argv))


if __name__ == "__main__":
    main()
