"""What unauthenticated bodies cost a broker: its RSS growth while N clients stream large
bodies without credentials at the SQS endpoint and the native API.

    python benchmarks/flood.py                          # 20 clients, 100 MB each
    python benchmarks/flood.py --build old=OLD/src --build new=src

Each build's broker runs in a child process (``PYTHONPATH`` = its source), with a bearer token
and an SQS access key; half the clients post to ``/`` (SQS), half to ``/v1/queues/q/enqueue``.
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

from s3q.broker.server import spawn

CHUNK = b"x" * 65536


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
        child, url = spawn(store, tokens={"t"}, sqs_keys={"AKID": "s"}, log_level="error")
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


def measure(label: str, src: str, clients: int, size: int) -> None:
    with tempfile.TemporaryDirectory() as root:
        child, port = start(src, f"file://{root}/store")
        try:
            before, peak = rss(child.pid), 0
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
                peak = max(peak, rss(child.pid))
                time.sleep(0.01)  # sampling the broker's RSS, not a synchronisation
            elapsed = time.perf_counter() - started
            counts = {s: statuses.count(s) for s in sorted(set(statuses))}
            print(
                f"| {label} | {clients} x {size / 1e6:,.0f} MB | {counts} | "
                f"{(peak - before) / 2**20:,.1f} MiB | {elapsed:.2f} s |",
                flush=True,
            )
        finally:
            child.terminate()
            child.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--size", type=int, default=100_000_000, help="bytes per body")
    parser.add_argument("--build", action="append", help="LABEL=SRC_DIR, repeatable")
    args = parser.parse_args()
    builds = [b.split("=", 1) for b in args.build or ["this=src"]]
    print("$ python benchmarks/flood.py " + " ".join(sys.argv[1:]))
    print("| build | bodies | answers (0 = none within 120 s) | broker RSS peak growth | time |")
    print("|---|---|---|---|---|")
    for label, src in builds:
        measure(label, os.path.abspath(src), args.clients, args.size)


if __name__ == "__main__":
    main()
