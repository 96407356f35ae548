"""Broker CPU per request: single SQS and native calls from one client process.

    python benchmarks/request_cpu.py [--calls 2000] [--rounds 1] [--src PATH ...]
        [--store URL] [--embedded] [--floors] [--profile DIR [--raw]]

For each ``--src`` (a PYTHONPATH holding the ``s3q`` package to serve with; default: the one
this script imports), starts ``s3q serve`` on a temporary file:// store (or ``--store``) in a
child process (SQS access key ``bench``, so every SQS request is SigV4-checked) and drives, one
call at a time from this process: ``--calls`` SendMessage (1 KiB), ReceiveMessage (one message)
and DeleteMessage through boto3, then as many native enqueue (1 KiB), dequeue (one message) and
complete calls through s3q's blocking client. For each kind of call it prints the broker's CPU
per request (user + system time of the child, from /proc/<pid>/stat, before and after the phase)
and the client-side p50/p99 latency. With several ``--src`` and ``--rounds``, the brokers take
turns, so a noisy machine weighs on each alike; the figures are per round. ``--floors`` adds, in
each round, the same native enqueue call answered by two floors (benchmarks/floor_servers.py): a
raw httptools protocol on uvloop, and a one-route Starlette app under uvicorn. ``--embedded``
adds the CPU per call of enqueue, dequeue and complete on an embedded queue of the same kind of
store, in this process: the engine's share of each figure. ``--profile DIR`` records a py-spy
flame graph of each broker's SQS and native phases into DIR (``--raw``: collapsed stacks, for
reading as text; ``$SPY_ARGS``: more py-spy options, e.g. ``--gil``). ``$USER_ONLY=1`` counts
user time only (what the store's system calls leave); ``$LOG_LEVEL`` is the broker's (default
warning; ``s3q serve``'s is info, which writes an access log line per request).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from s3q.client import connect

PAYLOAD = b"x" * 1024
TICK = os.sysconf("SC_CLK_TCK")
USER_ONLY = bool(os.environ.get("USER_ONLY"))  # for a look at what system time adds
LOG_LEVEL = os.environ.get("LOG_LEVEL", "warning")  # s3q serve's own default is info
SPY_ARGS = shlex.split(os.environ.get("SPY_ARGS", ""))  # more py-spy options (e.g. --gil)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + (0 if USER_ONLY else int(fields[12]))) / TICK


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def broker(src: str, store: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = free_port()
    code = (
        "from s3q.broker import serve; "
        f"serve({store!r}, port={port}, log_level={LOG_LEVEL!r}, sqs_keys={{'bench': 'bench'}})"
    )
    env = {**os.environ, "PYTHONPATH": src}
    child = subprocess.Popen([sys.executable, "-c", code], env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if child.poll() is not None:
                raise SystemExit(f"the broker of {src} exited at start")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(url + "/openapi.json", timeout=1),
            ):
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"the broker of {src} did not answer")
            time.sleep(0.05)
        yield child, url
    finally:
        child.terminate()
        child.wait(30)


def sqs_client(url: str) -> Any:
    """boto3's SQS client of the broker at ``url``, signing with the access key ``bench``."""
    return boto3.client(
        "sqs",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        config=Config(retries={"max_attempts": 1}),
    )


def phase(pid: int, calls: int, call: Callable[[int], Any]) -> tuple[float, float, float]:
    """Broker CPU µs per call, client p50 and p99 ms, of ``calls`` calls of ``call(i)``."""
    latencies: list[float] = []
    before = cpu_seconds(pid)
    for i in range(calls):
        started = time.perf_counter()
        call(i)
        latencies.append(time.perf_counter() - started)
    spent = cpu_seconds(pid) - before
    latencies.sort()
    return (
        spent / calls * 1e6,
        latencies[len(latencies) // 2] * 1e3,
        latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e3,
    )


@contextlib.contextmanager
def profiled(pid: int, out: Path | None, name: str, raw: bool = False) -> Iterator[None]:
    if out is None:
        yield
        return
    out.mkdir(parents=True, exist_ok=True)
    spy = subprocess.Popen(
        ["py-spy", "record", "-r", "500", "--pid", str(pid), *SPY_ARGS]
        + (
            ["-f", "raw", "-o", str(out / f"{name}.txt")]
            if raw
            else ["-o", str(out / f"{name}.svg")]
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)  # py-spy attaches
    try:
        yield
    finally:
        spy.send_signal(2)
        spy.wait(60)


def run(
    src: str, calls: int, profile: Path | None, label: str, raw: bool, store: str | None
) -> dict[str, tuple[float, ...]]:
    results: dict[str, tuple[float, ...]] = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        broker(src, store or f"file://{tmp}/store") as (
            child,
            url,
        ),
    ):
        sqs = sqs_client(url)
        queue_url = sqs.create_queue(QueueName="cpu")["QueueUrl"]
        body = PAYLOAD.decode()
        for _ in range(20):  # warm up: connections, the queue, caches
            sqs.send_message(QueueUrl=queue_url, MessageBody=body)
        sqs.purge_queue(QueueUrl=queue_url)
        handles: list[str] = []

        def receive(_: int) -> None:
            got = sqs.receive_message(
                QueueUrl=queue_url, MaxNumberOfMessages=1, VisibilityTimeout=600
            )
            handles.append(got["Messages"][0]["ReceiptHandle"])

        with profiled(child.pid, profile, f"{label}-sqs", raw):
            results["SendMessage"] = phase(
                child.pid, calls, lambda _: sqs.send_message(QueueUrl=queue_url, MessageBody=body)
            )
            results["ReceiveMessage"] = phase(child.pid, calls, receive)
            results["DeleteMessage"] = phase(
                child.pid,
                calls,
                lambda i: sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=handles[i]),
            )
        with connect(url) as client:
            queue = client.queue("native")
            for _ in range(20):
                queue.enqueue(PAYLOAD)
            queue.purge()
            receipts: list[str] = []

            def dequeue(_: int) -> None:
                receipts.append(queue.dequeue(1, visibility_timeout=600)[0].receipt)

            with profiled(child.pid, profile, f"{label}-native", raw):
                results["native enqueue"] = phase(
                    child.pid, calls, lambda _: queue.enqueue(PAYLOAD)
                )
                results["native dequeue"] = phase(child.pid, calls, dequeue)
                results["native complete"] = phase(
                    child.pid, calls, lambda i: queue.complete(receipts[i])
                )
    return results


def floors(calls: int) -> dict[str, tuple[float, ...]]:
    """The CPU per call of the floors (benchmarks/floor_servers.py), called as a native
    enqueue is: by s3q's blocking client, one call at a time."""
    results: dict[str, tuple[float, ...]] = {}
    for kind in ("raw", "starlette"):
        port = free_port()
        script = str(Path(__file__).with_name("floor_servers.py"))
        child = subprocess.Popen([sys.executable, script, kind, str(port)])
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while True:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"the {kind} floor did not listen")
                time.sleep(0.05)
            with connect(url) as client:
                queue = client.queue("native")
                for _ in range(20):
                    queue.enqueue(PAYLOAD)
                call = functools.partial(lambda q, _: q.enqueue(PAYLOAD), queue)
                results[f"floor: {kind}"] = phase(child.pid, calls, call)
        finally:
            child.terminate()
            child.wait(30)
    return results


def embedded(store: str | None, calls: int) -> dict[str, float]:
    """CPU µs per call of the same calls on an embedded queue (this process, uvloop if
    installed): the engine's share, which the broker adds HTTP and its API to."""
    import asyncio

    import s3q

    async def measure(url: str) -> dict[str, float]:
        queue = await s3q.open_async(url)
        figures: dict[str, float] = {}
        try:
            for _ in range(20):
                await queue.enqueue(PAYLOAD)
            await queue.purge()
            started = time.process_time()
            for _ in range(calls):
                await queue.enqueue(PAYLOAD)
            figures["enqueue"] = (time.process_time() - started) / calls * 1e6
            started = time.process_time()
            got = [m for _ in range(calls) for m in await queue.dequeue(1, 600.0)]
            figures["dequeue"] = (time.process_time() - started) / calls * 1e6
            started = time.process_time()
            for message in got:
                await queue.complete(message)
            figures["complete"] = (time.process_time() - started) / calls * 1e6
        finally:
            await queue.close()
        return figures

    with tempfile.TemporaryDirectory() as tmp:
        url = f"{store}-embedded/q" if store else f"file://{tmp}/store/q"
        try:
            import uvloop

            return uvloop.run(measure(url))
        except ImportError:
            return asyncio.run(measure(url))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--src",
        action="append",
        help="a directory holding the s3q package to serve with (repeatable)",
    )
    parser.add_argument("--profile", type=Path, help="write py-spy flame graphs here")
    parser.add_argument("--store", help="the store to serve (default: a temporary file:// one)")
    parser.add_argument(
        "--embedded", action="store_true", help="also the same calls on an embedded queue"
    )
    parser.add_argument("--raw", action="store_true", help="profiles as collapsed stacks")
    parser.add_argument(
        "--floors",
        action="store_true",
        help="also a native enqueue's call against a raw httptools protocol and a Starlette app",
    )
    args = parser.parse_args()
    import s3q

    sources = args.src or [str(Path(s3q.__file__).parent.parent)]
    table: dict[tuple[str, str], list[tuple[float, ...]]] = {}
    for round_ in range(args.rounds):
        for number, src in enumerate(sources):
            label = f"{number}" if len(sources) > 1 else "broker"
            profile = args.profile if round_ == 0 else None
            for kind, figures in run(src, args.calls, profile, label, args.raw, args.store).items():
                table.setdefault((src, kind), []).append(figures)
        if args.floors:
            for kind, figures in floors(args.calls).items():
                table.setdefault(("(the same client call)", kind), []).append(figures)
    print(f"{'broker (src)':40} {'call':16} {'CPU µs/call':>22} {'p50 ms':>7} {'p99 ms':>7}")
    for (src, kind), rows in table.items():
        cpu = " ".join(f"{r[0]:.0f}" for r in rows)
        p50 = min(r[1] for r in rows)
        p99 = min(r[2] for r in rows)
        print(f"{src[-40:]:40} {kind:16} {cpu:>22} {p50:7.3f} {p99:7.3f}")
    if args.embedded:
        for kind, cpu in embedded(args.store, args.calls).items():
            print(f"{'embedded queue (this process)':40} {kind:16} {cpu:>22.0f}")
    print("command: python " + shlex.join(sys.argv))


if __name__ == "__main__":
    main()
