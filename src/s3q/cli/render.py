"""What the command line prints: rich tables and grids for people, one JSON document with
``--json``, the ``stats --watch`` loop and the progress bars on stderr."""

from __future__ import annotations

import base64
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import click
import msgspec
from rich.console import Console, Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

import s3q

from ..errors import S3QError
from ..history import log_events
from ..history.lives import Summary
from .errors import one_line
from .stores import opened, shown

console = Console()
if not console.is_terminal:
    console = Console(width=160)  # piped output: do not squeeze tables to 80 columns

TOP_ERRORS = 5  # error texts ``history --since`` shows
SHOWN_PAYLOAD = 2000  # characters of a payload shown by the human-readable listings


def emit_json(document: dict[str, Any]) -> None:
    """Print ``document`` as the command's one JSON document."""
    click.echo(json.dumps(document))


def show_result(url: str, as_json: bool, text: str, fields: dict[str, Any]) -> None:
    """A command's one result: ``{"queue": URL, **fields}`` with ``--json``, else ``text``."""
    if as_json:
        emit_json({"queue": shown(url), **fields})
    else:
        click.echo(text)


# --------------------------------------------------------------------------- messages


def payload_text(payload: bytes) -> tuple[str, str]:
    """The payload as text and the encoding that makes it text: UTF-8, else base64."""
    try:
        return payload.decode(), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(payload).decode("ascii"), "base64"


def message_json(msg: s3q.Message) -> dict[str, Any]:
    """A message as ``--json`` shows it, its payload as text (``payload_encoding``)."""
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
        "tenant": msg.tenant,
    }


def shown_payload(payload: bytes) -> Text:
    """A payload for a table: text or ``base64:…``, cut at ``SHOWN_PAYLOAD`` characters."""
    text, encoding = payload_text(payload)
    shown = Text()
    if encoding == "base64":
        shown.append("base64:", style="dim")
    shown.append(text[:SHOWN_PAYLOAD])
    if len(text) > SHOWN_PAYLOAD:
        shown.append(f"… ({len(payload):,} bytes; --json shows all)", style="dim")
    return shown


def message_table(title: str, messages: list[s3q.Message], *, dead: bool = False) -> Table:
    """Messages one per row; a group column if any has one, the last error if ``dead``."""
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
    """One leased message as a grid of its fields, receipt included."""
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


def show_deliveries(url: str, messages: list[s3q.Message], as_json: bool, acked: bool) -> None:
    """Messages just leased (dequeue): JSON, one grid each, or a note on stderr that none was."""
    if as_json:
        emit_json(
            {"queue": shown(url), "messages": [message_json(m) for m in messages], "acked": acked}
        )
        return
    if not messages:
        click.echo("no message is available", err=True)
    for i, msg in enumerate(messages):
        if i:
            console.print()
        console.print(delivery(msg))


def show_lease_note(count: int, acked: bool, seconds: float) -> None:
    """What became of the messages dequeue printed, on stderr: completed, or for how long
    they stay leased."""
    click.echo(
        f"completed {count} message(s)"
        if acked
        else f"leased for {seconds:g} s: delivered again after that (--ack completes them)",
        err=True,
    )


def show_enqueued(url: str, ids: list[str], as_json: bool, quiet: bool) -> None:
    """The ids enqueue gave: JSON, how many (``quiet``), or one per line."""
    if as_json:
        emit_json({"queue": shown(url), "enqueued": len(ids), "ids": ids})
    elif quiet:
        click.echo(len(ids))
    elif ids:
        click.echo("\n".join(ids))


# --------------------------------------------------------------------------- stats


def stats_table(stats: s3q.QueueStats, title: str, *, writer: bool = False) -> Table:
    """Messages by status; with ``writer``, also what this writer did (commits, requests)."""
    table = Table(title=title)
    table.add_column("status")
    table.add_column("messages", justify="right")
    for name in ("pending", "delayed", "processing", "retry", "completed", "dead"):
        table.add_row(name, f"{getattr(stats, name):,}")
    table.add_row("total_enqueued", f"{stats.total_enqueued:,}", style="dim")
    if stats.noisy_tenants:  # their messages wait behind the other tenants'
        table.add_row("noisy_tenants", f"{stats.noisy_tenants:,}", style="yellow")
    if stats.retired:  # removed past the queue's retention, since its writer opened it
        table.add_row("retired", f"{stats.retired:,}", style="dim")
    if stats.history_objects:  # kept by garbage collection for history_retention alone
        table.add_row("history_objects", f"{stats.history_objects:,}", style="dim")
    if writer:
        table.add_row("commits", f"{stats.commits:,}", style="dim")
        table.add_row("mean_ops_per_commit", f"{stats.mean_ops_per_commit:,.1f}", style="dim")
        table.add_row("store_requests", f"{stats.store_requests:,}", style="dim")
    return table


def show_stats(url: str, figures: s3q.QueueStats, as_json: bool) -> None:
    """A queue's counts: JSON with every figure, or the table by status."""
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


# --------------------------------------------------------------------------- progress


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


def phase_progress(bar: Progress) -> Callable[[str, int, int], None]:
    """A ``progress(phase, done, total)`` callback that keeps one line of ``bar`` per phase."""
    tasks: dict[str, TaskID] = {}

    def progress(phase: str, done: int, total: int) -> None:
        if phase not in tasks:
            tasks[phase] = bar.add_task(phase, total=total)
        bar.update(tasks[phase], completed=done)

    return progress


# --------------------------------------------------------------------------- history


def _when(at: float | None) -> str:
    if at is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 1000):03d}Z"


def show_life(url: str, mid: str, events: list[log_events.Event], as_json: bool) -> None:
    """One message's events: a table from its enqueue on, or ``{queue, id, events}``."""
    if as_json:
        emit_json({"queue": shown(url), "id": mid, "events": msgspec.to_builtins(events)})
        return
    table = Table(title=f"history of {mid} in {shown(url)}")
    for column in ("log", "time (UTC)", "event", "attempt", "visible at", "details"):
        table.add_column(column)
    for e in events:
        details = [
            f"{name}={value}"
            for name in ("priority", "tenant", "group", "dedup_id", "size", "error")
            if (value := getattr(e, name)) is not None
        ]
        table.add_row(
            f"{e.seq}:{e.op}",
            _when(e.at),
            e.kind,
            "" if e.attempt is None else str(e.attempt),
            _when(e.visible_at),
            Text(" ".join(details)),
        )
    console.print(table)


def show_summary(url: str, since: float, summary: Summary, objects: int, as_json: bool) -> None:
    """What the last ``since`` seconds of history add up to."""
    document = {
        "queue": shown(url),
        "since": since,
        "objects": objects,
        "first_at": summary.first_at,
        "last_at": summary.last_at,
        "events": dict(summary.kinds.most_common()),
        "dwell": summary.quantiles("dwell"),
        "processing": summary.quantiles("processing"),
        "errors": summary.errors.most_common(TOP_ERRORS),
    }
    if as_json:
        emit_json(document)
        return
    title = f"history of {shown(url)}: {objects:,} log objects, {_when(summary.first_at)} on"
    kinds = Table(title=title)
    kinds.add_column("event")
    kinds.add_column("count", justify="right")
    for kind, count in summary.kinds.most_common():
        kinds.add_row(kind, f"{count:,}")
    times = Table()
    for column in ("seconds", "measured", "p50", "p99"):
        times.add_column(column, justify="right")
    for name in ("dwell", "processing"):
        q = summary.quantiles(name)
        cells = ["-" if v is None else f"{v:.3f}" for v in (q["p50"], q["p99"])]
        times.add_row(name, f"{len(getattr(summary, name)):,}", *cells)
    parts: list[Table] = [kinds, times]
    if summary.errors:
        errors = Table()
        errors.add_column("top errors")
        errors.add_column("count", justify="right")
        for text, count in summary.errors.most_common(TOP_ERRORS):
            errors.add_row(Text(text), f"{count:,}")
        parts.append(errors)
    console.print(Group(*parts))
