"""Deliveries that end every way a delivery can (released, extended, failed, run out, redriven
once dead, dead), over messages whose lives cross many log objects, with what the queue itself
said of each: the ``attempt`` a history read must give every delivery, failure and death."""

from __future__ import annotations

from typing import Any

from conftest import FakeClock

import s3q

#: what a round does with each message it leased (``expire`` and ``redrive`` let the lease run
#: out; ``redrive`` also redrives the message in a later round if it is dead by then)
ACTIONS = ("release", "extend", "fail", "expire", "redrive", "complete")
TIMEOUT = 30.0
#: the queue's: its whole log kept (``history_retention``), so what a read finds is all of it
SETTINGS = {
    "max_attempts": 3,
    "retry_delay": 1.0,
    "retry_delay_max": 1.0,
    "history_retention": 1e6,
}

Expected = dict[str, list[tuple[str, int]]]


def deliveries(q: Any, clock: FakeClock, plan: list[list[str]], messages: int) -> Expected:
    """Enqueue ``messages`` in one batch (a run: first deliveries come as stretches), then for
    each round of ``plan``: redrive the dead messages whose action is ``redrive``, lease every
    message deliverable, and settle each by its action (``plan[round][i % len]`` for message
    ``i``), each call its own commit, then let every lease and retry delay run out. By id: the
    ``(kind, attempt)`` of each delivery, failure and death, as ``Message.attempts`` said."""
    sent = q.enqueue_batch([b"m%d" % i for i in range(messages)])
    index = {mid: i for i, mid in enumerate(sent)}
    expected: Expected = {mid: [] for mid in sent}
    running_out: dict[str, int] = {}  # leases left to run out: id -> their attempt
    for actions in plan:

        def action(mid: str, actions: list[str] = actions) -> str:
            return actions[index[mid] % len(actions)]

        for mid, attempt in running_out.items():  # (status buries a lease run out on its last)
            if q.status(mid) is s3q.MessageStatus.DEAD:
                expected[mid].append(("dead", attempt))
        for mid in sent:
            if action(mid) == "redrive" and q.status(mid) is s3q.MessageStatus.DEAD:
                q.redrive([mid])
        running_out = {}
        for m in q.dequeue(max_messages=messages, visibility_timeout=TIMEOUT):
            expected[m.id].append(("retried" if m.attempts > 1 else "leased", m.attempts))
            done = action(m.id)
            if done == "release":
                q.release(m)
            elif done == "fail":
                dead = q.fail(m, "no") is None
                expected[m.id].append(("dead" if dead else "failed", m.attempts))
            elif done == "complete":
                q.complete(m)
            else:
                if done == "extend":
                    q.extend(m, TIMEOUT)
                running_out[m.id] = m.attempts
        clock.advance(3 * TIMEOUT)  # past every lease, extended or not, and every retry delay
    for mid, attempt in running_out.items():
        if q.status(mid) is s3q.MessageStatus.DEAD:
            expected[mid].append(("dead", attempt))
    return expected


ATTEMPTED = ("leased", "retried", "failed", "dead")


def attempts_read(rows: list[dict[str, Any]]) -> Expected:
    """By id: the ``(kind, attempt)`` of each delivery, failure and death among history rows
    (dicts with ``seq``, ``op``, ``kind``, ``id``, ``attempt``), in log order."""
    found: Expected = {}
    for row in sorted(rows, key=lambda r: (r["seq"], r["op"])):
        if row["kind"] in ATTEMPTED:
            found.setdefault(row["id"], []).append((row["kind"], row["attempt"]))
    return found
