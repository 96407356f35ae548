"""``s3q history`` and ``s3q replay``: a queue's history read straight from its store
(:mod:`.history` reads it), and a period of it enqueued again."""

from __future__ import annotations

import time

import click

from ..history import replay as replaying
from . import history
from .commands import json_option, main
from .errors import friendly_errors
from .render import (
    show_life,
    show_result,
    show_summary,
)
from .stores import (
    opened,
    resolve,
    shown,
    store_option,
)


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
