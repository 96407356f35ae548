"""Throughput of the broker's SQS endpoint through boto3: SendMessageBatch, then
ReceiveMessage + DeleteMessageBatch, 1 KiB messages, a few client threads.

    python benchmarks/sqs_boto3.py [--messages 20000] [--clients 4] [--store file:///tmp/x]

The broker runs as ``s3q serve`` (one process) on a file:// store; the boto3 clients are
processes of their own (botocore's signing and parsing cost a client more CPU than the broker
spends answering it). Prints msg/s for each phase and the command line.
"""

from __future__ import annotations

import argparse
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


def send(url: str, queue_url: str, batches: int) -> int:
    sqs = client(url)
    entries = [{"Id": str(i), "MessageBody": BODY} for i in range(10)]
    for _ in range(batches):
        result = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
        assert not result.get("Failed"), result
    return batches * 10


def drain(url: str, queue_url: str) -> int:
    """Receive and delete until a receive finds nothing (everything was sent before)."""
    sqs = client(url)
    done = 0
    while True:
        got = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)
        messages = got.get("Messages", [])
        if not messages:
            return done
        entries = [
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
        ]
        result = sqs.delete_message_batch(QueueUrl=queue_url, Entries=entries)
        assert not result.get("Failed"), result
        done += len(messages)
    return done


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
    with ProcessPoolExecutor(args.clients) as pool:
        list(pool.map(warm_up, [url] * args.clients))  # start the processes, import boto3
        started = time.perf_counter()
        sent = sum(
            pool.map(
                send, [url] * args.clients, [queue_url] * args.clients, [per_client] * args.clients
            )
        )
        send_rate = sent / (time.perf_counter() - started)
        started = time.perf_counter()
        received = sum(pool.map(drain, [url] * args.clients, [queue_url] * args.clients))
        receive_rate = received / (time.perf_counter() - started)
    assert received == total, (received, total)

    server.terminate()
    server.wait(30)
    print(f"command: python {' '.join(sys.argv)}")
    print(f"store: {store}; {total} messages of 1 KiB; {args.clients} client processes")
    print(f"SendMessageBatch (10/call):                    {send_rate:10,.0f} msg/s")
    print(f"ReceiveMessage (10) + DeleteMessageBatch (10): {receive_rate:10,.0f} msg/s")


if __name__ == "__main__":
    main()
