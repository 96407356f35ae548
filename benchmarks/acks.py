"""Durable against buffered acknowledgements (``ack_durability``), side by side in one run, on
file:// with 1 KiB messages: a batch drain (``dequeue(--batch)`` + ``complete_batch``, msg/s and
process CPU per 100,000) and one message at a time (``dequeue(1)`` + ``complete``, p50/p99 ms),
rounds alternating between the two settings.

    python benchmarks/acks.py --messages 300000 --single 2000 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import s3q


def drain(setting: str, messages: int, batch: int) -> tuple[float, float]:
    with s3q.open(f"file://{tempfile.mkdtemp()}/q", ack_durability=setting) as q:
        for start in range(0, messages, 10_000):
            q.enqueue_batch([b"x" * 1024] * min(10_000, messages - start))
        started, cpu = time.perf_counter(), time.process_time()
        done = 0
        while got := q.dequeue(max_messages=batch):
            q.complete_batch(got)
            done += len(got)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return done / seconds, cpu / done * 100_000


def single(setting: str, messages: int) -> list[float]:
    with s3q.open(f"file://{tempfile.mkdtemp()}/q", ack_durability=setting) as q:
        q.enqueue_batch([b"x" * 1024] * messages)
        took = []
        for _ in range(messages):
            started = time.perf_counter()
            (m,) = q.dequeue(max_messages=1)
            q.complete(m)
            took.append(time.perf_counter() - started)
    return sorted(took)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--single", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(
        f"python benchmarks/acks.py --messages {args.messages} --batch {args.batch} "
        f"--single {args.single} --rounds {args.rounds}\n"
    )
    rates: dict[str, list[float]] = {"durable": [], "buffered": []}
    cpus: dict[str, list[float]] = {"durable": [], "buffered": []}
    p50: dict[str, list[float]] = {"durable": [], "buffered": []}
    p99: dict[str, list[float]] = {"durable": [], "buffered": []}
    for _ in range(args.rounds):
        for setting in rates:
            rate, cpu = drain(setting, args.messages, args.batch)
            rates[setting].append(rate)
            cpus[setting].append(cpu)
            took = single(setting, args.single)
            p50[setting].append(took[len(took) // 2] * 1000)
            p99[setting].append(took[int(len(took) * 0.99)] * 1000)
    print(
        "| ack_durability | drain msg/s (median; low-high) | CPU s per 100k | "
        "one at a time p50 ms | p99 ms |"
    )
    print("|---|---|---|---|---|")
    for setting in rates:
        r = rates[setting]
        print(
            f"| {setting} | {statistics.median(r):,.0f} ({min(r):,.0f}-{max(r):,.0f}) | "
            f"{statistics.median(cpus[setting]):.3f} | {statistics.median(p50[setting]):.3f} | "
            f"{statistics.median(p99[setting]):.3f} |"
        )


if __name__ == "__main__":
    main()
