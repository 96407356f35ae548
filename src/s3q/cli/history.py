"""What ``s3q history`` reads: one message's events, or the events of a recent period, straight
from the queue's log in its store (``s3q.history``; no writer is opened, nothing is written).
"""

from __future__ import annotations

import asyncio
import datetime
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol, TypeVar

import click

from ..history import log_events, timeline
from ..history import replay as replaying
from ..history.lives import Summary, summarize
from ..history.log_events import Event
from ..history.replay import Tally
from ..log import ids
from ..message import QueueStats
from ..store import Store, open_store
from .stores import local_path

T = TypeVar("T")

SCAN = log_events.SCAN  # log objects ``--id`` reads, at most, from the one that enqueued it
BATCH = 1000  # messages a replay enqueues with one call
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def seconds(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``1h``, ``2d`` as seconds; BadParameter otherwise."""
    found = _DURATION.fullmatch(text.strip())
    if not found or float(found[1]) <= 0:
        raise click.BadParameter(
            f"{text!r} is not a duration: a positive number with s, m, h or d (e.g. 1h)",
            param_hint="--since",
        )
    return float(found[1]) * _UNITS[found[2]]


def moment(text: str, now: float, hint: str) -> float:
    """A point in time: a DURATION ago (``1h``: ``seconds``), or an ISO 8601 time (UTC unless
    it names its zone); BadParameter otherwise."""
    if _DURATION.fullmatch(text.strip()):
        return now - seconds(text)
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is neither a duration ago (90s, 15m, 1h, 2d) nor an ISO 8601 time "
            "(2025-06-01T12:00:00Z)",
            param_hint=hint,
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.timestamp()


def message_id(text: str) -> tuple[str, int]:
    """The queue id and the log object an id names; BadParameter for a string no id is."""
    seq = ids.enqueued_by(text)
    if not seq:
        raise click.BadParameter(
            f"{text!r} is not a message id of this s3q (28 hexadecimal digits, as enqueue "
            "prints them; ids of format-1 queues name no log object)",
            param_hint="--id",
        )
    return text[: ids.QUEUE_DIGITS], seq


@asynccontextmanager
async def _store(url: str) -> AsyncIterator[Store]:
    if "://" in url and url.split("://", 1)[0].lower() in ("http", "https"):
        raise click.ClickException(
            "history reads the queue's store directly: give the store's URL (file://, s3://, "
            "gs://, az://), not a broker's"
        )
    path = local_path(url)
    if path is not None and not os.path.isdir(path):
        raise click.ClickException(f"no queue at {url}: check NAME and --store")
    store = open_store(url)
    try:
        yield store
    finally:
        await store.close()


def _run(url: str, read: Callable[[Store], Awaitable[T]]) -> T:
    async def main() -> T:
        async with _store(url) as store:
            return await read(store)

    return asyncio.run(main())


def life(url: str, mid: str, scan: int = SCAN) -> list[Event]:
    """The events of message ``mid``, from the log object that enqueued it, reading at most
    ``scan`` log objects and stopping at the end of its life (``s3q.history.log_events.life``)."""
    message_id(mid)  # BadParameter for a string no id of this s3q is
    return _run(url, lambda store: log_events.life(store, mid, scan))


def recent(url: str, since: float, now: float) -> tuple[Summary, int]:
    """What the log objects written in the last ``since`` seconds add up to, and how many
    were read."""

    async def read(store: Store) -> tuple[Summary, int]:
        seqs = await log_events.seqs(store)
        wanted, _ = await timeline.window(store, seqs, now - since, None)
        if not wanted:
            return summarize([]), 0
        events = [e async for e in log_events.read(store, wanted[0]) if e.at > now - since]
        return summarize(events), len(wanted)

    return _run(url, read)


class Target(Protocol):
    """The queue a replay enqueues into (embedded or through a broker)."""

    def enqueue_batch(self, items: list[Any]) -> Sequence[str]: ...

    def stats(self) -> QueueStats: ...


def replay(url: str, chosen: replaying.Selection, into: Target) -> Tally:
    """Enqueue the messages ``chosen`` of the queue at ``url`` into ``into``, BATCH at a time,
    counting those it enqueued and those it already held (see :func:`made_now`)."""
    fresh = made_now(into.stats())

    async def read(store: Store) -> Tally:
        tally = Tally()
        batch: list[Any] = []

        async def send() -> None:
            answered = await asyncio.to_thread(into.enqueue_batch, batch)
            made = sum(1 for mid in answered if fresh(mid))
            tally.enqueued += made
            tally.deduplicated += len(answered) - made

        async for item in replaying.items(store, chosen, tally):
            batch.append(item)
            if len(batch) >= BATCH:
                await send()
                batch = []
        if batch:
            await send()
        return tally

    return _run(url, read)


def made_now(before: QueueStats) -> Callable[[str], bool]:
    """Whether an id that an enqueue answers, after the queue showed ``before``, is of a
    message that enqueue made, not the first message of a dedup id seen before: such an id
    names a log object later than its log's newest one then (``QueueStats.log_seq``, each
    partition's for a partitioned queue, told apart by the queue id that begins its ids)."""
    newest = {s.queue_id: s.log_seq for s in (before.partitions or [before])}

    def fresh(mid: str) -> bool:
        return ids.enqueued_by(mid) > newest.get(mid[: ids.QUEUE_DIGITS], 0)

    return fresh


def replayed(tally: Tally, source: str, target: str) -> tuple[str, dict[str, int]]:
    """What ``s3q replay`` prints: its line, and the figures of its ``--json``."""
    text = f"replayed {tally.enqueued:,} message(s) of {source} into {target}"
    if tally.deduplicated:
        text += f"; {tally.deduplicated:,} were there already (their dedup ids were seen)"
    if tally.collected:
        text += f"; {tally.collected:,} skipped: their payloads were collected"
    figures = {
        "replayed": tally.enqueued,
        "deduplicated": tally.deduplicated,
        "collected": tally.collected,
    }
    return text, figures
