"""Replay: the messages a queue's history shows enqueued in a time window (optionally only
some tenants, priorities or ids), as items to enqueue again, each with a dedup id derived from
its original id, so a replay run again within the target's ``dedup_window`` enqueues nothing
twice. Read straight from the store (``s3q.history``, ``s3q.history.timeline``); nothing is written
here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ..log import segment
from ..store import Store
from . import log_events, timeline
from .log_events import Event

PREFIX = "replay:"


def dedup_id(original: str) -> str:
    """The dedup id a replay gives the copy of message ``original``."""
    return PREFIX + original


@dataclass(frozen=True)
class Selection:
    """Which enqueued messages to replay: enqueued at ``since`` to ``until`` (seconds; None:
    unbounded), and, when given, only these tenants, priorities or ids."""

    since: float | None = None
    until: float | None = None
    tenants: frozenset[str] | None = None
    priorities: frozenset[int] | None = None
    ids: frozenset[str] | None = None

    def admits(self, e: Event) -> bool:
        return (
            e.kind == "enqueued"
            and e.id is not None
            and (self.since is None or e.at >= self.since)
            and (self.until is None or e.at <= self.until)
            and (self.tenants is None or e.tenant in self.tenants)
            and (self.priorities is None or e.priority in self.priorities)
            and (self.ids is None or e.id in self.ids)
        )


def item(e: Event, payload: bytes) -> dict[str, Any]:
    """What ``enqueue_batch`` takes to enqueue ``e``'s message again (no delay)."""
    found: dict[str, Any] = {"payload": payload, "dedup_id": dedup_id(e.id or "")}
    for name in ("priority", "group", "tenant", "attributes"):
        if getattr(e, name) is not None:
            found[name] = getattr(e, name)
    return found


@dataclass
class Tally:
    """Messages found to replay, those whose payload was collected (skipped), and of the
    others, those the target enqueued and those it already held (their dedup id was seen:
    an earlier replay's copies)."""

    found: int = 0
    collected: int = 0
    enqueued: int = 0
    deduplicated: int = 0


async def items(store: Store, chosen: Selection, tally: Tally) -> AsyncIterator[dict[str, Any]]:
    """The messages ``chosen`` of the queue in ``store``, in log order, as ``item``s."""
    queue = await log_events.queue_id(store)
    wanted, _ = await timeline.window(
        store, await log_events.seqs(store), chosen.since, chosen.until
    )
    reader = log_events.Reader(queue)
    async for seq, data in log_events.objects(store, wanted, whole=True):
        header = segment.decode(data, segment.key(seq))
        events = [e for e in reader.events(header) if chosen.admits(e)]
        if not events:
            continue
        payloads = await log_events.payloads(
            store, header, queue, data, {e.id or "" for e in events}
        )
        for e in events:
            tally.found += 1
            payload = payloads.get(e.id or "")
            if payload is None:
                tally.collected += 1
            else:
                yield item(e, payload)
