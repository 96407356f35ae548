"""Throughput of the broker's SQS endpoint through boto3: SendMessageBatch, then
ReceiveMessage + DeleteMessageBatch, 1 KiB messages, a few client threads.

    python benchmarks/sqs_boto3.py [--messages 20000] [--clients 4] [--store file:///tmp/x]

The broker runs as ``s3q serve`` (one process) on a file:// store; the boto3 clients are
processes of their own (botocore's signing and parsing cost a client more CPU than the broker
spends answering it). Prints, for each phase, msg/s, the latency of its requests
(p50/p95/p99, as the clients saw them) and the broker's CPU per request (user + system time of
the broker process, read from /proc), and the command line.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import boto3
import httpx
from botocore.config import Config

BODY = "x" * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def client(url: str) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        config=Config(max_pool_connections=4, retries={"max_attempts": 1}),
    )


def warm_up(url: str) -> None:
    client(url)


def timed(latencies: list[float], call: Any, **kwargs: Any) -> Any:
    started = time.perf_counter()
    result = call(**kwargs)
    latencies.append(time.perf_counter() - started)
    return result


def send(url: str, queue_url: str, batches: int) -> tuple[int, list[float]]:
    """Messages sent, and the seconds each request took."""
    sqs, latencies = client(url), []
    entries = [{"Id": str(i), "MessageBody": BODY} for i in range(10)]
    for _ in range(batches):
        result = timed(latencies, sqs.send_message_batch, QueueUrl=queue_url, Entries=entries)
        assert not result.get("Failed"), result
    return batches * 10, latencies


def drain(url: str, queue_url: str) -> tuple[int, list[float]]:
    """Receive and delete until a receive finds nothing (everything was sent before)."""
    sqs, latencies = client(url), []
    done = 0
    while True:
        got = timed(latencies, sqs.receive_message, QueueUrl=queue_url, MaxNumberOfMessages=10)
        messages = got.get("Messages", [])
        if not messages:
            return done, latencies
        entries = [
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
        ]
        result = timed(latencies, sqs.delete_message_batch, QueueUrl=queue_url, Entries=entries)
        assert not result.get("Failed"), result
        done += len(messages)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def report(name: str, messages: int, seconds: float, cpu: float, latencies: list[float]) -> None:
    ordered = sorted(latencies)
    p50, p95, p99 = (percentile(ordered, q) * 1000 for q in (0.50, 0.95, 0.99))
    print(
        f"{name:<46} {messages / seconds:8,.0f} msg/s   p50 {p50:6.1f} ms  p95 {p95:6.1f} ms  "
        f"p99 {p99:6.1f} ms   broker CPU {cpu / len(latencies) * 1000:5.2f} ms/request "
        f"({len(latencies):,} requests)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--clients", type=int, default=4, help="client processes")
    parser.add_argument("--store", default=None, help="store URL (default: a temporary dir)")
    args = parser.parse_args()
    store = args.store or f"file://{tempfile.mkdtemp(prefix='s3q-sqs-bench-')}"

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "s3q.cli", "serve", "--port", str(port), "--store", store],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(f"{url}/openapi.json")
            break
        except httpx.TransportError:
            assert time.monotonic() < deadline and server.poll() is None, "broker did not start"
            time.sleep(0.05)

    sqs = client(url)
    queue_url = sqs.create_queue(QueueName="bench")["QueueUrl"]
    per_client = args.messages // (10 * args.clients)
    total = per_client * 10 * args.clients
    phases = []
    with ProcessPoolExecutor(args.clients) as pool:
        list(pool.map(warm_up, [url] * args.clients))  # start the processes, import boto3
        urls, queues = [url] * args.clients, [queue_url] * args.clients
        for name, work, extra in (
            ("SendMessageBatch (10/call)", send, [[per_client] * args.clients]),
            ("ReceiveMessage (10) + DeleteMessageBatch (10)", drain, []),
        ):
            cpu, started = cpu_seconds(server.pid), time.perf_counter()
            results = list(pool.map(work, urls, queues, *extra))
            seconds = time.perf_counter() - started
            cpu = cpu_seconds(server.pid) - cpu
            count = sum(n for n, _ in results)
            latencies = [t for _, ts in results for t in ts]
            phases.append((name, count, seconds, cpu, latencies))
    assert phases[1][1] == total, (phases[1][1], total)

    server.terminate()
    server.wait(30)
    print(f"command: python {' '.join(sys.argv)}")
    print(f"store: {store}; {total} messages of 1 KiB; {args.clients} client processes")
    for phase in phases:
        report(*phase)


if __name__ == "__main__":
    main()
