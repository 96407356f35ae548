"""What floods cost a broker, three ways:

* bodies: its RSS growth while N clients stream large bodies without credentials, half at the
  SQS endpoint (``/``), half at the native API;
* a batch: how long other requests wait while one call carries a batch of N items;
* names: how /metrics grows with N refused requests, each naming a random queue.

    python benchmarks/flood.py                          # 20 x 100 MB, 1,000,000 items, 10,000 names
    python benchmarks/flood.py --build old=OLD/src --build new=src

Each build's broker runs in a child process (``PYTHONPATH`` = its source), with a bearer token
and an SQS access key.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import httpx
import msgspec

from s3q.broker.server import spawn

CHUNK = b"x" * 65536
TOKEN = "flood-token"


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def start(src: str, store: str) -> tuple[subprocess.Popen[bytes], int]:
    """A broker of the build at ``src`` (its child process imports s3q from there)."""
    os.environ["PYTHONPATH"] = src
    try:
        child, url = spawn(store, tokens={TOKEN}, sqs_keys={"AKID": "s"}, log_level="error")
    finally:
        del os.environ["PYTHONPATH"]
    return child, int(url.rsplit(":", 1)[1])


def flood(port: int, path: str, size: int, statuses: list[int]) -> None:
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {size}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(head.encode())
        try:
            for _ in range(size // len(CHUNK)):
                sock.sendall(CHUNK)
        except OSError:
            pass  # the broker answered and closed
        try:
            answer = sock.recv(65536)
        except TimeoutError:
            answer = b""
        statuses.append(int(answer.split(b" ", 2)[1]) if answer else 0)


def bodies(label: str, port: int, pid: int, clients: int, size: int) -> None:
    before, peak = rss(pid), 0
    statuses: list[int] = []
    threads = [
        threading.Thread(
            target=flood,
            args=(port, "/" if i % 2 else "/v1/queues/q/enqueue", size, statuses),
        )
        for i in range(clients)
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        peak = max(peak, rss(pid))
        time.sleep(0.01)  # sampling the broker's RSS, not a synchronisation
    elapsed = time.perf_counter() - started
    counts = {s: statuses.count(s) for s in sorted(set(statuses))}
    print(
        f"| {label} | {clients} x {size / 1e6:,.0f} MB | {counts} | "
        f"{(peak - before) / 2**20:,.1f} MiB | {elapsed:.2f} s |",
        flush=True,
    )


def batch(label: str, url: str, items: int) -> None:
    """One call of ``items`` 10-byte payloads while another client times stats calls."""
    auth = {"authorization": f"Bearer {TOKEN}"}
    mp = {**auth, "content-type": "application/msgpack", "accept": "application/msgpack"}
    with httpx.Client(base_url=url, headers=mp, timeout=300) as client:
        for name in ("big", "other"):
            client.post(
                f"/v1/queues/{name}/enqueue", content=msgspec.msgpack.encode({"payload": b"p"})
            )
        body = msgspec.msgpack.encode({"items": [b"x" * 10] * items})
        answer: list[int] = []
        sender = threading.Thread(
            target=lambda: answer.append(
                client.post("/v1/queues/big/enqueue-batch", content=body).status_code
            )
        )
        sender.start()
        slowest, count = 0.0, 0
        while sender.is_alive():
            started = time.perf_counter()
            client.get("/v1/queues/other/stats")
            slowest, count = max(slowest, time.perf_counter() - started), count + 1
        print(
            f"| {label} | {items:,} items ({len(body) / 1e6:.1f} MB msgpack) | {answer[0]} | "
            f"{count} | {slowest * 1000:,.0f} ms |",
            flush=True,
        )


def names(label: str, url: str, requests: int) -> None:
    """/metrics before and after ``requests`` refused calls naming random queues."""
    auth = {"authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=url, timeout=60) as client:
        size = lambda: len(client.get("/metrics", headers=auth).content)  # noqa: E731
        for i in range(3):  # the series of each (operation, outcome) once
            client.get(f"/v1/queues/warm-{i}/stats")
        before = size()
        for _ in range(requests):
            client.get(f"/v1/queues/{uuid.uuid4().hex[:16]}/stats")
        after = size()
    print(f"| {label} | {requests:,} | {before:,} B | {after:,} B |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--size", type=int, default=100_000_000, help="bytes per body")
    parser.add_argument("--items", type=int, default=1_000_000, help="items of the batch")
    parser.add_argument("--names", type=int, default=10_000, help="refused requests")
    parser.add_argument("--build", action="append", help="LABEL=SRC_DIR, repeatable")
    args = parser.parse_args()
    builds = [
        (label, os.path.abspath(src))
        for label, src in (b.split("=", 1) for b in args.build or ["this=src"])
    ]
    print("$ python benchmarks/flood.py " + " ".join(sys.argv[1:]))
    tables = {
        "bodies": "| build | bodies | answers (0: none in 120 s) | broker RSS peak growth | time |",
        "batch": "| build | one call | its answer | other requests meanwhile | slowest of them |",
        "names": "| build | refused requests with random names | /metrics before | after |",
    }
    for table, heading in tables.items():
        print(f"\n{heading}\n|" + "---|" * heading.count(" | ") + "---|")
        for label, src in builds:
            with tempfile.TemporaryDirectory() as root:
                child, port = start(src, f"file://{root}/store")
                url = f"http://127.0.0.1:{port}"
                try:
                    if table == "bodies":
                        bodies(label, port, child.pid, args.clients, args.size)
                    elif table == "batch":
                        batch(label, url, args.items)
                    else:
                        names(label, url, args.names)
                finally:
                    child.terminate()
                    child.wait(30)


if __name__ == "__main__":
    main()
