"""CPU time a client spends per call to the broker: what bounds single calls from one process.

    python benchmarks/client_cpu.py [--calls 2000] [--store memory://cpu]

Starts a broker on a temporary file:// store (or ``--store``), then makes ``--calls``
sequential 1 KiB enqueues with: s3q's async client and its blocking client (each on its own
HTTP/1.1 since 2026-11-28: s3q.client.async_transport and .transport; aiohttp and urllib3
before), and a bare httpx.AsyncClient posting the same request; beside them, the peer users
compare the clients with: redis-py with hiredis making as many ``LPUSH`` of 1 KiB to a
``redis-server`` it starts (durable: ``appendfsync always``; the client's CPU does not depend
on it). Prints the client process's CPU milliseconds per call for each. To compare builds,
run it with each build's ``PYTHONPATH`` in turn:
``PYTHONPATH=<before>/src python benchmarks/client_cpu.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import tempfile
import time
from pathlib import Path

import httpx
import msgspec

from s3q.broker import spawn
from s3q.client import connect, connect_async


def per_call_ms(started: float, calls: int) -> float:
    return (time.process_time() - started) / calls * 1000


async def s3q_async(url: str, calls: int) -> float:
    async with connect_async(url) as client:
        q = client.queue("cpu")
        started = time.process_time()
        for _ in range(calls):
            await q.enqueue(b"x" * 1024)
        return per_call_ms(started, calls)


def s3q_blocking(url: str, calls: int) -> float:
    with connect(url) as client:
        q = client.queue("cpu")
        started = time.process_time()
        for _ in range(calls):
            q.enqueue(b"x" * 1024)
        return per_call_ms(started, calls)


async def bare_httpx(url: str, calls: int) -> float:
    body = msgspec.msgpack.encode({"payload": b"x" * 1024})
    headers = {"content-type": "application/msgpack", "accept": "application/msgpack"}
    async with httpx.AsyncClient() as http:
        started = time.process_time()
        for _ in range(calls):
            answer = await http.post(f"{url}/v1/queues/cpu/enqueue", content=body, headers=headers)
            answer.raise_for_status()
        return per_call_ms(started, calls)


def redis_py(calls: int) -> float:
    import redis
    from brokers import RedisServer

    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp))
        server.start()
        try:
            r = redis.Redis(host="127.0.0.1", port=server.address)
            payload = b"x" * 1024
            r.lpush("cpu", payload)
            started = time.process_time()
            for _ in range(calls):
                r.lpush("cpu", payload)
            r.close()
            return per_call_ms(started, calls)
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--port", type=int, default=8791)
    parser.add_argument("--store", help="the broker's store (default: a temporary file:// one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = spawn(args.store or f"file://{tmp}/store", args.port)
        try:
            for name, ms in (
                ("s3q async client", asyncio.run(s3q_async(url, args.calls))),
                ("s3q blocking client", s3q_blocking(url, args.calls)),
                ("bare httpx.AsyncClient", asyncio.run(bare_httpx(url, args.calls))),
                ("redis-py (hiredis) LPUSH", redis_py(args.calls)),
            ):
                print(f"{name:30} {ms:.3f} ms CPU per call")
        finally:
            proc.terminate()
            proc.wait(30)
    print("command: python " + shlex.join(sys.argv))


if __name__ == "__main__":
    main()
