"""The ``s3q`` commands: each parses its arguments, calls the queue (or the broker, the worker,
the benchmark) and hands what it got to a renderer (:mod:`.render`).

Queue names become URLs in :mod:`.stores`, enqueue's input is read by :mod:`.inputs`, and
errors become one line in :mod:`.errors`.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console

import s3q

from ..broker.limits import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEAD_TIMEOUT,
    DEFAULT_IDLE_CLOSE,
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_CONNECTIONS,
)
from ..config import MAX_WINDOW, check_settings
from ..errors import S3QError
from ..history import replay as replaying
from ..prices import S3, named_prices
from ..store import queue_url
from . import history, inputs
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
    show_life,
    show_messages,
    show_result,
    show_stats,
    show_summary,
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
@inputs.lease_ttl_option
@click.option(
    "--put-price",
    type=click.FloatRange(min=0),
    metavar="DOLLARS",
    help="What the store charges per 1,000 PUTs and LISTs, for the spend shown on the "
    f"dashboard and at /metrics [default: S3's list price, {S3.put}, on an object store; "
    "0 on a directory].",
)
@click.option(
    "--get-price",
    type=click.FloatRange(min=0),
    metavar="DOLLARS",
    help=f"What the store charges per 1,000 GETs [default: {S3.get} on an object store; "
    "0 on a directory].",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="What the broker logs: info, its life and a summary of the requests answered each "
    "minute; warning and above only what goes wrong.",
)
@click.option(
    "--access-log",
    is_flag=True,
    help="Also log a line per request (at info; about 135 µs of broker CPU each).",
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
    lease_ttl: float | None,
    put_price: float | None,
    get_price: float | None,
    log_level: str,
    access_log: bool,
    store: str | None,
) -> None:
    """Serve every queue of the store over HTTP (native API; /openapi.json), with a web
    dashboard at / (prints its URL once listening) and an SQS-compatible API on POST /.

    Run it on several hosts over one store for a cluster: each queue is led by one broker,
    the others forward to it (if it is a --peer) and take over when it dies.
    Needs the broker extra: pip install 's3q[broker]'.
    """
    from ..broker import serve as run

    where = store_root(store)

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
        options=inputs.writer_options(commit_window=commit_window, lease_ttl=lease_ttl),
        prices=named_prices(put_price, get_price),
        log_level=log_level,
        access_log=access_log,
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

    from ..worker import run_worker

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
    show_result(url, as_json, where.value, {"id": id, "status": where.value})


@main.command("history")
@click.argument("name")
@click.option("--id", "mid", metavar="ID", help="Show the life of message ID.")
@click.option(
    "--since",
    metavar="DURATION",
    help="Sum up the history of the last DURATION (90s, 15m, 1h, 2d): events by kind, "
    "dwell and processing p50/p99, top errors.",
)
@click.option(
    "--scan",
    type=click.IntRange(min=1),
    default=history.SCAN,
    show_default=True,
    help="With --id: log objects read at most, from the one that enqueued the message.",
)
@json_option
@store_option
@friendly_errors
def history_command(
    name: str, mid: str | None, since: str | None, scan: int, as_json: bool, store: str | None
) -> None:
    """Show what happened to a message, or sum up a recent period, from the queue's log.

    Reads the store directly, with no writer: the log holds every operation until garbage
    collection deletes it, so set the queue's history_retention to keep a period readable.
    """
    if (mid is None) == (since is None):
        raise click.UsageError("give one of --id ID and --since DURATION")
    url = resolve(name, store)
    if mid is not None:
        events = history.life(url, mid, scan)
        if not events:
            raise click.ClickException(
                f"no history of message {mid} in {shown(url)}: not a message of this queue, "
                "or its log was collected (history_retention keeps it)"
            )
        show_life(url, mid, events, as_json)
        return
    period = history.seconds(since or "")
    summary, objects = history.recent(url, period, time.time())
    show_summary(url, period, summary, objects, as_json)


@main.command("replay")
@click.argument("name")
@click.option("--into", "target", required=True, metavar="QUEUE", help="Queue to enqueue into.")
@click.option(
    "--since",
    required=True,
    metavar="WHEN",
    help="Messages enqueued from WHEN: a duration ago (1h, 2d) or an ISO 8601 time.",
)
@click.option("--until", metavar="WHEN", help="... up to WHEN [default: now].")
@click.option("--tenant", "tenants", multiple=True, help="Only this tenant's (repeatable).")
@click.option(
    "--priority",
    "priorities",
    multiple=True,
    type=click.IntRange(0, 255),
    help="Only this priority (repeatable).",
)
@click.option("--id", "mids", multiple=True, metavar="ID", help="Only this message (repeatable).")
@json_option
@store_option
@friendly_errors
def replay_command(
    name: str,
    target: str,
    since: str,
    until: str | None,
    tenants: tuple[str, ...],
    priorities: tuple[int, ...],
    mids: tuple[str, ...],
    as_json: bool,
    store: str | None,
) -> None:
    """Enqueue again, into QUEUE, the messages NAME's history shows enqueued in a period.

    Each copy keeps its payload, priority, group, tenant and attributes, and gets the dedup
    id replay:<original id>: running the same replay again within the target's dedup_window
    enqueues nothing twice, and says how many were there already. Reads NAME's store
    directly (keep its history with history_retention); enqueues through QUEUE's writer or
    broker.
    """
    now = time.time()
    chosen = replaying.Selection(
        history.moment(since, now, "--since"),
        None if until is None else history.moment(until, now, "--until"),
        frozenset(tenants) or None,
        frozenset(priorities) or None,
        frozenset(mids) or None,
    )
    url, into = resolve(name, store), resolve(target, store)
    with opened(into, create=True) as q:
        tally = history.replay(url, chosen, q)
    show_result(into, as_json, *history.replayed(tally, shown(url), shown(into)))


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
