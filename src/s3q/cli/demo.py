"""``s3q demo``: enqueue, process and report on a demo queue."""

from __future__ import annotations

import random
import time

import s3q

from .render import console, stats_table


def run_demo(url: str, messages: int) -> None:
    """Purge the queue at ``url``, enqueue ``messages`` jobs, process them (every hundredth
    fails into the dead letters) and print what happened."""
    console.print(f"[bold]s3q demo[/] on [cyan]{url}[/]")
    rng = random.Random(7)
    with s3q.open(url, max_attempts=2, retry_delay=0.05, retry_delay_max=0.1) as q:
        q.purge()
        started = time.perf_counter()
        for start in range(0, messages, 1000):
            q.enqueue_batch(
                [
                    {"payload": f"job {i}".encode(), "priority": rng.choice((0, 0, 0, 5, 9))}
                    for i in range(start, min(start + 1000, messages))
                ]
            )
        enqueued = time.perf_counter() - started
        console.print(
            f"enqueued {messages:,} messages in {enqueued:.2f} s ({messages / enqueued:,.0f} msg/s)"
        )
        started, done, failed = time.perf_counter(), 0, 0
        while True:
            batch = q.dequeue(max_messages=500, wait=0.2)
            if not batch:
                break
            ok = []
            for msg in batch:
                if msg.payload.endswith(b"13"):  # every hundredth job fails, twice: dead letter
                    q.fail(msg, "job 13 always fails")
                    failed += 1
                else:
                    ok.append(msg)
            q.complete_batch(ok)
            done += len(ok)
        took = time.perf_counter() - started
        console.print(
            f"processed {done:,} messages in {took:.2f} s ({done / took:,.0f} msg/s); "
            f"{failed} failed deliveries"
        )
        console.print(stats_table(q.stats(), url, writer=True))
        dead = q.dead_letters(limit=3)
        if dead:
            console.print(
                "dead letters (first 3): "
                + ", ".join(f"{m.payload.decode()!r} ({m.last_error})" for m in dead)
            )
