"""A queue's history in Spark, as a chart: who waited, who was slow, and what failed.

    python examples/queue_history.py                       # an hour of traffic, in a temp dir
    python examples/queue_history.py file:///tmp/orders --minutes 120 --out history.png

1. Loads a queue (``history_retention`` on) with an hour of simulated traffic from three
   tenants: a steady one, a slow one whose handler often fails, and one that floods the queue
   for a quarter of an hour. Handlers fail some messages with a few distinct errors; failures
   are retried with backoff, and a message that fails three times is a dead letter. The clock
   is simulated, so the hour takes seconds.
2. Reads the queue's history with Spark (``option("history", "true")``: one row per event,
   straight from the log objects) and each message's life from it (``s3q.spark.lives``).
3. Draws per-tenant dwell (enqueue to first lease) and processing (last lease to completion),
   p50 and p99 over time, and the top failure reasons, into a PNG.

Needs ``pip install 's3q[spark,bench]'`` (``bench`` brings matplotlib) and Java 17+.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import s3q
import s3q.spark

START = 1_767_225_600.0  # 2026-01-01 00:00 UTC: the simulated clock's start
STEP = 10.0  # simulated seconds between two rounds of the workers
CAPACITY = 14  # messages the workers take per round
BUCKET = 300  # seconds per point of the charts


@dataclass(frozen=True)
class Tenant:
    """Who sends messages, how many, how long its handler takes, and how it fails."""

    name: str
    rate: float  # messages per round, on average
    seconds: tuple[float, float]  # a handler's duration: from, to (uniform)
    errors: tuple[tuple[str, float], ...]  # (error text, chance) of a failure per attempt
    flood: tuple[float, float] | None = None  # minutes from, to: ten times the rate


TENANTS = (
    Tenant("acme", 5.0, (1, 6), (("payment gateway timeout", 0.04),)),
    Tenant(
        "globex",
        3.0,
        (20, 60),
        (("upstream 503 from inventory", 0.08), ("invalid address: no postcode", 0.05)),
    ),
    Tenant(
        "initech",
        1.0,
        (2, 10),
        (("schema mismatch: missing field 'sku'", 0.06), ("payment gateway timeout", 0.02)),
        flood=(20, 35),
    ),
)


def handle(tenant: Tenant, rng: random.Random) -> tuple[str | None, float]:
    """One attempt of a message: the error it fails with (None: success) and its duration."""
    duration = rng.uniform(*tenant.seconds)
    for error, chance in tenant.errors:
        if rng.random() < chance:
            return error, duration / 4
    return None, duration


def load(url: str, minutes: float, seed: int = 7) -> int:
    """An hour (``minutes``) of traffic, on a simulated clock: the messages sent."""
    rng = random.Random(seed)
    now = [START]
    by_name = {t.name: t for t in TENANTS}
    running: list[tuple[float, s3q.Message, str | None]] = []  # (done at, message, error)
    sent = 0
    settings = {"history_retention": 30 * 86400, "max_attempts": 3, "retry_delay": 30.0}
    with s3q.open(url, clock=lambda: now[0], **settings) as q:
        for step in range(int(minutes * 60 / STEP)):
            minute = step * STEP / 60
            batch = []
            for t in TENANTS:
                flooding = t.flood is not None and t.flood[0] <= minute < t.flood[1]
                rate = t.rate * (10 if flooding else 1)
                count = int(rate) + (rng.random() < rate - int(rate))
                batch += [{"payload": b"order", "tenant": t.name} for _ in range(count)]
            if batch:
                q.enqueue_batch(batch)
                sent += len(batch)
            for m in q.dequeue(max_messages=CAPACITY, visibility_timeout=600):
                error, seconds = handle(by_name[m.tenant or "acme"], rng)
                running.append((now[0] + seconds, m, error))
            for _ in range(int(STEP)):  # handlers finish to the second
                now[0] += 1.0
                done = [r for r in running if r[0] <= now[0]]
                running = [r for r in running if r[0] > now[0]]
                for _, m, error in done:
                    if error is not None:
                        q.fail(m, error)
                if any(error is None for _, _, error in done):
                    q.complete_batch([m for _, m, error in done if error is None])
    return sent


def percentiles(lives: DataFrame) -> list[dict[str, object]]:
    """Per tenant and five minutes of enqueues: dwell and processing, p50 and p99."""
    bucket = (F.floor(F.unix_timestamp("enqueued_at") / BUCKET) * BUCKET).alias("bucket")
    rows = (
        lives.groupBy("tenant", bucket)
        .agg(
            F.percentile_approx("dwell", [0.5, 0.99]).alias("dwell"),
            F.percentile_approx("processing", [0.5, 0.99]).alias("processing"),
        )
        .orderBy("tenant", "bucket")
        .collect()
    )
    return [r.asDict() for r in rows]


def failures(events: DataFrame, top: int = 6) -> list[tuple[str, int, int]]:
    """The most frequent failure reasons: (error, failures retried, dead letters)."""
    rows = (
        events.where(F.col("kind").isin("failed", "dead"))
        .groupBy("error")
        .agg(
            F.sum(F.when(F.col("kind") == "failed", 1).otherwise(0)).alias("retried"),
            F.sum(F.when(F.col("kind") == "dead", 1).otherwise(0)).alias("dead"),
        )
        .orderBy(F.desc(F.col("retried") + F.col("dead")))
        .limit(top)
        .collect()
    )
    return [(r.error or "(no error text)", r.retried, r.dead) for r in rows]


def draw(points: list[dict[str, object]], reasons: list[tuple[str, int, int]], out: Path) -> None:
    figure = plt.figure(figsize=(12, 8), layout="constrained")
    grid = figure.add_gridspec(2, 2)
    colours = dict(
        zip((t.name for t in TENANTS), ("tab:blue", "tab:orange", "tab:green"), strict=True)
    )
    for column, measure in enumerate(("dwell", "processing")):
        axes = figure.add_subplot(grid[0, column])
        for tenant, colour in colours.items():
            mine = [p for p in points if p["tenant"] == tenant and p[measure] is not None]
            minutes = [(float(p["bucket"]) - START) / 60 for p in mine]  # type: ignore[arg-type]
            for q, style in ((0, "-"), (1, "--")):
                values = [p[measure][q] for p in mine]  # type: ignore[index]
                label = f"{tenant} p{(50, 99)[q]}"
                axes.plot(minutes, values, style, color=colour, label=label)
        axes.set_title(
            "dwell: enqueue to first lease" if measure == "dwell" else "processing: lease to done"
        )
        axes.set_xlabel("minutes (by enqueue time)")
        axes.set_ylabel("seconds")
        if measure == "dwell":  # zero while nobody waits
            axes.set_yscale("symlog", linthresh=10)
        else:
            axes.set_yscale("log")
        axes.legend(fontsize="small", ncols=3)
        axes.grid(alpha=0.3)
    axes = figure.add_subplot(grid[1, :])
    names = [r[0] for r in reasons][::-1]
    retried = [r[1] for r in reasons][::-1]
    dead = [r[2] for r in reasons][::-1]
    axes.barh(names, retried, color="tab:olive", label="failed, retried")
    axes.barh(names, dead, left=retried, color="tab:red", label="dead letter")
    axes.set_title("top failure reasons")
    axes.set_xlabel("failures")
    axes.legend()
    figure.suptitle("queue history: per-tenant latency and failures (s3q history in Spark)")
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=100)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url", nargs="?", help="the queue (default: a temporary directory)")
    parser.add_argument("--minutes", type=float, default=60.0, help="simulated traffic")
    parser.add_argument("--out", type=Path, default=Path("queue_history.png"))
    args = parser.parse_args()
    if args.minutes <= 0:
        parser.error(f"--minutes must be > 0, got {args.minutes}")
    url = args.url or Path(tempfile.mkdtemp(prefix="s3q-history-example-")).as_uri() + "/orders"

    started = time.perf_counter()
    sent = load(url, args.minutes)
    print(f"1. {sent:,} messages of {len(TENANTS)} tenants, {args.minutes:g} simulated minutes, "
          f"in {time.perf_counter() - started:.1f} s: {url}")  # fmt: skip

    local = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"}
    spark = SparkSession.builder.master("local[2]").config(map=local).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    s3q.spark.register(spark)
    try:
        events = (
            spark.read.format("s3q")
            .option("history", "true")
            .option("objectsPerPartition", 1024)  # small log objects: fewer, longer tasks
            .load(url)
            .cache()
        )
        lives = s3q.spark.lives(events)
        kinds = dict(events.groupBy("kind").count().collect())
        print("2. events by kind:", ", ".join(f"{k} {n:,}" for k, n in sorted(kinds.items())))
        points, reasons = percentiles(lives), failures(events)
    finally:
        spark.stop()
    for error, retried, dead in reasons:
        print(f"   {retried + dead:5,} {error} ({dead} dead)")
    draw(points, reasons, args.out)
    print(f"3. wrote {args.out}")


if __name__ == "__main__":
    main()
