"""What a stretch of queue history adds up to (``s3q history --since``): events by kind, how long
messages waited and were processed, the commonest errors. Pure: it takes events
(``s3q.history``) and reads nothing.

*Dwell* is a message's enqueue to its first lease; *processing* its last lease to its
completion. Each is measured for the messages whose both ends lie in the events given.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from .log_events import Event

LEASES = frozenset({"leased", "retried"})
#: where a message stands after an event of each kind (``purged`` names no message)
STATUS_AFTER = {
    "enqueued": "pending",
    "released": "pending",
    "redriven": "pending",
    "leased": "processing",
    "retried": "processing",
    "extended": "processing",
    "failed": "retry",
    "dead": "dead",
    "completed": "completed",
    "discarded": "discarded",
    "retired": "retired",
}


def percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0 < q <= 1) of sorted, non-empty ``ordered``."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass
class Summary:
    """Events by kind, dwell and processing times (seconds, sorted), errors by count."""

    kinds: Counter[str] = field(default_factory=Counter)
    dwell: list[float] = field(default_factory=list)
    processing: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    first_at: float | None = None
    last_at: float | None = None

    def quantiles(self, name: str) -> dict[str, float | None]:
        """``{p50, p99}`` of ``dwell`` or ``processing`` (None when nothing was measured)."""
        values: list[float] = getattr(self, name)
        return {
            q: percentile(values, f) if values else None for q, f in (("p50", 0.5), ("p99", 0.99))
        }


def summarize(events: Iterable[Event]) -> Summary:
    """Add ``events`` (in log order) up."""
    out = Summary()
    enqueued: dict[str, float] = {}
    leased: dict[str, float] = {}
    for e in events:
        out.kinds[e.kind] += 1
        out.first_at = e.at if out.first_at is None else min(out.first_at, e.at)
        out.last_at = e.at if out.last_at is None else max(out.last_at, e.at)
        if e.id is None:
            continue
        if e.kind == "enqueued":
            enqueued[e.id] = e.at
        elif e.kind in LEASES:
            if e.id in enqueued:
                out.dwell.append(e.at - enqueued.pop(e.id))
            leased[e.id] = e.at
        elif e.kind == "completed" and e.id in leased:
            out.processing.append(e.at - leased.pop(e.id))
        if e.error is not None:
            out.errors[e.error] += 1
    out.dwell.sort()
    out.processing.sort()
    return out
