"""Random workloads over a queue and what a user can observe of it, for the checkpoint and
staged-payload tests."""

from __future__ import annotations

import hashlib
import random
from typing import Any

from conftest import FakeClock

import s3q


def payload_for(i: int, size: int = 64) -> bytes:
    """A payload that proves which message it belongs to."""
    seed = hashlib.sha256(str(i).encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def observe(q: Any, ids: list[str]) -> dict[str, Any]:
    """Everything a user can see of a queue, without changing it."""
    statuses = {}
    for mid in ids:
        try:
            statuses[mid] = q.status(mid).value
        except s3q.MessageNotFound:
            statuses[mid] = "gone"
    st = q.stats()
    dead = [(m.id, m.payload, m.attempts, m.last_error) for m in q.dead_letters(limit=10_000)]
    counts = (st.pending, st.delayed, st.processing, st.retry, st.completed, st.dead)
    return {"statuses": statuses, "counts": counts, "total": st.total_enqueued, "dead": dead}


def drain_all(q: Any) -> list[tuple[str, bytes, int]]:
    out = []
    while batch := q.dequeue(max_messages=37):
        out.extend((m.id, m.payload, m.attempts) for m in batch)
        q.complete_batch(batch)
    return out


def random_history(q: Any, clock: FakeClock, rng: random.Random, steps: int) -> dict[str, bytes]:
    """A mixed workload: priorities, delays, groups, dedup, leases, failures, expiries.

    Returns the payload of every message enqueued, by id.
    """
    sent: dict[str, bytes] = {}
    leased: list[Any] = []
    for step in range(steps):
        roll = rng.random()
        if roll < 0.35:
            items = [
                {
                    "payload": payload_for(step * 10 + k),
                    "priority": rng.choice([0, 0, 3, 9]),
                    "delay": rng.choice([0, 0, 0, 5.0]),
                    "group": rng.choice([None, None, "g1", "g2"]),
                    "dedup_id": rng.choice([None, None, None, f"d{rng.randrange(20)}"]),
                }
                for k in range(rng.randint(1, 5))
            ]
            for mid, item in zip(q.enqueue_batch(items), items, strict=True):
                sent.setdefault(mid, item["payload"])
        elif roll < 0.55:
            leased.extend(q.dequeue(max_messages=rng.randint(1, 4)))
        elif roll < 0.7 and leased:
            q.complete(leased.pop(rng.randrange(len(leased))))
        elif roll < 0.8 and leased:
            q.fail(leased.pop(rng.randrange(len(leased))), f"error {step}")
        elif roll < 0.85:
            clock.advance(rng.choice([1.0, 7.0, 40.0]))
            leased = []  # leases may have expired: their receipts are no longer reliable
        elif roll < 0.9:
            q.redrive()
        elif roll < 0.93:
            q.cleanup()
        else:
            clock.advance(0.5)
    return sent
