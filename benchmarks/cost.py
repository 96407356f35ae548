"""What a message costs on S3, at low rates and high, for each commit window.

    python benchmarks/cost.py                       # the whole table, on a local moto S3
    python benchmarks/cost.py --rates 100 --windows 0,0.1 --seconds 5

For each rate and window: one producer makes single ``enqueue`` calls at the rate (open loop:
it does not wait for an answer before the next call, like a web app enqueueing per request)
while one consumer makes single ``dequeue`` (long poll) + ``complete`` calls with as many
handlers at once as the rate needs (as ``s3q worker --concurrency``: a handler waits for two
durable commits per message, so one alone could not keep up), all on one embedded queue over a
moto S3 server on 127.0.0.1. The store's own counters give the PUTs and
GETs per message, lease renewals included; dollars per million messages are S3's list prices
($0.005 per 1,000 PUTs, $0.0004 per 1,000 GETs). Latency is an enqueue call's, send to answer,
and a message's, enqueue to delivery. Then two rows for the high end: 100 producers at the
rate, and batch calls (``enqueue_batch``/``dequeue(100)``/``complete_batch``). SQS's price for
the same work unbatched is $1.20 per million messages (send, receive, delete: 3 requests at
$0.40 per million).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass

import local_s3

import s3q
from s3q.prices import S3

SQS_UNBATCHED = 1.20


@dataclass
class Row:
    what: str
    rate: float
    window: float
    messages: int
    puts: int
    gets: int
    send_ms: list[float]
    dwell_ms: list[float]

    @property
    def dollars_per_million(self) -> float:
        return S3.dollars(self.puts, self.gets) / self.messages * 1e6

    def line(self) -> str:
        def pct(values: list[float], p: float) -> float:
            return statistics.quantiles(values, n=100)[int(p) - 1] if len(values) > 1 else 0.0

        return (
            f"| {self.what} | {self.rate:,.0f} | {self.window * 1000:.0f} | "
            f"{self.puts / self.messages:.3f} | {self.gets / self.messages:.3f} | "
            f"${self.dollars_per_million:.3f} | {pct(self.send_ms, 50):.1f} / "
            f"{pct(self.send_ms, 99):.1f} | {pct(self.dwell_ms, 50):.1f} / "
            f"{pct(self.dwell_ms, 99):.1f} |"
        )


async def run(
    url: str,
    options: dict[str, object],
    what: str,
    rate: float,
    window: float,
    seconds: float,
    producers: int = 1,
    batch: int = 1,
) -> Row:
    q = await s3q.open_async(url, **options, commit_window=window)
    total = max(1, int(rate * seconds))
    sent_at: dict[str, float] = {}
    send_ms: list[float] = []
    dwell_ms: list[float] = []
    done = asyncio.Event()
    received = 0
    try:
        await q.stats()
        start = await q.stats()

        async def send(payloads: list[bytes]) -> None:
            began = time.perf_counter()
            if batch == 1:
                ids = [await q.enqueue(payloads[0])]
            else:
                ids = await q.enqueue_batch(payloads)
            send_ms.append((time.perf_counter() - began) * 1000)
            for mid in ids:
                sent_at[mid] = began

        async def produce(share: int) -> None:
            calls = []
            every = producers * batch / rate
            for _ in range(0, share, batch):
                calls.append(asyncio.ensure_future(send([b"x" * 100] * batch)))
                await asyncio.sleep(every)  # the producer's pace
            await asyncio.gather(*calls)

        async def consume() -> None:
            nonlocal received
            while received < total:
                got = await q.dequeue(batch, visibility_timeout=60, wait=0.2)
                now = time.perf_counter()
                for m in got:
                    dwell_ms.append((now - sent_at.get(m.id, now)) * 1000)
                if batch == 1:
                    for m in got:
                        await q.complete(m)
                elif got:
                    await q.complete_batch(got)
                received += len(got)
            done.set()

        # enough handlers that each, waiting two commits per message, keeps up with the rate
        handlers = min(200, max(1, round(rate / batch * 2 * (window + 0.05) * 2)))
        consumers = [asyncio.ensure_future(consume()) for _ in range(handlers)]
        await asyncio.gather(*(produce(total // producers) for _ in range(producers)))
        await asyncio.wait_for(done.wait(), 120)
        await asyncio.gather(*consumers)
        end = await q.stats()
    finally:
        await q.close()
    return Row(
        what,
        rate,
        window,
        total,
        end.store_puts - start.store_puts,
        end.store_gets - start.store_gets,
        send_ms,
        dwell_ms,
    )


def cells(rates: list[float], windows: list[float]) -> Iterator[tuple[float, float]]:
    for rate in rates:
        for window in windows:
            yield rate, window


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="10,100,1000")
    parser.add_argument("--windows", default="0,0.02,0.1,0.5")
    parser.add_argument("--seconds", type=float, default=10.0, help="per row, at most")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    windows = [float(w) for w in args.windows.split(",")]
    moto = local_s3.start("cost")
    options = moto.store_options()
    print(
        "| calls | msg/s | window ms | PUT/msg | GET/msg | $ per million | "
        "enqueue p50 / p99 ms | enqueue→delivery p50 / p99 ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    try:
        n = 0
        for rate, window in cells(rates, windows):
            n += 1
            seconds = min(args.seconds, max(2.0, 2000 / rate))
            row = asyncio.run(run(f"s3://cost/q{n}", options, "single", rate, window, seconds))
            print(row.line(), flush=True)
        high = max(rates)
        for window in (0.0, 0.02):
            n += 1
            row = asyncio.run(
                run(f"s3://cost/q{n}", options, "single, 100 producers", high, window, 3.0, 100)
            )
            print(row.line(), flush=True)
            n += 1
            row = asyncio.run(
                run(f"s3://cost/q{n}", options, "batches of 100", high * 10, window, 3.0, 1, 100)
            )
            print(row.line(), flush=True)
    finally:
        moto.stop()
    print(f"\nSQS, unbatched (send, receive, delete): ${SQS_UNBATCHED:.2f} per million messages")
    print(
        "command: python benchmarks/cost.py "
        + " ".join(f"--{k} {v}" for k, v in vars(args).items())
    )


if __name__ == "__main__":
    main()
