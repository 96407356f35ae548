"""The ``s3q`` command line."""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import json
import os
import random
import re
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

import click
from rich.console import Console, Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

import s3q

from .broker.limits import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEAD_TIMEOUT,
    DEFAULT_IDLE_CLOSE,
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_CONNECTIONS,
)
from .config import MAX_WINDOW
from .errors import InvalidArgument, S3QError, StoreError
from .prices import S3, Prices
from .store import default_store, queue_url
from .validate import item_of

if TYPE_CHECKING:
    from .client import RemoteQueue

F = TypeVar("F", bound=Callable[..., Any])

console = Console()
if not console.is_terminal:
    console = Console(width=160)  # piped output: do not squeeze tables to 80 columns

BATCH = 1000  # messages per enqueue_batch call of `s3q enqueue`
SHOWN_PAYLOAD = 2000  # characters of a payload shown by the human-readable listings


def friendly_errors(command: F) -> F:
    """Turn s3q, file and JSON errors into a one-line message and exit code 1: no traceback."""

    @wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except S3QError as exc:
            hint = ""
            if isinstance(exc, StoreError):
                hint = " (check --store / S3Q_STORE, the endpoint and the credentials)"
            raise click.ClickException(f"{type(exc).__name__}: {one_line(exc)}{hint}") from None
        except BrokenPipeError:  # `s3q ... | head`: the reader left; say nothing more
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            sys.exit(1)
        except OSError as exc:
            where = f": {exc.filename}" if exc.filename else ""
            raise click.ClickException(f"{exc.strerror or one_line(exc)}{where}") from None
        except (json.JSONDecodeError, UnicodeDecodeError, binascii.Error) as exc:
            raise click.ClickException(f"{type(exc).__name__}: {one_line(exc)}") from None

    return run  # type: ignore[return-value]


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


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
        console.print(stats_table(q.stats(), url, writer=True))
        dead = q.dead_letters(limit=3)
        if dead:
            console.print(
                "dead letters (first 3): "
                + ", ".join(f"{m.payload.decode()!r} ({m.last_error})" for m in dead)
            )


# --------------------------------------------------------------------------- addressing a queue


def store_option(command: F) -> F:
    option = click.option(
        "--store",
        envvar="S3Q_STORE",
        metavar="URL",
        help="Store of the queues: a path, or a file://, s3://, gs://, az:// URL "
        "[env S3Q_STORE; default: ./s3q-data].",
    )
    return option(command)


def json_option(command: F) -> F:
    option = click.option(
        "--json", "as_json", is_flag=True, help="Print one JSON document and nothing else."
    )
    return option(command)


def resolve(name: str, store: str | None) -> str:
    """The URL of queue NAME: ``<store>/<NAME>``, or NAME itself when it is a URL."""
    if "://" in name:
        return name
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts) or any(c in name for c in "?#\\"):
        raise click.BadParameter(
            f"{name!r} is not a queue name (letters, digits, '-', '_', '.', and '/' between "
            "parts); for a queue outside the store give its URL, e.g. file:///path/to/queue",
            param_hint="NAME",
        )
    return queue_url(store or default_store(), name)


def shown(url: str) -> str:
    """A queue URL fit to print: without its query, which may hold credentials."""
    return urlunsplit(urlsplit(url)._replace(query="")) if "://" in url else url


def local_path(url: str) -> str | None:
    """The directory of a queue in a local store; None for object stores."""
    if "://" not in url:
        return url
    parts = urlsplit(url)
    return unquote(parts.path) if parts.scheme.lower() == "file" else None


@contextmanager
def opened(url: str, *, create: bool = False) -> Iterator[s3q.Queue | RemoteQueue]:
    """The queue at ``url``, opened as its writer, or through the broker of an ``http(s)://``
    store (with ``$S3Q_TOKEN``); a missing local queue is an error unless ``create``
    (reading a mistyped name must not create an empty queue)."""
    from .client import TOKEN_ENV, connect, is_broker_url, split_queue_url

    if is_broker_url(url):
        broker, name = split_queue_url(url)
        with connect(broker, token=os.environ.get(TOKEN_ENV)) as client:
            yield client.queue(name)
        return
    path = local_path(url)
    if not create and path is not None and not os.path.isdir(path):
        raise click.ClickException(
            f"no queue at {url}: check NAME and --store (enqueue creates a queue)"
        )
    with s3q.open(url) as q:
        yield q


def emit_json(document: dict[str, Any]) -> None:
    click.echo(json.dumps(document))


# --------------------------------------------------------------------------- showing messages


def payload_text(payload: bytes) -> tuple[str, str]:
    """The payload as text and the encoding that makes it text: UTF-8, else base64."""
    try:
        return payload.decode(), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(payload).decode("ascii"), "base64"


def message_json(msg: s3q.Message) -> dict[str, Any]:
    text, encoding = payload_text(msg.payload)
    return {
        "id": msg.id,
        "payload": text,
        "payload_encoding": encoding,
        "priority": msg.priority,
        "attempts": msg.attempts,
        "enqueued_at": msg.enqueued_at,
        "receipt": msg.receipt,
        "group": msg.group,
        "dedup_id": msg.dedup_id,
        "attributes": msg.attributes,
        "last_error": msg.last_error,
        "first_delivered_at": msg.first_delivered_at,
    }


def shown_payload(payload: bytes) -> Text:
    text, encoding = payload_text(payload)
    shown = Text()
    if encoding == "base64":
        shown.append("base64:", style="dim")
    shown.append(text[:SHOWN_PAYLOAD])
    if len(text) > SHOWN_PAYLOAD:
        shown.append(f"… ({len(payload):,} bytes; --json shows all)", style="dim")
    return shown


def message_table(title: str, messages: list[s3q.Message], *, dead: bool = False) -> Table:
    grouped = any(m.group for m in messages)
    table = Table(title=title)
    table.add_column("id", no_wrap=True)
    table.add_column("priority", justify="right")
    table.add_column("attempts", justify="right")
    if grouped:
        table.add_column("group")
    if dead:
        table.add_column("last error", overflow="fold")
    table.add_column("payload", overflow="fold")
    for m in messages:
        row: list[str | Text] = [Text(m.id), str(m.priority), str(m.attempts)]
        if grouped:
            row.append(Text(m.group or ""))
        if dead:
            row.append(Text(m.last_error or ""))
        row.append(shown_payload(m.payload))
        table.add_row(*row)
    return table


def show_messages(
    url: str,
    messages: list[s3q.Message],
    as_json: bool,
    title: str,
    none: str,
    dead: bool = False,
) -> None:
    """Messages listed without a delivery (peek, dead letters): JSON, a table, or ``none``."""
    if as_json:
        emit_json({"queue": shown(url), "messages": [message_json(m) for m in messages]})
    elif messages:
        console.print(message_table(title, messages, dead=dead))
    else:
        click.echo(none, err=True)


def delivery(msg: s3q.Message) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row("id", Text(msg.id))
    grid.add_row("receipt", Text(msg.receipt or ""))
    grid.add_row("attempts", f"{msg.attempts}  (priority {msg.priority})")
    if msg.group:
        grid.add_row("group", Text(msg.group))
    if msg.attributes:
        grid.add_row("attributes", Text(", ".join(f"{k}={v}" for k, v in msg.attributes.items())))
    grid.add_row("payload", shown_payload(msg.payload))
    return grid


def stats_table(stats: s3q.QueueStats, title: str, *, writer: bool = False) -> Table:
    """Messages by status; with ``writer``, also what this writer did (commits, requests)."""
    table = Table(title=title)
    table.add_column("status")
    table.add_column("messages", justify="right")
    for name in ("pending", "delayed", "processing", "retry", "completed", "dead"):
        table.add_row(name, f"{getattr(stats, name):,}")
    table.add_row("total_enqueued", f"{stats.total_enqueued:,}", style="dim")
    if writer:
        table.add_row("commits", f"{stats.commits:,}", style="dim")
        table.add_row("mean_ops_per_commit", f"{stats.mean_ops_per_commit:,.1f}", style="dim")
        table.add_row("store_requests", f"{stats.store_requests:,}", style="dim")
    return table


# --------------------------------------------------------------------------- enqueue

FILE_KEYS = ("payload", "payload_base64", "priority", "delay", "group", "dedup_id", "attributes")


Item = bytes | dict[str, Any]  # an element of enqueue_batch


class LineError(Exception):
    """What is wrong with one line of an enqueue file."""


def parse_attributes(pairs: tuple[str, ...]) -> dict[str, str] | None:
    attributes: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--attribute")
        attributes[key] = value
    return attributes or None


def file_item(raw: bytes, defaults: dict[str, Any], max_size: int) -> Item:
    """One line of an enqueue file as a checked item of ``enqueue_batch``."""
    try:
        obj = json.loads(raw.rstrip(b"\r\n"))
    except json.JSONDecodeError as exc:
        raise LineError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except UnicodeDecodeError:
        raise LineError("not UTF-8 text") from None
    if not isinstance(obj, dict):
        raise LineError(f"expected a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(FILE_KEYS))
    if unknown:
        raise LineError(f"unknown key(s) {', '.join(unknown)} (known: {', '.join(FILE_KEYS)})")
    if ("payload" in obj) == ("payload_base64" in obj):
        raise LineError('needs "payload" (text) or "payload_base64", exactly one')
    entry = {**defaults, **{k: v for k, v in obj.items() if not k.startswith("payload")}}
    if "payload" in obj:
        if not isinstance(obj["payload"], str):
            raise LineError('"payload" must be a string (binary data: "payload_base64")')
        try:
            entry["payload"] = obj["payload"].encode()
        except UnicodeEncodeError:
            raise LineError('"payload" is not valid Unicode') from None
    else:
        try:
            entry["payload"] = base64.b64decode(obj["payload_base64"], validate=True)
        except (TypeError, ValueError):
            raise LineError('"payload_base64" must be a base64 string') from None
    try:
        item_of(entry, max_size)
    except InvalidArgument as exc:
        raise LineError(one_line(exc)) from None
    return entry["payload"] if len(entry) == 1 else entry  # bare payloads take less memory


def read_file_items(path: str, defaults: dict[str, Any], max_size: int, err: Console) -> list[Item]:
    """Every message of a JSON Lines file, all checked before any is enqueued."""
    label = "stdin" if path == "-" else path
    items: list[Item] = []
    with contextlib.ExitStack() as stack:
        stream = sys.stdin.buffer if path == "-" else stack.enter_context(open(path, "rb"))
        size = None if path == "-" else os.fstat(stream.fileno()).st_size
        bar = stack.enter_context(progress_bar(err, show=(size or 0) > 2**20))
        task = bar.add_task(f"checking {label}", total=size)
        for number, raw in enumerate(stream, 1):
            if size and number % 10_000 == 0:
                bar.update(task, completed=stream.tell())
            if not raw.strip():
                continue  # blank lines are allowed, as in most JSON Lines files
            try:
                items.append(file_item(raw, defaults, max_size))
            except LineError as exc:
                raise click.ClickException(
                    f"{label} line {number}: {exc}; nothing was enqueued"
                ) from None
    return items


def read_stdin_items(defaults: dict[str, Any], max_size: int) -> list[Item]:
    """Each line of standard input (without its line ending) as a message, all checked."""
    if sys.stdin.isatty():
        click.echo("reading messages from stdin, one per line; end with Ctrl-D", err=True)
    lines = sys.stdin.buffer.read().split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the final line ending does not start another message
    items: list[Item] = []
    for number, line in enumerate(lines, 1):
        entry = {"payload": line.removesuffix(b"\r"), **defaults}
        try:
            item_of(entry, max_size)
        except InvalidArgument as exc:
            raise click.ClickException(
                f"stdin line {number}: {one_line(exc)}; nothing was enqueued"
            ) from None
        items.append(entry if defaults else entry["payload"])
    return items


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
    '"attributes": {...}}.',
)
@click.option("--priority", type=click.IntRange(0, 255), help="0-255, higher first [default: 0].")
@click.option(
    "--delay", type=click.FloatRange(min=0), metavar="S", help="Seconds before it is delivered."
)
@click.option("--group", help="Ordered group: its messages are delivered one at a time.")
@click.option("--dedup-id", help="Deduplication id (with PAYLOAD only).")
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
            ("attributes", parse_attributes(attribute_pairs)),
        )
        if value is not None
    }
    max_size = s3q.QueueConfig().max_message_size
    err = Console(stderr=True)
    if payload is not None:
        items: list[Item] = [{"payload": os.fsencode(payload), **defaults}]
        item_of(items[0], max_size)
    elif from_stdin:
        items = read_stdin_items(defaults, max_size)
    else:
        assert path is not None
        items = read_file_items(path, defaults, max_size, err)
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
    if as_json:
        emit_json({"queue": shown(url), "enqueued": len(ids), "ids": ids})
    elif quiet:
        click.echo(len(ids))
    elif ids:
        click.echo("\n".join(ids))


def progress_bar(err: Console, show: bool) -> Progress:
    """A transient bar on stderr, only when ``show`` and stderr is a terminal."""
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not (show and err.is_terminal),
    )


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
        if as_json:
            emit_json(
                {"queue": shown(url), "messages": [message_json(m) for m in messages], "acked": ack}
            )
        elif not messages:
            click.echo("no message is available", err=True)
        for i, msg in enumerate(() if as_json else messages):
            if i:
                console.print()
            console.print(delivery(msg))
        if ack and messages:
            q.complete_batch(messages)
    if not as_json and messages:
        seconds = visibility_timeout or s3q.QueueConfig().visibility_timeout
        click.echo(
            f"completed {len(messages)} message(s)"
            if ack
            else f"leased for {seconds:g} s: delivered again after that (--ack completes them)",
            err=True,
        )


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
    if as_json:
        emit_json({"queue": shown(url), **dataclasses.asdict(figures)})
    else:
        console.print(stats_table(figures, shown(url)))


def watch_stats(url: str, every: float) -> None:
    """Reopen the queue every ``every`` seconds (holding it only for a moment, so that its
    producers and consumers can go on) and show its counts, until Ctrl-C."""
    from rich.live import Live

    last: s3q.QueueStats | None = None

    def frame() -> Group:
        nonlocal last
        note = Text(time.strftime("%H:%M:%S"), style="dim")
        try:
            with opened(url) as q:
                last = q.stats()
        except S3QError as exc:
            if last is None:
                raise
            note.append(f"  {type(exc).__name__}: {one_line(exc)}", style="yellow")
        assert last is not None
        note.append(f"  every {every:g} s; Ctrl-C stops", style="dim")
        return Group(stats_table(last, shown(url)), note)

    try:
        if console.is_terminal:
            with Live(frame(), console=console, auto_refresh=False) as live:
                while True:
                    time.sleep(every)
                    live.update(frame(), refresh=True)
        else:
            while True:  # a log, not a screen: one table per refresh
                console.print(frame())
                sys.stdout.flush()
                time.sleep(every)
    except KeyboardInterrupt:
        return


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--token-file",
    type=click.Path(exists=True, dir_okay=False),
    help="Bearer tokens, one per line (also $S3Q_TOKENS, comma-separated).",
)
@click.option(
    "--advertise",
    metavar="URL",
    help="URL the other brokers of a cluster reach this one at [default: http://HOST:PORT].",
)
@click.option(
    "--peer",
    "peers",
    metavar="URL",
    multiple=True,
    help="A broker of the cluster (repeat it): calls are forwarded only to those listed "
    "[default: none with tokens, else those on this machine].",
)
@click.option(
    "--sqs-credentials",
    type=click.Path(exists=True, dir_okay=False),
    help="SQS access keys, ACCESS_KEY_ID:SECRET per line (also $S3Q_SQS_CREDENTIALS, "
    "comma-separated): SQS requests must be SigV4-signed with one.",
)
@click.option(
    "--max-body",
    type=click.IntRange(min=1024),
    default=DEFAULT_MAX_BODY,
    show_default=True,
    metavar="BYTES",
    help="Largest native API request body; larger ones are refused (413) unread.",
)
@click.option(
    "--max-batch",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_BATCH,
    show_default=True,
    metavar="N",
    help="Most entries of a native API call's list (batch items, receipts, ids).",
)
@click.option(
    "--max-connections",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_CONNECTIONS,
    show_default=True,
    metavar="N",
    help="Connections and requests in progress beyond which requests are answered 503.",
)
@click.option(
    "--head-timeout",
    type=click.FloatRange(min=0.1),
    default=DEFAULT_HEAD_TIMEOUT,
    show_default=True,
    metavar="SECONDS",
    help="A request's head must arrive within this, or the connection is closed.",
)
@click.option(
    "--body-timeout",
    type=click.FloatRange(min=0.1),
    default=DEFAULT_BODY_TIMEOUT,
    show_default=True,
    metavar="SECONDS",
    help="A request's body must arrive within this, or it is refused (408).",
)
@click.option(
    "--idle-close",
    type=click.FloatRange(min=0),
    default=DEFAULT_IDLE_CLOSE,
    show_default=True,
    metavar="SECONDS",
    help="Close a queue no call used for this long (its lease renewals stop); 0: never.",
)
@click.option(
    "--commit-window",
    type=click.FloatRange(min=0, max=MAX_WINDOW),
    metavar="SECONDS",
    help="How long an idle queue may gather calls into one store write: fewer requests for "
    "that much latency at most [default: 0.02 on object stores, 0 on a directory].",
)
@click.option(
    "--put-price",
    type=click.FloatRange(min=0),
    default=S3.put,
    show_default=True,
    metavar="DOLLARS",
    help="What the store charges per 1,000 PUTs and LISTs (S3's list price by default), "
    "for the spend shown on the dashboard and at /metrics.",
)
@click.option(
    "--get-price",
    type=click.FloatRange(min=0),
    default=S3.get,
    show_default=True,
    metavar="DOLLARS",
    help="What the store charges per 1,000 GETs.",
)
@store_option
@friendly_errors
def serve(
    host: str,
    port: int,
    token_file: str | None,
    advertise: str | None,
    peers: tuple[str, ...],
    sqs_credentials: str | None,
    max_body: int,
    max_batch: int,
    max_connections: int,
    head_timeout: float,
    body_timeout: float,
    idle_close: float,
    commit_window: float | None,
    put_price: float,
    get_price: float,
    store: str | None,
) -> None:
    """Serve every queue of the store over HTTP (native API; /openapi.json), with a web
    dashboard at / (prints its URL once listening) and an SQS-compatible API on POST /.

    Run it on several hosts over one store for a cluster: each queue is led by one broker,
    the others forward to it (if it is a --peer) and take over when it dies.
    Needs the broker extra: pip install 's3q[broker]'.
    """
    from .broker import serve as run

    where = store or default_store()

    def ready(url: str) -> None:
        click.echo(f"s3q broker serving {shown(where)}\ndashboard: {url}")
        sys.stdout.flush()

    run(
        where,
        host=host,
        port=port,
        token_file=token_file,
        advertise=advertise,
        peers=list(peers) or None,
        sqs_credentials=sqs_credentials,
        on_ready=ready,
        max_body=max_body,
        max_batch=max_batch,
        max_connections=max_connections,
        head_timeout=head_timeout,
        body_timeout=body_timeout,
        idle_close=idle_close,
        options=None if commit_window is None else {"commit_window": commit_window},
        prices=Prices(put=put_price, get=get_price),
    )


@main.command()
@click.argument("target", metavar="MODULE:FUNCTION")
@click.option("--queue", "name", help="Queue NAME (or URL) [default: the one @handler names].")
@click.option("--concurrency", type=click.IntRange(min=1), help="Handlers at once [default 8].")
@click.option("--prefetch", type=click.IntRange(min=1), help="Most messages buffered.")
@click.option(
    "--visibility-timeout", type=click.FloatRange(min=0, min_open=True), help="Lease, seconds."
)
@click.option("--grace", type=click.FloatRange(min=0), help="Seconds to finish on SIGTERM.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), help="Serve /metrics here.")
@store_option
@friendly_errors
def worker(
    target: str,
    name: str | None,
    concurrency: int | None,
    prefetch: int | None,
    visibility_timeout: float | None,
    grace: float | None,
    metrics_port: int | None,
    store: str | None,
) -> None:
    """Run MODULE:FUNCTION as a worker until SIGTERM or Ctrl-C.

    The function gets each message; returning completes it, raising fails it (retried with
    backoff, then dead-lettered). Example: s3q worker app.tasks:send_email --queue emails
    """
    import logging

    from .worker import run_worker

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    run_worker(
        target,
        queue_url=resolve(name, store) if name is not None else None,
        store=store,
        concurrency=concurrency,
        prefetch=prefetch,
        visibility_timeout=visibility_timeout,
        grace=grace,
        metrics_port=metrics_port,
    )


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
    if as_json:
        emit_json({"queue": shown(url), "id": id, "status": where.value})
    else:
        click.echo(where.value)


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
    if as_json:
        emit_json({"queue": shown(url), "redriven": moved})
    else:
        click.echo(f"redrove {moved} message(s)")


# --------------------------------------------------------------------------- writing


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
    if as_json:
        emit_json({"queue": shown(url), "purged": removed})
    else:
        click.echo(f"purged {removed} message(s)")


@main.command()
@click.option("--store", default=None, help="Queue URL [default: a temporary file:// directory].")
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
@click.option("--queue", "queue_name", default="bench", show_default=True, help="With --server.")
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
    if server is not None and server != "start" and store is not None:
        raise click.BadParameter("give a broker URL or a --store to start one on, not both")
    config = BenchConfig(
        store, messages, size, batch, producers, consumers, server, rate, queue_name
    )
    command = re.sub(  # the command as run, minus secrets a store URL may carry
        r"(secret_access_key|session_token)=[^&\s]*", r"\1=***", "s3q " + shlex.join(sys.argv[1:])
    )
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
            "storage": None if storage is None else vars(storage),
        }
        click.echo(json.dumps(summary))
        return
    where = "" if server is None else " through a broker"
    table = Table(
        title=f"s3q bench{where}: {messages:,} x {size} B, batch {batch}, "
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
        "$/M msgs (S3)",
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
            f"{r.dollars_per_million:,.3f}",
            f"{r.bytes_written_per_msg:,.0f}",
            f"{r.commits:,}",
            f"{r.peak_rss_mib:,.0f}",
        )
    console.print(table)
    if storage is not None:
        _print_storage(messages, storage)
    console.print(f"command: {command}")


def _print_storage(messages: int, storage: Any) -> None:
    console.print(
        f"reopen with {messages:,} pending: {storage.reopen_seconds:.2f} s "
        f"(peak RSS {storage.reopen_rss_mib:,.0f} MiB); after all completed and one GC pass: "
        f"{storage.objects_after_one_gc} objects, {storage.bytes_after_one_gc / 2**20:.2f} MiB; "
        f"after two: {storage.objects_after_two_gc} objects, "
        f"{storage.bytes_after_two_gc / 2**20:.2f} MiB"
    )


if __name__ == "__main__":  # pragma: no cover
    main()
