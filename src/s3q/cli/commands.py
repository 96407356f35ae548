"""The ``s3q`` commands: each parses its arguments, calls the queue (or the broker, the worker,
the benchmark) and hands what it got to a renderer (:mod:`.render`).

Queue names become URLs in :mod:`.stores`, enqueue's input is read by :mod:`.inputs`, and
errors become one line in :mod:`.errors`.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console

import s3q

from ..config import check_settings
from ..errors import S3QError
from ..store import queue_url
from .demo import run_demo
from .errors import friendly_errors, one_line
from .inputs import Item, parse_attributes, parse_settings, read_items
from .render import (
    console,
    emit_json,
    phase_progress,
    progress_bar,
    show_deliveries,
    show_enqueued,
    show_lease_note,
    show_messages,
    show_result,
    show_stats,
    watch_stats,
)
from .stores import (
    exists,
    opened,
    resolve,
    scratch_store_option,
    shown,
    shown_command,
    store_option,
    store_root,
)

F = TypeVar("F", bound=Callable[..., Any])

BATCH = 1000  # messages per enqueue_batch call of `s3q enqueue`


def json_option(command: F) -> F:
    """``--json``: print one JSON document and nothing else."""
    option = click.option(
        "--json", "as_json", is_flag=True, help="Print one JSON document and nothing else."
    )
    return option(command)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(s3q.__version__, prog_name="s3q")
def main() -> None:
    """s3q: a durable message queue whose whole state lives in object storage.

    \b
    A queue is addressed by NAME inside a store: <store>/<NAME>, where the store
    is --store, else $S3Q_STORE, else ./s3q-data. A NAME containing "://" is a
    full queue URL. Each command opens the queue as its writer for a moment.

    \b
    Exit codes: 0 ok; 1 an error (store unreachable, queue locked, message not
    found, bad input file...); 2 a usage error.
    """
    stop_on_sigterm(click.get_current_context())


#: Commands that shut down on SIGTERM in their own way (draining, finishing jobs).
OWN_SHUTDOWN = frozenset({"serve", "worker"})


def stop_on_sigterm(ctx: click.Context) -> None:
    """SIGTERM stops a command as Ctrl-C does: its call is cancelled and its queue closed, with
    no traceback (``serve`` and ``worker`` keep their own handling)."""
    if ctx.invoked_subcommand in OWN_SHUTDOWN:
        return
    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    ctx.call_on_close(lambda: signal.signal(signal.SIGTERM, previous))


@main.command()
@store_option
@click.option("--messages", default=20_000, show_default=True, help="Messages to enqueue.")
@friendly_errors
def demo(store: str | None, messages: int) -> None:
    """Enqueue, process and report on a demo queue in the embedded default store."""
    if messages < 1:
        raise click.BadParameter("must be >= 1", param_hint="--messages")
    run_demo(queue_url(store_root(store), "demo"), messages)


# --------------------------------------------------------------------------- enqueue


@main.command()
@click.argument("name")
@click.argument("payload", required=False)
@click.option("--stdin", "from_stdin", is_flag=True, help="Enqueue each line of stdin.")
@click.option(
    "--file",
    "path",
    metavar="F.jsonl",
    help='Enqueue each line of a JSON Lines file ("-": stdin): '
    '{"payload": ..., "priority": ..., "delay": ..., "group": ..., "dedup_id": ..., '
    '"attributes": {...}, "tenant": ...}.',
)
@click.option("--priority", type=click.IntRange(0, 255), help="0-255, higher first [default: 0].")
@click.option(
    "--delay", type=click.FloatRange(min=0), metavar="S", help="Seconds before it is delivered."
)
@click.option("--group", help="Ordered group: its messages are delivered one at a time.")
@click.option("--dedup-id", help="Deduplication id (with PAYLOAD only).")
@click.option(
    "--tenant", help="Who the messages are for: a noisy tenant's wait behind the others'."
)
@click.option(
    "-a",
    "--attribute",
    "attribute_pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="An attribute; repeatable.",
)
@click.option("-q", "--quiet", is_flag=True, help="Print how many, not the ids.")
@json_option
@store_option
@friendly_errors
def enqueue(
    name: str,
    payload: str | None,
    from_stdin: bool,
    path: str | None,
    priority: int | None,
    delay: float | None,
    group: str | None,
    dedup_id: str | None,
    tenant: str | None,
    attribute_pairs: tuple[str, ...],
    quiet: bool,
    as_json: bool,
    store: str | None,
) -> None:
    """Add messages and print their ids.

    The messages are PAYLOAD, each line of --stdin, or each JSON object of --file (checked
    whole before anything is enqueued). The options apply to every message; the fields of a
    --file line override them.
    """
    url = resolve(name, store)
    if (payload is not None) + from_stdin + (path is not None) != 1:
        raise click.UsageError("give exactly one of PAYLOAD, --stdin or --file")
    if dedup_id is not None and payload is None:
        raise click.UsageError(
            "--dedup-id names a single message: use it with PAYLOAD "
            "(each --file line may carry its own dedup_id)"
        )
    defaults: dict[str, Any] = {
        key: value
        for key, value in (
            ("priority", priority),
            ("delay", delay),
            ("group", group),
            ("dedup_id", dedup_id),
            ("tenant", tenant),
            ("attributes", parse_attributes(attribute_pairs)),
        )
        if value is not None
    }
    max_size = s3q.QueueConfig().max_message_size
    err = Console(stderr=True)
    items: list[Item] = read_items(payload, from_stdin, path, defaults, max_size, err)
    ids: list[str] = []
    with opened(url, create=True) as q, progress_bar(err, show=len(items) > BATCH) as bar:
        task = bar.add_task("enqueuing", total=len(items))
        for start in range(0, len(items), BATCH):
            try:
                ids.extend(q.enqueue_batch(items[start : start + BATCH]))
            except S3QError as exc:
                if not ids:
                    raise
                raise click.ClickException(
                    f"{type(exc).__name__}: {one_line(exc)} ({len(ids):,} of "
                    f"{len(items):,} messages were enqueued before it)"
                ) from None
            bar.update(task, completed=len(ids))
    show_enqueued(url, ids, as_json, quiet)


# --------------------------------------------------------------------------- reading


@main.command()
@click.argument("name")
@click.option(
    "-n", "--max-messages", "count", type=click.IntRange(min=1), default=1, show_default=True
)
@click.option(
    "--visibility-timeout",
    type=click.FloatRange(min=0, min_open=True),
    metavar="S",
    help="Seconds the lease lasts [default: 30].",
)
@click.option(
    "--wait",
    type=click.FloatRange(min=0),
    default=0.0,
    metavar="S",
    help="Seconds to wait for a first message (a delayed or retrying one coming due).",
)
@click.option("--ack", is_flag=True, help="Complete the messages once printed.")
@json_option
@store_option
@friendly_errors
def dequeue(
    name: str,
    count: int,
    visibility_timeout: float | None,
    wait: float,
    ack: bool,
    as_json: bool,
    store: str | None,
) -> None:
    """Lease messages and print them.

    A payload is shown as text if it is UTF-8, else as base64. Without --ack the messages stay
    leased for the visibility timeout, then are delivered again.
    """
    url = resolve(name, store)
    with opened(url) as q:
        messages = q.dequeue(count, visibility_timeout, wait)
        show_deliveries(url, messages, as_json, acked=ack)
        if ack and messages:
            q.complete_batch(messages)
    if not as_json and messages:
        seconds = visibility_timeout or s3q.QueueConfig().visibility_timeout
        show_lease_note(len(messages), ack, seconds)


@main.command()
@click.argument("name")
@click.option("-n", "--limit", type=click.IntRange(min=1), default=10, show_default=True)
@json_option
@store_option
@friendly_errors
def peek(name: str, limit: int, as_json: bool, store: str | None) -> None:
    """Show the next messages, without leasing them."""
    url = resolve(name, store)
    with opened(url) as q:
        messages = q.peek(limit)
    show_messages(
        url,
        messages,
        as_json,
        f"next {len(messages)} of {shown(url)}",
        "no message is deliverable now",
    )


@main.command()
@click.argument("name")
@click.option(
    "--watch",
    type=click.FloatRange(min=0.1),
    is_flag=False,
    flag_value=2.0,
    default=None,
    metavar="[SECONDS]",
    help="Refresh every SECONDS (2 if not given) until Ctrl-C.",
)
@json_option
@store_option
@friendly_errors
def stats(name: str, watch: float | None, as_json: bool, store: str | None) -> None:
    """Count a queue's messages by status."""
    url = resolve(name, store)
    if watch is not None and as_json:
        raise click.UsageError("--watch and --json do not go together")
    if watch is not None:
        watch_stats(url, watch)
        return
    with opened(url) as q:
        figures = q.stats()
    show_stats(url, figures, as_json)


@main.command()
@click.argument("name")
@click.argument("id")
@json_option
@store_option
@friendly_errors
def status(name: str, id: str, as_json: bool, store: str | None) -> None:
    """Show where message ID stands.

    One of pending, delayed, processing, retry, completed, dead.
    """
    url = resolve(name, store)
    with opened(url) as q:
        where = q.status(id)
    show_result(url, as_json, where.value, {"id": id, "status": where.value})


@main.group()
def dlq() -> None:
    """List or redrive dead letters (messages out of attempts)."""


@dlq.command("list")
@click.argument("name")
@click.option("-n", "--limit", type=click.IntRange(min=1), default=100, show_default=True)
@json_option
@store_option
@friendly_errors
def dlq_list(name: str, limit: int, as_json: bool, store: str | None) -> None:
    """Show dead messages, oldest first, with their last error."""
    url = resolve(name, store)
    with opened(url) as q:
        messages = q.dead_letters(limit)
    show_messages(
        url, messages, as_json, f"dead letters of {shown(url)}", "no dead letters", dead=True
    )


@dlq.command("redrive")
@click.argument("name")
@click.argument("ids", nargs=-1)
@json_option
@store_option
@friendly_errors
def dlq_redrive(name: str, ids: tuple[str, ...], as_json: bool, store: str | None) -> None:
    """Move dead letters back to pending: IDS, or all.

    Their attempts start again from zero.
    """
    url = resolve(name, store)
    with opened(url) as q:
        moved = q.redrive(list(ids) if ids else None)
    show_result(url, as_json, f"redrove {moved} message(s)", {"redriven": moved})


# --------------------------------------------------------------------------- writing


@main.command()
@click.argument("name")
@click.option(
    "--partitions",
    type=int,
    metavar="N",
    help="Logs to spread the queue over, 1-64; only before its first message "
    "[default: 1, or what the queue has].",
)
@click.option(
    "--set",
    "pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="A setting saved with the queue (max_attempts, visibility_timeout, delivery, ...); "
    "VALUE is JSON, else text; repeatable.",
)
@json_option
@store_option
@friendly_errors
def create(
    name: str, partitions: int | None, pairs: tuple[str, ...], as_json: bool, store: str | None
) -> None:
    """Make queue NAME with the settings given, and show it.

    A queue that exists already is opened with them: the same settings change nothing, other
    ones are saved; another partition count for a queue that held a message is refused, and
    then nothing changes.
    """
    url = resolve(name, store)
    settings = parse_settings(pairs)
    if partitions is not None and settings.setdefault("partitions", partitions) != partitions:
        raise click.UsageError("--partitions and --set partitions= differ")
    check_settings(settings)  # a bad value is refused before the store is touched
    existed = exists(url)
    with opened(url, create=True, settings=settings) as q:
        now = q.configure()  # the settings in force
    given = {key: now[key] for key in settings}
    text = f"{'queue existed' if existed else 'created queue'} {shown(url)}"
    text += f": partitions {now['partitions']}"
    text += "".join(f", {key} {value}" for key, value in given.items() if key != "partitions")
    fields = {"created": not existed, "partitions": now["partitions"], "settings": given}
    show_result(url, as_json, text, fields)


@main.command()
@click.argument("name")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@store_option
@friendly_errors
def purge(name: str, yes: bool, as_json: bool, store: str | None) -> None:
    """Remove every message that is not completed.

    Asks first; --yes does not. Without a terminal to ask on, --yes is required.
    """
    url = resolve(name, store)
    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError(
                "purge asks for confirmation but stdin is not a terminal: add --yes"
            )
        with opened(url) as q:  # not held while the question waits for an answer
            figures = q.stats()
        doomed = sum(
            getattr(figures, s) for s in ("pending", "delayed", "processing", "retry", "dead")
        )
        click.confirm(
            f"Remove {doomed:,} message(s), every one not completed, from {shown(url)}?",
            abort=True,
            err=True,
        )
    with opened(url) as q:
        removed = q.purge()
    show_result(url, as_json, f"purged {removed} message(s)", {"purged": removed})


@main.command()
@scratch_store_option
@click.option("--messages", default=1_000_000, show_default=True, help="Messages per phase.")
@click.option("--size", default=1024, show_default=True, help="Payload bytes.")
@click.option("--batch", default=1000, show_default=True, help="Messages per call (1: single).")
@click.option("--producers", default=4, show_default=True, help="Concurrent producer tasks.")
@click.option("--consumers", default=4, show_default=True, help="Concurrent consumer tasks.")
@click.option(
    "--server",
    is_flag=False,
    flag_value="start",
    default=None,
    metavar="[URL]",
    help="Through a broker: alone, start one on the store in a child process; or a broker's URL.",
)
@click.option(
    "--rate",
    type=click.FloatRange(min=0, min_open=True),
    help="Add a paced phase: single enqueues at this many per second, spread over the producers.",
)
@click.option(
    "--queue",
    "queue_name",
    default="bench",
    show_default=True,
    help="Queue NAME in the store (or on the --server broker).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object, nothing else.")
@friendly_errors
def bench(
    store: str | None,
    messages: int,
    size: int,
    batch: int,
    producers: int,
    consumers: int,
    server: str | None,
    rate: float | None,
    queue_name: str,
    as_json: bool,
) -> None:
    """Measure throughput, latency and requests per message: enqueue, dequeue+complete, mixed.

    Embedded by default; --server measures the same through a broker (the native API).
    """
    import asyncio

    from .bench import BenchConfig, print_report, run, summary

    for name, value, low in (
        ("--messages", messages, 1),
        ("--size", size, 0),
        ("--batch", batch, 1),
        ("--producers", producers, 1),
        ("--consumers", consumers, 1),
    ):
        if value < low:
            raise click.BadParameter(f"must be >= {low}", param_hint=name)
    if server is not None and server != "start" and store is not None:
        raise click.BadParameter("give a broker URL or a --store to start one on, not both")
    config = BenchConfig(
        store, messages, size, batch, producers, consumers, server, rate, queue_name
    )
    command = shown_command(sys.argv[1:])  # the command as run, minus secrets
    with progress_bar(Console(stderr=True), show=not as_json) as bar:
        results, storage = asyncio.run(run(config, phase_progress(bar)))
    if as_json:
        emit_json(summary(config, results, storage, command))
    else:
        print_report(console, config, results, storage, command)
