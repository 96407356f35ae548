"""Queue history on Spark local[2] from file://: every figure of issue 33's targets in one run.

    python benchmarks/history_read.py [--events 10000000] [--batch 10000] [--writer-batch 1000]
                                      [--writer-seconds 10]
    python benchmarks/history_read.py --small    # the same, about 200,000 events: under a minute

Loads a queue (history_retention on) with enqueues, leases and completions in batches of
``--batch`` (three events per message, 100-byte payloads, a fake clock moving a second a
batch), then prints, side by side:

- **full read**: events per second of a ``count()`` of ``spark.read.format("s3q")
  .option("history", "true")`` on local[2] (after one to warm the Python workers);
- **time window** (about 5 % of the time): its read time, the log objects it plans against all
  of them (the rest are skipped whole), and the bytes it reads against a full read's, both
  measured by reading what the driver and the executors read (``history.queue_id``,
  ``history.seqs``, ``timeline.window``, ``history.objects`` of the planned objects) through a
  local store that counts the bytes its GETs return;
- **life by id**: wall time of ``s3q history URL --id ID --json`` run as a subprocess (Python
  start-up included) for a message enqueued early, in the middle and late;
- **storage**: the bytes of the log objects kept against the bytes of the payloads enqueued,
  everything the store holds (so nothing else is kept: no second copy), and what ``stats()``
  and a collection pass report for history (``history_objects``; no bytes figure exists);
- **writer beside a read**: enqueue + dequeue + complete throughput (``--writer-batch``
  messages a call) of a writer process on the same queue for ``--writer-seconds``, alone and
  while another process runs full Spark history reads one after another, and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

import s3q
from s3q.history import log_events, timeline
from s3q.log import ids
from s3q.prices import STORAGE_GB_MONTH
from s3q.store.local import LocalStore

T0 = 1_700_000_000.0
PAYLOAD = 100  # bytes
SCRIPT = str(Path(__file__).resolve())


@dataclass
class Loaded:
    seconds: float
    messages: int
    rounds: int
    picks: dict[str, str]  # early, middle, late: a message id enqueued then
    report: Any  # the CompactionReport of a pass after the load
    history_objects: int  # stats().history_objects after it


def load(url: str, events: int, batch: int) -> Loaded:
    """The queue, loaded; then checkpointed and collected (all is kept: history_retention)."""
    now = [T0]
    rounds = max(1, events // (3 * batch))
    picks: dict[str, str] = {}
    started = time.perf_counter()
    with s3q.open(url, history_retention=1e9, clock=lambda: now[0]) as q:
        for r in range(rounds):
            sent = q.enqueue_batch([b"x" * PAYLOAD] * batch)
            for name, at in (("early", 0), ("middle", rounds // 2), ("late", rounds - 1)):
                if r == at:
                    picks[name] = sent[len(sent) // 2]
            q.complete_batch(q.dequeue(max_messages=batch))
            now[0] += 1.0
        seconds = time.perf_counter() - started
        q.compact()  # a checkpoint of the whole log, then (past gc_grace) a pass that keeps it
        now[0] += 3600.0
        report = q.compact()
        held = q.stats().history_objects
    return Loaded(seconds, rounds * batch, rounds, picks, report, held)


class Metered(LocalStore):
    """A local directory's store that counts the bytes its reads return."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        super().__init__(root)
        self.bytes_read = 0

    async def get(self, key: str) -> bytes:
        data = await super().get(key)
        self.bytes_read += len(data)
        return data

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        data = await super().get_range(key, start, end)
        self.bytes_read += len(data)
        return data

    async def get_tail(self, key: str, size: int) -> bytes:
        data = await super().get_tail(key, size)
        self.bytes_read += len(data)
        return data


async def read_bytes(root: Path, since: float | None, until: float | None) -> tuple[int, int, int]:
    """What a history read of ``since`` to ``until`` (None: unbounded) reads without payloads,
    driver and executors together: log objects planned, all log objects, bytes."""
    store = Metered(root)
    try:
        await log_events.queue_id(store)  # the driver's plan (spark.history_read._plan)
        seqs = await log_events.seqs(store)
        chosen, _ = await timeline.window(store, seqs, since, until)
        async for _ in log_events.objects(store, chosen, whole=False):  # the executors'
            pass
        return len(chosen), len(seqs), store.bytes_read
    finally:
        await store.close()


def session() -> Any:
    """Spark on local[2], with s3q's sources (``benchmarks/spark_bench.py``'s session)."""
    from spark_bench import session as spark_session  # beside this script

    return spark_session("1g")


def spark_reads(url: str, rounds: int) -> dict[str, float]:
    """A full read and a window's, timed; the window's ends."""
    from pyspark.sql import functions as F

    spark = session()
    try:
        events = spark.read.format("s3q").option("history", "true").load(url)
        events.count()  # warm up the Python workers
        started = time.perf_counter()
        total = events.count()
        full = time.perf_counter() - started
        since = T0 + rounds * 0.50
        until = since + max(1.0, rounds * 0.05)
        low = datetime.datetime.fromtimestamp(since, datetime.UTC)
        high = datetime.datetime.fromtimestamp(until, datetime.UTC)
        started = time.perf_counter()
        inside = events.where((F.col("at") >= F.lit(low)) & (F.col("at") <= F.lit(high))).count()
        windowed = time.perf_counter() - started
    finally:
        spark.stop()
    return {
        "total": total,
        "full": full,
        "inside": inside,
        "windowed": windowed,
        "since": since,
        "until": until,
    }


async def life_reads(root: Path, mid: str) -> tuple[int, int, int]:
    """The GETs, LISTs and bytes of ``s3q.history.log_events.life`` (what ``--id`` reads)."""
    store = Metered(root)
    try:
        await log_events.life(store, mid)
        return store.counts.gets, store.counts.lists, store.bytes_read
    finally:
        await store.close()


def life_by_cli(url: str, mid: str) -> tuple[float, list[str]]:
    """Wall time of ``s3q history URL --id ID`` in a process of its own; the kinds it printed."""
    command = [sys.executable, "-m", "s3q.cli", "history", url, "--id", mid, "--json"]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - started
    return seconds, [e["kind"] for e in json.loads(done.stdout)["events"]]


# -- the two processes of the writer's measurement ------------------------------------------------


def role_writer(url: str, seconds: float, batch: int) -> None:
    """Enqueue, dequeue and complete ``batch`` messages at a time for ``seconds``: one JSON
    line, messages per second."""
    payloads = [b"w" * PAYLOAD] * batch
    with s3q.open(url) as q:
        done, started = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds:
            q.enqueue_batch(payloads)
            got = q.dequeue(max_messages=batch)
            q.complete_batch(got)
            done += len(got)
    print(json.dumps({"messages": done, "seconds": elapsed, "rate": done / elapsed}), flush=True)


def role_reader(url: str) -> None:
    """Full history reads one after another until stdin closes ("ready" once warm): one JSON
    line, the reads done and their events per second."""
    spark = session()
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    events = spark.read.format("s3q").option("history", "true").load(url)
    events.count()
    print("ready", flush=True)
    reads, rows, spent = 0, 0, 0.0
    while not stop.is_set():
        started = time.perf_counter()
        rows += events.count()
        spent += time.perf_counter() - started
        reads += 1
    spark.stop()
    print(json.dumps({"reads": reads, "rate": rows / spent if spent else 0.0}), flush=True)


def writer_run(url: str, seconds: float, batch: int) -> dict[str, float]:
    command = [sys.executable, SCRIPT, "--role", "writer", "--url", url]
    command += ["--writer-seconds", str(seconds), "--writer-batch", str(batch)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return result


def writer_beside_read(url: str, seconds: float, batch: int) -> tuple[dict[str, float], Any]:
    """The writer's run while a reader process reads the history over and over."""
    reader = subprocess.Popen(
        [sys.executable, SCRIPT, "--role", "reader", "--url", url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert reader.stdin is not None and reader.stdout is not None
    try:
        if reader.stdout.readline().strip() != "ready":
            raise RuntimeError("the reader process did not start")
        wrote = writer_run(url, seconds, batch)
    finally:
        reader.stdin.close()  # the reader finishes the read under way, then stops
    read = json.loads(reader.stdout.read().splitlines()[-1])
    reader.wait(timeout=600)
    return wrote, read


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--writer-batch", type=int, default=1000)
    parser.add_argument("--writer-seconds", type=float, default=10.0)
    parser.add_argument("--small", action="store_true", help="200,000 events, 3 s writer runs")
    parser.add_argument("--role", choices=["writer", "reader"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "writer":
        return role_writer(args.url, args.writer_seconds, args.writer_batch)
    if args.role == "reader":
        return role_reader(args.url)
    if args.small:
        args.events, args.batch, args.writer_seconds = 200_000, 2_000, 3.0

    with tempfile.TemporaryDirectory(prefix="s3q-history-") as where:
        run(Path(where) / "q", args)


def run(root: Path, args: argparse.Namespace) -> None:
    url = root.as_uri()
    loaded = load(url, args.events, args.batch)
    log_sizes = [p.stat().st_size for p in (root / "log").iterdir()]
    lives = {name: life_by_cli(url, mid) for name, mid in loaded.picks.items()}
    reads = {name: asyncio.run(life_reads(root, mid)) for name, mid in loaded.picks.items()}
    spark = spark_reads(url, loaded.rounds)
    planned, objects, window_bytes = asyncio.run(read_bytes(root, spark["since"], spark["until"]))
    _, _, full_bytes = asyncio.run(read_bytes(root, None, None))
    alone = writer_run(url, args.writer_seconds, args.writer_batch)
    beside, read = writer_beside_read(url, args.writer_seconds, args.writer_batch)

    command = f"python benchmarks/history_read.py --events {args.events} --batch {args.batch}"
    print(f"command: {command} --writer-batch {args.writer_batch} ", end="")
    print(f"--writer-seconds {args.writer_seconds:g}")
    total = int(spark["total"])
    print(
        f"loaded {total:,} events ({loaded.messages:,} messages) in {objects:,} log objects "
        f"in {loaded.seconds:.1f} s"
    )
    print(f"full read:      {total / spark['full']:,.0f} events/s ({spark['full']:.2f} s)")
    print(
        f"time window:    {int(spark['inside']):,} events in {spark['windowed']:.2f} s; planned "
        f"{planned:,} of {objects:,} log objects ({100 * (1 - planned / objects):.1f} % "
        f"skipped), read {window_bytes:,} of a full read's {full_bytes:,} bytes "
        f"({100 * window_bytes / full_bytes:.1f} %)"
    )
    for name, mid in loaded.picks.items():
        seconds, kinds = lives[name]
        gets, lists, got = reads[name]
        print(
            f"life by id:     {seconds:.2f} s  {name:6} {mid} (log object "
            f"{ids.enqueued_by(mid):,} of {objects:,}): {', '.join(kinds)}; "
            f"{gets} GETs, {lists} LISTs, {got:,} bytes"
        )
    log_bytes, payload_bytes = sum(log_sizes), loaded.messages * PAYLOAD
    report = loaded.report
    print(
        f"storage:        log objects {len(log_sizes):,}, {log_bytes:,} bytes for "
        f"{payload_bytes:,} bytes of payloads enqueued ({log_bytes / payload_bytes:.2f} x); "
        f"the store holds {report.objects:,} objects, {report.bytes:,} bytes "
        f"({report.bytes - log_bytes:,} beyond the log: checkpoints, lease)"
    )
    print(
        f"                stats().history_objects {loaded.history_objects:,}, collection "
        f"pass history_objects {report.history_objects:,} (no bytes figure); "
        f"${log_bytes / 1e9 * STORAGE_GB_MONTH:.4f} a month at S3 Standard's list price"
    )
    print(
        f"writer:         {alone['rate']:,.0f} msg/s alone, {beside['rate']:,.0f} msg/s beside "
        f"a full history read ({beside['rate'] / alone['rate']:.2f} x; "
        f"full reads done meanwhile: {int(read['reads'])}, at {read['rate']:,.0f} events/s)"
    )


if __name__ == "__main__":
    main()
