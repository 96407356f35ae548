"""Celery end to end, s3q against Redis, side by side: N trivial tasks sent by P producer
processes and run by one Celery worker of concurrency C, timed from the first send to the last
task run.

    python benchmarks/celery_bench.py [--tasks 10000] [--producers 4] [--concurrency 8]
        [--brokers s3q,sqs,redis,redis-fsync]

Brokers, each started fresh: ``s3q serve`` on a temporary file:// store (every send and every
acknowledgement is a durable group commit: fsync before the answer), through s3q's own kombu
transport (``s3q.celery``: ``broker="s3q://…"``, a subscription per consumer) and through
kombu's SQS transport (the broker's SQS endpoint); Redis with its defaults (no fsync: a crash
loses recent tasks), and Redis with ``appendfsync always`` (durable like s3q). Needs
``redis-server`` (apt-get install redis-server) and ``celery[sqs,redis]``. Prints, per broker,
tasks/s and the producers' send rate, and the command that ran the benchmark.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

HERE = Path(__file__).parent
KEY, SECRET = "AKIDBENCH", "bench-secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "service did not start"
            time.sleep(0.05)


@contextmanager
def service(command: list[str], port: int) -> Iterator[None]:
    """``command`` running until the block ends, once it listens on ``port``."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        yield
    finally:
        proc.terminate()
        proc.wait(30)


@contextmanager
def s3q_broker(workdir: Path) -> Iterator[str]:
    port = free_port()
    keys = workdir / "sqs-keys"
    keys.write_text(f"{KEY}:{SECRET}\n")
    store = f"file://{workdir}/store"
    serve = [sys.executable, "-m", "s3q.cli", "serve", "--port", str(port), "--store", store]
    with service([*serve, "--sqs-credentials", str(keys)], port):
        yield f"sqs://{KEY}:{SECRET}@127.0.0.1:{port}"


@contextmanager
def s3q_native_broker(workdir: Path) -> Iterator[str]:
    """``s3q serve`` for s3q's own kombu transport: its native API (no token on loopback)."""
    port = free_port()
    store = f"file://{workdir}/store"
    with service(
        [sys.executable, "-m", "s3q.cli", "serve", "--port", str(port), "--store", store], port
    ):
        yield f"s3q://127.0.0.1:{port}/"


@contextmanager
def redis_broker(workdir: Path, fsync: bool) -> Iterator[str]:
    server = shutil.which("redis-server")
    assert server, "redis-server is needed: apt-get install redis-server"
    port = free_port()
    durable = ["--appendonly", "yes", "--appendfsync", "always"] if fsync else ["--save", ""]
    with service(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir), *durable], port
    ):
        yield f"redis://127.0.0.1:{port}/0"


def produce(env: dict[str, str], first: int, count: int) -> float:
    """Send tasks ``first`` .. ``first + count - 1``; the seconds it took."""
    os.environ.update(env)
    sys.path.insert(0, str(HERE))
    from celery_app import noop

    noop.delay(-1)  # connect (and, on SQS, look the queue up) before the clock starts
    started = time.perf_counter()
    for i in range(first, first + count):
        noop.delay(i)
    return time.perf_counter() - started


def run(name: str, url: str, workdir: Path, args: argparse.Namespace) -> None:
    out = workdir / "ran.out"
    env = {"BENCH_BROKER_URL": url, "BENCH_OUT": str(out)}
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "celery_app",
            "worker",
            "-l",
            "warning",
            "--concurrency",
            str(args.concurrency),
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-Q",
            "bench",
        ],
        cwd=HERE,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        per = args.tasks // args.producers
        total = per * args.producers
        with ProcessPoolExecutor(args.producers) as pool:
            started = time.perf_counter()
            sends = list(
                pool.map(
                    produce, [env] * args.producers, range(0, total, per), [per] * args.producers
                )
            )
        deadline = time.monotonic() + 600
        while True:
            ran = {int(line) for line in out.read_text().split()} - {-1} if out.exists() else set()
            if len(ran) >= total:
                break
            assert worker.poll() is None and time.monotonic() < deadline, (
                f"{name}: stuck at {len(ran)}"
            )
            time.sleep(0.05)
        seconds = time.perf_counter() - started
        lines = len(out.read_text().split()) - args.producers  # the warm-up tasks too
        print(
            f"{name:<22} {total / seconds:8,.0f} tasks/s end to end ({seconds:6.2f} s)   "
            f"producers {total / max(sends):8,.0f} sends/s   runs {lines:,} for {total:,} tasks"
        )
    finally:
        worker.terminate()
        worker.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--brokers",
        default=",".join(BROKERS),
        help=f"which, comma-separated, of {', '.join(BROKERS)}",
    )
    args = parser.parse_args()
    chosen = [b.strip() for b in args.brokers.split(",") if b.strip()]
    unknown = set(chosen) - set(BROKERS)
    if unknown:
        parser.error(f"unknown brokers {sorted(unknown)}: choose among {', '.join(BROKERS)}")
    print(f"command: python {' '.join(sys.argv)}")
    print(
        f"{args.tasks:,} tasks, {args.producers} producer processes, one worker of "
        f"concurrency {args.concurrency} (prefork)"
    )
    for key in chosen:
        name, start = BROKERS[key]
        with tempfile.TemporaryDirectory(prefix="celery-bench-") as tmp, start(Path(tmp)) as url:
            run(name, url, Path(tmp), args)


#: the brokers the benchmark runs, by the name ``--brokers`` takes: (row name, start)
BROKERS: dict[str, tuple[str, Callable[[Path], AbstractContextManager[str]]]] = {
    "s3q": ("s3q (own transport)", s3q_native_broker),
    "sqs": ("s3q (SQS endpoint)", s3q_broker),
    "redis": ("redis (no fsync)", lambda d: redis_broker(d, fsync=False)),
    "redis-fsync": ("redis (fsync always)", lambda d: redis_broker(d, fsync=True)),
}


if __name__ == "__main__":
    main()
