"""One caller, one durable call at a time: the latency a web handler or a task framework sees.

    python benchmarks/one_at_a_time.py [--calls 2000] [--rounds 1] [--src PATH ...]

For each ``--src`` (a PYTHONPATH holding the ``s3q`` package to serve with; default: the one
this script imports), ``s3q serve`` on a temporary file:// store (durable: each call's commit
is fsynced with its directory before the answer), driven from this process one call at a time:
``--calls`` native enqueues of 1 KiB through s3q's blocking client, as many dequeue (one
message) + complete pairs, and as many SendMessage calls through boto3 (SigV4-signed). Beside
them, in the same run:

- durable Redis (``redis-server --appendonly yes --appendfsync always``, redis-py with hiredis):
  ``LPUSH`` of 1 KiB, one at a time;
- boto3's own floor: SendMessage answered by a server that writes a canned answer at once
  (benchmarks/floor_servers.py ``sqs``): what boto3 costs a call, with no queue behind it.

Prints p50 and p99 latency (ms) per kind of call, and the command.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from brokers import RedisServer, free_port, wait_for_port
from request_cpu import PAYLOAD, broker, sqs_client

from s3q.client import connect

BODY = PAYLOAD.decode()


def latencies(calls: int, call: Callable[[int], Any]) -> tuple[float, float]:
    """p50 and p99 in ms of ``calls`` calls of ``call(i)``."""
    found = []
    for i in range(calls):
        started = time.perf_counter()
        call(i)
        found.append(time.perf_counter() - started)
    found.sort()
    return found[len(found) // 2] * 1e3, found[min(len(found) - 1, int(len(found) * 0.99))] * 1e3


def s3q_calls(src: str, calls: int) -> dict[str, tuple[float, float]]:
    results: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp, broker(src, f"file://{tmp}/store") as (_, url):
        with connect(url) as client:
            queue = client.queue("single")
            for _ in range(20):
                queue.enqueue(PAYLOAD)
            queue.purge()
            results["native enqueue"] = latencies(calls, lambda _: queue.enqueue(PAYLOAD))

            def take(_: int) -> None:
                queue.complete(queue.dequeue(1, visibility_timeout=600)[0])

            results["native dequeue + complete"] = latencies(calls, take)
        sqs = sqs_client(url)
        queue_url = sqs.create_queue(QueueName="single")["QueueUrl"]
        for _ in range(20):
            sqs.send_message(QueueUrl=queue_url, MessageBody=BODY)
        results["SendMessage (boto3)"] = latencies(
            calls, lambda _: sqs.send_message(QueueUrl=queue_url, MessageBody=BODY)
        )
    return results


@contextlib.contextmanager
def canned_sqs() -> Iterator[str]:
    port = free_port()
    script = str(Path(__file__).with_name("floor_servers.py"))
    child = subprocess.Popen([sys.executable, script, "sqs", str(port)])
    try:
        wait_for_port(port, child, 30, "the canned SQS server")
        yield f"http://127.0.0.1:{port}"
    finally:
        child.terminate()
        child.wait(30)


def peers(calls: int) -> dict[str, tuple[float, float]]:
    import redis

    results: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp))
        server.start()
        try:
            r = redis.Redis(host="127.0.0.1", port=server.address)
            for _ in range(20):
                r.lpush("single", PAYLOAD)
            results["Redis LPUSH (appendfsync always)"] = latencies(
                calls, lambda _: r.lpush("single", PAYLOAD)
            )
            r.close()
        finally:
            server.stop()
    with canned_sqs() as url:
        sqs = sqs_client(url)
        for _ in range(20):
            sqs.send_message(QueueUrl=url + "/000000000000/q", MessageBody=BODY)
        results["SendMessage (boto3), canned answer"] = latencies(
            calls, lambda _: sqs.send_message(QueueUrl=url + "/000000000000/q", MessageBody=BODY)
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--src", action="append", help="a directory holding the s3q package")
    args = parser.parse_args()
    import s3q

    sources = args.src or [str(Path(s3q.__file__).parent.parent)]
    table: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _ in range(args.rounds):
        for src in sources:
            for kind, figures in s3q_calls(src, args.calls).items():
                table.setdefault((src[-40:], kind), []).append(figures)
        for kind, figures in peers(args.calls).items():
            table.setdefault(("(peer or floor)", kind), []).append(figures)
    print(f"{'server':40} {'call':36} {'p50 ms':>16} {'p99 ms':>16}")
    for (server, kind), rows in table.items():
        p50 = " ".join(f"{r[0]:.3f}" for r in rows)
        p99 = " ".join(f"{r[1]:.3f}" for r in rows)
        print(f"{server:40} {kind:36} {p50:>16} {p99:>16}")
    print("command: python " + shlex.join(sys.argv))


if __name__ == "__main__":
    main()
