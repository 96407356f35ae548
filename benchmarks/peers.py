"""Side-by-side benchmark: s3q against the seed design (SlateDB) and persist-queue.

Runs the same workload, in one run, on:

- **s3q** on a temporary local directory: enqueue in batches of 1000, enqueue one at a time,
  dequeue(max_messages=1000) + complete_batch of everything, and one-at-a-time enqueues from
  1000 concurrent asyncio producers (the group-commit case).
- **the seed design** (s3_q): one SlateDB put per message, each awaited until durable, with default
  settings on a local object store; then the messages are read back and deleted one by one.
- **persist-queue**: its SQLite ack queue (auto_commit, ``PRAGMA synchronous=FULL``), one put per
  message, then get + ack per message.

The peers are installed on first use (``pip install slatedb persist-queue``); they are not
dependencies of s3q. Usage::

    python benchmarks/peers.py [--messages N] [--size BYTES] [--seed-messages M] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import s3q

EXTRAS = {"slatedb": "slatedb", "persistqueue": "persist-queue"}  # module -> pip name
BATCH = 1000
PRODUCERS = 1000
ONE_AT_A_TIME_CAP = 20_000

# The kind of each phase: a peer's phase is compared with s3q's phase of the same kind.
ENQUEUE_ONE = "enqueue-one"
ENQUEUE_BATCH = "enqueue-batch"
ENQUEUE_CONCURRENT = "enqueue-concurrent"
DRAIN = "drain"


@dataclass
class Phase:
    """One measured phase of one system."""

    system: str
    phase: str
    kind: str
    messages: int
    seconds: float

    @property
    def rate(self) -> float:
        """Messages per second."""
        return self.messages / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Report:
    """Everything one run measured, and what it could not."""

    phases: list[Phase] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass
class Stopwatch:
    """Elapsed seconds of a ``with`` block."""

    seconds: float = 0.0


@contextmanager
def stopwatch() -> Iterator[Stopwatch]:
    """Time the block; read ``.seconds`` after it."""
    watch = Stopwatch()
    started = time.perf_counter()
    try:
        yield watch
    finally:
        watch.seconds = time.perf_counter() - started


def log(message: str) -> None:
    """Progress on stderr, so ``--json`` keeps stdout to one object."""
    print(message, file=sys.stderr, flush=True)


def ensure_extras() -> dict[str, str]:
    """Pip-install the peers that are not importable; return {module: error} for the failures."""
    missing = [m for m in EXTRAS if importlib.util.find_spec(m) is None]
    if missing:
        names = [EXTRAS[m] for m in missing]
        log(f"installing {' '.join(names)} ...")
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", *names],
            stdout=sys.stderr,
            stderr=sys.stderr,
            check=False,
        )
        importlib.invalidate_caches()
    failed = {}
    for module in EXTRAS:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            failed[module] = f"{EXTRAS[module]} is not installable or importable here: {exc}"
    return failed


def fsync_micros(workdir: Path, rounds: int = 200) -> float:
    """Mean microseconds of a 1 KiB write + fsync on the disk under ``workdir``."""
    with open(workdir / "fsync-probe", "wb") as f, stopwatch() as watch:
        for _ in range(rounds):
            f.write(b"x" * 1024)
            f.flush()
            os.fsync(f.fileno())
    return watch.seconds / rounds * 1e6


async def _s3q_concurrent(url: str, n: int, payload: bytes, report: Report) -> float:
    """Enqueue n messages one at a time from PRODUCERS tasks on one queue; return seconds."""
    q = await s3q.open_async(url, max_message_size=max(len(payload), 1))
    quota = [n]

    async def producer() -> None:
        while quota[0] > 0:
            quota[0] -= 1
            await q.enqueue(payload)

    try:
        with stopwatch() as watch:
            await asyncio.gather(*(producer() for _ in range(PRODUCERS)))
        stats = await q.stats()
        if stats.pending != n:
            raise RuntimeError(f"s3q: {stats.pending} pending after {n} concurrent enqueues")
        report.notes.append(
            f"s3q, {PRODUCERS} producers: {stats.commits} commits, "
            f"{stats.mean_ops_per_commit:.0f} operations per commit (group commit); every commit "
            "is a file fsynced with its directory."
        )
    finally:
        await q.close()
    return watch.seconds


def bench_s3q(n: int, size: int, workdir: Path, report: Report) -> list[Phase]:
    """s3q on a local directory: batch, one-at-a-time, drain, and 1000 concurrent producers."""
    payload = b"x" * size
    one = min(n, ONE_AT_A_TIME_CAP)
    phases: list[Phase] = []
    with s3q.open(str(workdir / "s3q"), max_message_size=max(size, 1)) as q:
        log(f"s3q: enqueue_batch x{BATCH}, {n} messages")
        with stopwatch() as watch:
            for start in range(0, n, BATCH):
                q.enqueue_batch([payload] * min(BATCH, n - start))
        phases.append(
            Phase("s3q", f"enqueue_batch ({BATCH}/call)", ENQUEUE_BATCH, n, watch.seconds)
        )

        log(f"s3q: enqueue one at a time, {one} messages")
        with stopwatch() as watch:
            for _ in range(one):
                q.enqueue(payload)
        phases.append(Phase("s3q", "enqueue, one at a time", ENQUEUE_ONE, one, watch.seconds))

        log(f"s3q: dequeue({BATCH}) + complete_batch, {n + one} messages")
        drained = 0
        with stopwatch() as watch:
            while msgs := q.dequeue(max_messages=BATCH):
                q.complete_batch(msgs)
                drained += len(msgs)
        if drained != n + one:
            raise RuntimeError(f"s3q: drained {drained} of {n + one} messages")
        phases.append(
            Phase("s3q", f"dequeue({BATCH}) + complete_batch", DRAIN, drained, watch.seconds)
        )

    log(f"s3q: enqueue one at a time from {PRODUCERS} asyncio producers, {n} messages")
    seconds = asyncio.run(_s3q_concurrent(str(workdir / "s3q-concurrent"), n, payload, report))
    phases.append(
        Phase("s3q", f"enqueue, {PRODUCERS} async producers", ENQUEUE_CONCURRENT, n, seconds)
    )
    return phases


async def _seed(m: int, size: int, workdir: Path, report: Report) -> list[Phase]:
    """The s3_q seed's storage pattern on SlateDB; see :func:`bench_seed`."""
    from slatedb.uniffi import DbBuilder, KeyRange, ObjectStore, Settings

    payload = b"x" * size
    # A file:// store must be rooted at "/": SlateDB wants the path given to the builder.
    db = await DbBuilder(
        str(workdir / "slatedb").lstrip("/"), ObjectStore.resolve("file:///")
    ).build()
    try:
        log(f"seed (SlateDB): put + await_durable per message, {m} messages")
        with stopwatch() as watch:
            for i in range(m):
                handle = await db.put(b"msg:%012d" % i, payload)
                await handle.await_durable()
        phases = [
            Phase("seed (SlateDB)", "put per message, durable", ENQUEUE_ONE, m, watch.seconds)
        ]

        log(f"seed (SlateDB): scan back + delete per message (durable), {m} messages")
        keys: list[bytes] = []
        with stopwatch() as watch:
            it = await db.scan(
                KeyRange(start=b"msg:", start_inclusive=True, end=b"msg;", end_inclusive=False)
            )
            while batch := await it.next_batch(BATCH):
                keys.extend(kv.key for kv in batch if kv.value == payload)
            for key in keys:
                handle = await db.delete(key)
                await handle.await_durable()
        if len(keys) != m:
            raise RuntimeError(f"SlateDB: read back {len(keys)} of {m} messages")
        phases.append(
            Phase("seed (SlateDB)", "scan + delete per message, durable", DRAIN, m, watch.seconds)
        )
    finally:
        await db.shutdown()
    flush = json.loads(Settings.default().to_json_string())["flush_interval"]
    report.notes.append(
        f"SlateDB (slatedb.uniffi): default Settings (flush_interval={flush}); db.put() returns a "
        "WriteHandle at once and handle.await_durable() waits for the WAL flush to the store, so "
        "each durable put waits for the next flush tick. Its local store is object_store's "
        "LocalFileSystem, which does not fsync."
    )
    return phases


def bench_seed(m: int, size: int, workdir: Path, report: Report) -> list[Phase]:
    """The seed design: SlateDB on a local object store, one put awaited durable per message."""
    return asyncio.run(_seed(m, size, workdir, report))


def bench_persist_queue(n: int, size: int, workdir: Path, report: Report) -> list[Phase]:
    """persist-queue's SQLiteAckQueue (auto_commit, synchronous FULL): put, then get + ack."""
    import persistqueue

    one = min(n, ONE_AT_A_TIME_CAP)
    payload = b"x" * size
    q = persistqueue.SQLiteAckQueue(str(workdir / "persistqueue"), auto_commit=True)
    try:
        # No public option: set it on the queue's own connections (one, single-threaded).
        conns = cast("list[sqlite3.Connection]", list(dict.fromkeys([q._putter, q._getter])))
        for conn in conns:
            conn.execute("PRAGMA synchronous=FULL")
        modes = sorted({conn.execute("PRAGMA synchronous").fetchone()[0] for conn in conns})
        journal = conns[0].execute("PRAGMA journal_mode").fetchone()[0]
        report.notes.append(
            f"persist-queue {getattr(persistqueue, '__version__', '?')}: SQLiteAckQueue, "
            f"auto_commit=True, journal_mode={journal}, synchronous={modes} (2 = FULL); "
            "one transaction per put, per get and per ack. Its get() scans from the first row past "
            "every acked row still in the table (no index on status; they stay until "
            "clear_acked_data), so get + ack slows down as the drain goes on."
        )

        log(f"persist-queue: put one at a time, {one} messages")
        with stopwatch() as watch:
            for _ in range(one):
                q.put(payload)
        phases = [Phase("persist-queue", "put, one at a time", ENQUEUE_ONE, one, watch.seconds)]

        log(f"persist-queue: get + ack one at a time, {one} messages")
        drained = 0
        with stopwatch() as watch:
            while True:
                try:
                    item = q.get(block=False, raw=True)
                except persistqueue.Empty:
                    break
                q.ack(id=item["pqid"])
                drained += 1
        if drained != one:
            raise RuntimeError(f"persist-queue: drained {drained} of {one} messages")
        phases.append(Phase("persist-queue", "get + ack, one at a time", DRAIN, one, watch.seconds))
    finally:
        q.close()
    return phases


def ratios(phases: list[Phase]) -> dict[int, dict[str, float]]:
    """For each peer phase (by index): s3q's rate divided by the peer's, per comparable s3q phase.

    An enqueue phase of a peer is compared with s3q's one-at-a-time, batch and concurrent
    enqueues; a drain phase with s3q's dequeue + complete_batch.
    """
    s3q_rate = {p.kind: p.rate for p in phases if p.system == "s3q"}
    out: dict[int, dict[str, float]] = {}
    for i, p in enumerate(phases):
        if p.system == "s3q" or p.rate == 0:
            continue
        kinds = (
            [ENQUEUE_ONE, ENQUEUE_BATCH, ENQUEUE_CONCURRENT] if p.kind == ENQUEUE_ONE else [p.kind]
        )
        out[i] = {k: s3q_rate[k] / p.rate for k in kinds if k in s3q_rate}
    return out


def print_table(report: Report, args: argparse.Namespace, command: str) -> None:
    """The rich table, the notes, and the command line."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:  # piped: do not squeeze the table into 80 columns
        console = Console(width=150)
    table = Table(
        title=f"s3q vs peers: {args.messages} messages of {args.size} B "
        f"(one-at-a-time capped at {ONE_AT_A_TIME_CAP}, seed at {args.seed_messages})"
    )
    for name, justify in [
        ("system", "left"),
        ("phase", "left"),
        ("messages", "right"),
        ("seconds", "right"),
        ("msg/s", "right"),
        ("s3q same kind ÷ this", "right"),
        ("s3q batch ÷ this", "right"),
        (f"s3q {PRODUCERS} producers ÷ this", "right"),
    ]:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    found = ratios(report.phases)

    def cell(i: int, kind: str) -> str:
        value = found.get(i, {}).get(kind)
        return "" if value is None else f"{value:,.1f}x"

    for i, p in enumerate(report.phases):
        table.add_row(
            p.system,
            p.phase,
            f"{p.messages:,}",
            f"{p.seconds:.2f}",
            f"{p.rate:,.0f}",
            cell(i, p.kind),
            cell(i, ENQUEUE_BATCH) if p.kind == ENQUEUE_ONE else "",
            cell(i, ENQUEUE_CONCURRENT) if p.kind == ENQUEUE_ONE else "",
        )
    console.print(table)
    for system, reason in report.skipped.items():
        console.print(f"[bold red]{system} skipped:[/] {reason}")
    for note in report.notes:
        console.print(f"- {note}", highlight=False)
    console.print(f"command: {command}", highlight=False, soft_wrap=True)


def as_json(report: Report, args: argparse.Namespace, command: str) -> dict[str, Any]:
    """The run as one JSON-able object."""
    found = ratios(report.phases)
    return {
        "config": {
            "messages": args.messages,
            "size": args.size,
            "seed_messages": args.seed_messages,
            "batch": BATCH,
            "producers": PRODUCERS,
            "one_at_a_time_cap": ONE_AT_A_TIME_CAP,
        },
        "results": [
            {
                "system": p.system,
                "phase": p.phase,
                "kind": p.kind,
                "messages": p.messages,
                "seconds": round(p.seconds, 4),
                "msg_per_s": round(p.rate, 1),
                "s3q_ratio": {k: round(v, 2) for k, v in found.get(i, {}).items()},
            }
            for i, p in enumerate(report.phases)
        ],
        "skipped": report.skipped,
        "notes": report.notes,
        "command": command,
    }


def main() -> None:
    """Parse arguments, run every system, print the table or the JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000, help="messages per phase (N)")
    parser.add_argument("--size", type=int, default=1024, help="payload bytes")
    parser.add_argument(
        "--seed-messages", type=int, default=300, help="messages for the seed design (~10/s)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if min(args.messages, args.seed_messages) < 1 or args.size < 0:
        parser.error("--messages and --seed-messages must be positive, --size non-negative")
    command = shlex.join(sys.orig_argv)

    failed = ensure_extras()
    report = Report()
    workdir = Path(tempfile.mkdtemp(prefix="s3q-peers-"))
    try:
        report.notes.append(
            f"disk: a 1 KiB write + fsync takes {fsync_micros(workdir):.0f} µs here "
            f"(temp dir {workdir.parent})."
        )
        report.phases += bench_s3q(args.messages, args.size, workdir, report)
        if "slatedb" in failed:
            report.skipped["seed (SlateDB)"] = failed["slatedb"]
            log(f"seed (SlateDB) skipped: {failed['slatedb']}")
        else:
            try:
                report.phases += bench_seed(args.seed_messages, args.size, workdir, report)
            except Exception as exc:  # a peer that cannot run here is reported, not fatal
                report.skipped["seed (SlateDB)"] = f"SlateDB could not be used: {exc!r}"
                log(f"seed (SlateDB) skipped: {exc!r}")
        if "persistqueue" in failed:
            report.skipped["persist-queue"] = failed["persistqueue"]
            log(f"persist-queue skipped: {failed['persistqueue']}")
        else:
            report.phases += bench_persist_queue(args.messages, args.size, workdir, report)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    if args.json:
        print(json.dumps(as_json(report, args, command)))
    else:
        print_table(report, args, command)


if __name__ == "__main__":
    main()
