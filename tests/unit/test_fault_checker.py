"""The history checker's teeth: it passes a good history and each check fails on a history
corrupted in its way."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from s3q.faults import Call, History, check
from s3q.faults.checker import Final, first_answers


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


def _final(h: History) -> Final:
    assert h.final is not None
    return h.final


UNKNOWN = "0000000005dcbbbb0009"  # an id no call was answered with (made at 1.5 s)


def delivered(h: History, which: int | str, receipt: str, **kw: Any) -> None:
    """Add a delivery at 3.0 s, to another consumer, of the message the ``which``-th call
    made (or of the id ``which``) with ``receipt``."""
    mid = h.calls[which].ids[0] if isinstance(which, int) else which
    h.calls.append(
        Call("c2", "dequeue", 3.0, 3.1, "ok", writer="w1", ids=[mid], receipts=[receipt], **kw)
    )


#: Each corruption, by what it corrupts, with the check it must trip and a word of that
#: violation's detail: the one violation the corrupted history has.
CORRUPTIONS: dict[str, tuple[str, str, Callable[[History], object]]] = {
    # b vanished; a message no call made stands in its place, so the counters still add up
    "lost": ("lost", "vanished", lambda h: setattr(_final(h), "remaining", [UNKNOWN])),
    "not read back": ("lost", "not read back", lambda h: setattr(h, "final", None)),
    "resurrected": ("resurrected", "after completion", lambda h: delivered(h, 0, "rz")),
    "double-lease": ("double-lease", "receipt ra", lambda h: delivered(h, 1, "ra")),
    # a retry of d1 answered with b's id
    "dedup answered twice": (
        "dedup",
        "d1",
        lambda h: h.calls.append(
            Call(
                "p",
                "enqueue",
                4.0,
                4.1,
                "ok",
                wall=4.0,
                writer="w1",
                dedup="d1",
                ids=[h.calls[1].ids[0]],
            )
        ),
    ),
    # a second message of d1, never answered to its producer, seen when it is delivered
    "dedup seen through a delivery": (
        "dedup",
        UNKNOWN,
        lambda h: delivered(h, UNKNOWN, "rx", dedups=["d1"]),
    ),
    # the attempt that made d2's message was answered "nothing changed"; a retry found it
    "known-failure-applied": (
        "known-failure-applied",
        "d2",
        lambda h: (
            h.calls.insert(
                1, Call("p", "enqueue", 1.15, 1.19, "fail", wall=1.15, dedup="d2", error="Fenced")
            ),
            setattr(h.calls[2], "wall", 1.25),
        ),
    ),
    # w2 opened while w1's completion was on its way
    "fenced-ack": ("fenced-ack", "newer writer", lambda h: h.opens.append(("w2", 2.15))),
    # the counters, each alone: a message no call made stands in the queue to keep the sum
    "total_enqueued above the attempts": (
        "stats",
        "total_enqueued 3 outside",
        lambda h: (setattr(h.final, "total_enqueued", 3), _final(h).remaining.append(UNKNOWN)),
    ),
    "completed below the acknowledged": (
        "stats",
        "completed 0 outside",
        lambda h: (setattr(h.final, "completed", 0), _final(h).remaining.append(UNKNOWN)),
    ),
    "counters that do not add up": (
        "stats",
        "!= completed 1 + 2",
        lambda h: _final(h).remaining.append(UNKNOWN),
    ),
    # a third producer was answered with b's id: three acknowledged, two made
    "total_enqueued below the acknowledged": (
        "stats",
        "total_enqueued 2 outside [3, 3]",
        lambda h: h.calls.append(
            Call(
                "p2",
                "enqueue",
                4.0,
                4.1,
                "ok",
                wall=4.0,
                writer="w1",
                dedup="d3",
                ids=[h.calls[1].ids[0]],
            )
        ),
    ),
    # an enqueue of unknown outcome made a message, counted, then neither queued nor completed
    "a message with no final state": (
        "stats",
        "total_enqueued 3 != completed 1 + 1",
        lambda h: (
            h.calls.append(
                Call("p", "enqueue", 4.0, 4.1, "unknown", wall=4.0, dedup="d3", error="Unknown")
            ),
            setattr(h.final, "total_enqueued", 3),
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_each_check_fails_alone_on_a_history_corrupted_its_way(name: str) -> None:
    h = copy.deepcopy(good_history())
    expected, word, corrupt = CORRUPTIONS[name]
    corrupt(h)
    [violation] = check(h)
    assert violation.check == expected, violation
    assert word in violation.detail, violation


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


def test_a_writer_acknowledging_after_its_successor_first_answered_is_flagged() -> None:
    """Through brokers the opens are the writers' first answers (``first_answers``): w2 took
    the queue over and answered a's completion at 2.3; w1's delivery of b sent before then
    passes (it may have committed in time), the same sent after it is a fenced ack."""
    h = good_history()
    h.calls[3].writer = "w2"
    h.opens = first_answers(h.calls)
    assert h.opens == [("w1", 1.1), ("w2", 2.3)]
    assert check(h) == []
    b = h.calls[1].ids[0]
    late = Call("c2", "dequeue", 2.25, 2.4, "ok", writer="w1", ids=[b], receipts=["rb"])
    h.calls.append(late)
    assert check(h) == []
    late.invoked = 2.35  # sent after w2 answered: w1 was fenced by then
    [violation] = check(h)
    assert violation.check == "fenced-ack" and "writer w1" in violation.detail, violation


def test_a_completion_older_than_the_retention_may_be_forgotten_but_no_more() -> None:
    """Completions are remembered ``completed_retention`` from when they were made: read back
    at 10 s with a 5 s retention, a's completion (sent at 2.2 s) may be gone from the counters;
    read back at 6 s it must still be there; and only completions can be forgotten."""
    h = good_history()
    h.completed_retention = 5.0
    h.final = Final(remaining=[h.calls[1].ids[0]], total_enqueued=2, completed=0, read_at=10.0)
    assert check(h) == []
    h.final.completed = 1  # not pruned yet: as good
    assert check(h) == []
    h.final.read_at = 6.0
    h.final.completed = 0  # (nor may it be missing from the sum)
    found = check(h)
    assert {v.check for v in found} == {"stats"}
    assert [v for v in found if "completed 0 outside [1, 1]" in v.detail], found
    h.final.read_at = 10.0  # an enqueue of unknown outcome made a third message, and it vanished
    h.calls.append(Call("p", "enqueue", 4.0, 4.1, "unknown", wall=4.0, dedup="d3", error="U"))
    h.final.total_enqueued = 3
    [violation] = check(h)
    assert violation.check == "stats" and "at most 1" in violation.detail
