"""The history checker's teeth: it passes a good history and each check fails on a history
corrupted in its way."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from s3q.faults import Call, History, check
from s3q.faults.history import Final


def good_history() -> History:
    """Two messages enqueued, delivered, one completed, one left in the queue."""
    h = History(visibility_timeout=10.0)
    a, b = "0000000003e8aaaa0001", "0000000004b0aaaa0002"  # made at 1.0 s and 1.2 s
    h.opens = [("w1", 0.5)]
    h.calls = [
        Call("p", "enqueue", 1.0, 1.1, "ok", wall=1.0, writer="w1", dedup="d1", ids=[a]),
        Call("p", "enqueue", 1.2, 1.3, "ok", wall=1.2, writer="w1", dedup="d2", ids=[b]),
        Call("c", "dequeue", 2.0, 2.1, "ok", writer="w1", ids=[a], receipts=["ra"]),
        Call("c", "complete", 2.2, 2.3, "ok", writer="w1", ids=[a], receipts=["ra"]),
    ]
    h.calls[2].dedups = ["d1"]
    h.final = Final(remaining=[b], total_enqueued=2, completed=1)
    return h


def test_the_checker_passes_a_good_history() -> None:
    assert check(good_history()) == []


CORRUPTIONS: dict[str, Callable[[History], None]] = {
    "lost": lambda h: h.final.remaining.clear(),  # type: ignore[union-attr]
    "resurrected": lambda h: h.final.remaining.append(h.calls[0].ids[0]),  # type: ignore[union-attr]
    "double-lease": lambda h: h.calls.append(
        Call("c2", "dequeue", 3.0, 3.1, "ok", writer="w1", ids=[h.calls[1].ids[0]], receipts=["ra"])
    ),
    "dedup": lambda h: h.calls.append(
        Call(
            "p",
            "enqueue",
            4.0,
            4.1,
            "ok",
            wall=4.0,
            writer="w1",
            dedup="d1",
            ids=["0000000003e9bbbb0003"],
        )
    ),
    # the attempt that made d2's message was answered "nothing changed"; a retry found it
    "known-failure-applied": lambda h: (
        h.calls.insert(
            1, Call("p", "enqueue", 1.15, 1.19, "fail", wall=1.15, dedup="d2", error="Fenced")
        ),
        setattr(h.calls[2], "wall", 1.25),
    ),
    "fenced-ack": lambda h: (
        h.opens.append(("w2", 2.15)),
        h.calls.append(
            Call("c", "complete", 2.2, 2.3, "ok", writer="w1", ids=["y"], receipts=["ry"])
        ),
    ),
    "stats": lambda h: setattr(h.final, "completed", 0),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_each_check_fails_on_a_corrupted_history(name: str) -> None:
    h = copy.deepcopy(good_history())
    CORRUPTIONS[name](h)
    found = {v.check for v in check(h)}
    assert name in found, check(h)


def test_a_lease_that_surely_ran_is_a_double_lease_but_one_completed_is_not() -> None:
    h = good_history()
    a = h.calls[0].ids[0]
    # delivered again after the first consumer completed it: resurrected, not double-leased
    h.calls.append(Call("c2", "dequeue", 2.5, 2.6, "ok", writer="w1", ids=[a], receipts=["rb"]))
    assert {v.check for v in check(h)} == {"resurrected"}
    h = good_history()
    h.calls[3].outcome = "fail"  # the completion failed: the first lease still ran at 2.5
    h.calls.append(Call("c2", "dequeue", 2.5, 2.6, "ok", writer="w1", ids=[a], receipts=["rb"]))
    assert "double-lease" in {v.check for v in check(h)}


def test_a_lease_runs_by_the_writers_clock() -> None:
    """b is delivered at 2.0 (visibility 10 s) and again at 5.0: a double lease, unless the
    writer's clock jumped forward past the first lease's end meanwhile."""
    h = good_history()
    b = h.calls[1].ids[0]
    h.calls.append(Call("c", "dequeue", 2.0, 2.1, "ok", writer="w1", ids=[b], receipts=["rb"]))
    h.calls.append(Call("c2", "dequeue", 5.0, 5.1, "ok", writer="w1", ids=[b], receipts=["rc"]))
    assert {v.check for v in check(h)} == {"double-lease"}
    h.clock_jumps = [(4.0, 9.0)]  # at 4.0 the writer's clock reads 13.0: past 2.0 + 10
    assert check(h) == []
    h.clock_jumps = [(4.0, -9.0)]  # a jump back only makes the lease longer
    assert {v.check for v in check(h)} == {"double-lease"}
    h.clock_jumps = [(1.0, 5.0), (4.0, 0.0)]  # the lease began at writer time 7.0
    assert {v.check for v in check(h)} == {"double-lease"}
