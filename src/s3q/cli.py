"""The ``s3q`` command line."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

import s3q

from .errors import S3QError

F = TypeVar("F", bound=Callable[..., Any])

console = Console()
if not console.is_terminal:
    console = Console(width=160)  # piped output: do not squeeze tables to 80 columns

DEFAULT_STORE = "s3q-data"


def default_store() -> str:
    """The embedded default store: ``$S3Q_STORE``, else ``./s3q-data``."""
    return os.environ.get("S3Q_STORE") or str(Path(DEFAULT_STORE).absolute())


def queue_url(store: str, name: str) -> str:
    return f"{store.rstrip('/')}/{name}"


def friendly_errors(command: F) -> F:
    """Turn s3q errors into a one-line message and exit code 1: no traceback for a user."""

    @wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except S3QError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from None

    return run  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(s3q.__version__, prog_name="s3q")
def main() -> None:
    """s3q: a durable message queue whose whole state lives in object storage."""


@main.command()
@click.option("--store", default=None, help="Store root URL or path [default: ./s3q-data].")
@click.option("--messages", default=20_000, show_default=True, help="Messages to enqueue.")
@friendly_errors
def demo(store: str | None, messages: int) -> None:
    """Enqueue, process and report on a demo queue in the embedded default store."""
    if messages < 1:
        raise click.BadParameter("must be >= 1", param_hint="--messages")
    url = queue_url(store or default_store(), "demo")
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
        print_stats(q.stats())
        dead = q.dead_letters(limit=3)
        if dead:
            console.print(
                "dead letters (first 3): "
                + ", ".join(f"{m.payload.decode()!r} ({m.last_error})" for m in dead)
            )


def print_stats(stats: s3q.QueueStats) -> None:
    table = Table(title="queue stats", show_header=True)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name in (
        "pending",
        "delayed",
        "processing",
        "retry",
        "completed",
        "dead",
        "total_enqueued",
        "commits",
        "store_requests",
    ):
        table.add_row(name, f"{getattr(stats, name):,}")
    table.add_row("mean_ops_per_commit", f"{stats.mean_ops_per_commit:,.1f}")
    console.print(table)


@main.command()
@click.argument("url")
@friendly_errors
def stats(url: str) -> None:
    """Show a queue's figures (opens it as its writer)."""
    with s3q.open(url) as q:
        print_stats(q.stats())


@main.command()
@click.option("--store", default=None, help="Queue URL [default: a temporary file:// directory].")
@click.option("--messages", default=1_000_000, show_default=True, help="Messages per phase.")
@click.option("--size", default=1024, show_default=True, help="Payload bytes.")
@click.option("--batch", default=1000, show_default=True, help="Messages per call (1: single).")
@click.option("--producers", default=4, show_default=True, help="Concurrent producer tasks.")
@click.option("--consumers", default=4, show_default=True, help="Concurrent consumer tasks.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object, nothing else.")
@friendly_errors
def bench(
    store: str | None,
    messages: int,
    size: int,
    batch: int,
    producers: int,
    consumers: int,
    as_json: bool,
) -> None:
    """Measure throughput, latency and requests per message: enqueue, dequeue+complete, mixed."""
    import asyncio
    import json
    import sys

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from .bench import BenchConfig, as_dicts, run

    for name, value, low in (
        ("--messages", messages, 1),
        ("--size", size, 0),
        ("--batch", batch, 1),
        ("--producers", producers, 1),
        ("--consumers", consumers, 1),
    ):
        if value < low:
            raise click.BadParameter(f"must be >= {low}", param_hint=name)
    config = BenchConfig(store, messages, size, batch, producers, consumers)
    command = "s3q " + " ".join(sys.argv[1:])
    err = Console(stderr=True)
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=as_json or not err.is_terminal,
    ) as bar:
        tasks: dict[str, Any] = {}

        def progress(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total)
            bar.update(tasks[phase], completed=done)

        results, storage = asyncio.run(run(config, progress))
    if as_json:
        summary = {
            "command": command,
            "config": vars(config),
            "phases": as_dicts(results),
            "storage": vars(storage),
        }
        click.echo(json.dumps(summary))
        return
    table = Table(
        title=f"s3q bench: {messages:,} x {size} B, batch {batch}, "
        f"{producers} producers, {consumers} consumers"
    )
    for col in (
        "phase",
        "msg/s",
        "MiB/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "max ms",
        "PUT/msg",
        "GET/msg",
        "B written/msg",
        "commits",
        "peak RSS MiB",
    ):
        table.add_column(col, justify="left" if col == "phase" else "right")
    for r in results:
        lat = r.latency_ms
        table.add_row(
            r.phase,
            f"{r.msg_per_s:,.0f}",
            f"{r.mib_per_s:,.1f}",
            f"{lat['p50']:.2f}",
            f"{lat['p95']:.2f}",
            f"{lat['p99']:.2f}",
            f"{lat['max']:.2f}",
            f"{r.puts_per_msg:.4f}",
            f"{r.gets_per_msg:.4f}",
            f"{r.bytes_written_per_msg:,.0f}",
            f"{r.commits:,}",
            f"{r.peak_rss_mib:,.0f}",
        )
    console.print(table)
    console.print(
        f"reopen with {messages:,} pending: {storage.reopen_seconds:.2f} s "
        f"(peak RSS {storage.reopen_rss_mib:,.0f} MiB); after all completed and one GC pass: "
        f"{storage.objects_after_one_gc} objects, {storage.bytes_after_one_gc / 2**20:.2f} MiB; "
        f"after two: {storage.objects_after_two_gc} objects, "
        f"{storage.bytes_after_two_gc / 2**20:.2f} MiB"
    )
    console.print(f"command: {command}")


if __name__ == "__main__":  # pragma: no cover
    main()
