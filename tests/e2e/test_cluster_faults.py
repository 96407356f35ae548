"""Two brokers (child processes) over S3 through the fault proxy, the leader paused with SIGSTOP
past its lease: every promise kept."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from fault_harness.cluster import PAUSE_PAST_LEASE
from fault_harness.workload import Plan

from s3q.faults import HARSH, check


def test_brokers_whose_leader_is_paused_keep_every_promise(
    moto_server: Any, s3_bucket: str
) -> None:
    """Two brokers over S3 through the proxy; the leader SIGSTOPped past its lease, then
    woken: the other takes over (a new writer answers), and the old one acknowledged nothing
    sent after its successor opened. The fenced-ack check runs over the calls each writer
    answered: a late acknowledgement of the paused writer, put into the recorded history, is
    flagged."""
    from fault_harness.cluster import run_cluster

    plan = Plan(seed=6, ops=1500, profile=HARSH, store_timeout=0.5, lease_ttl=1.5)
    report = asyncio.run(
        run_cluster(
            plan, moto_server.endpoint, s3_bucket, moto_server.store_options(), pause_every=1.0
        )
    )
    print(report.summary())
    history = report.history
    assert report.pauses, "the leader was never paused"
    assert report.violations == [], report.violations[:5]
    opened = dict(history.opens)
    # every call answered ok with messages names the writer that answered it (an empty
    # dequeue of a queue not made yet reaches none)
    assert all(c.writer for c in history.calls if c.outcome == "ok" and c.ids)
    # (a broker may be paused right after it took the queue over, before its first answer:
    # its writer then answered nothing the run recorded, and has nothing to check)
    answered = [p for p in report.pauses if p.writer in opened]
    assert answered, f"no paused writer had answered a call: {report.pauses}"
    for pause in answered:
        if pause.ended - pause.started < plan.lease_ttl + PAUSE_PAST_LEASE:
            continue  # the calls ended while it was paused
        assert pause.taken_by is not None, f"no other writer took the queue over: {pause}"
        assert opened[pause.taken_by] > pause.started
    taken = [p for p in report.pauses if p.taken_by is not None]
    assert taken, "no pause ended in a takeover"

    # The check compared the paused writer's acknowledgements with its successor's open: one
    # of its deliveries or completions, sent again after that open and acknowledged, is a
    # fenced ack. (Under load a paused writer may have answered only enqueues: another one.)
    def acked_by(writer: str | None) -> list[Any]:
        kinds = ("dequeue", "complete")
        return [
            c
            for c in history.calls
            if c.writer == writer and c.kind in kinds and c.outcome == "ok" and c.ids
        ]

    pause = next((p for p in taken if acked_by(p.writer)), None)
    assert pause is not None, f"no paused writer acknowledged a delivery or completion: {taken}"
    assert pause.writer is not None and pause.taken_by is not None
    successor = opened[pause.taken_by]
    late = copy.deepcopy(acked_by(pause.writer)[-1])
    late.invoked, late.returned = successor + 0.01, successor + 0.02
    corrupted = copy.deepcopy(history)
    corrupted.calls.append(late)
    found = check(corrupted)  # (a copied delivery may also read as a second lease)
    assert any(v.check == "fenced-ack" and pause.writer in v.detail for v in found), found


# a takeover within the pause is a figure of time: with the parallel tier saturating both
# cores, a pause in one of two full runs went untaken (15 pauses, 14 taken), before and after
# this suite's partitioned-dequeue change alike; on a machine not saturated it holds
@pytest.mark.alone
def test_a_partitioned_queue_through_paused_brokers_keeps_every_promise(
    moto_server: Any, s3_bucket: str
) -> None:
    """A queue of three partitions served by two brokers over S3 through the proxy, the leader
    of a partition drawn at random SIGSTOPped past its lease, then woken: the other broker
    takes that partition over, and the history, checked over every partition's log, keeps
    every promise."""
    from fault_harness.cluster import run_cluster

    plan = Plan(seed=7, ops=1500, profile=HARSH, store_timeout=0.5, lease_ttl=1.5, partitions=3)
    report = asyncio.run(
        run_cluster(
            plan, moto_server.endpoint, s3_bucket, moto_server.store_options(), pause_every=1.0
        )
    )
    print(report.summary())
    assert report.pauses, "no leader was ever paused"
    assert report.violations == [], report.violations[:5]
    final = report.history.final
    assert final is not None and final.total_enqueued > 0 and final.completed > 0
    # a broker whose writer of a partition was fenced hands the partition on (it evicts the
    # stopped writer, as it does a queue's): no call is answered WriterFenced
    fenced = [c for c in report.history.calls if c.error == "WriterFenced"]
    assert fenced == [], fenced[:3]
    whole = [p for p in report.pauses if p.ended - p.started >= plan.lease_ttl + PAUSE_PAST_LEASE]
    # the other broker takes a paused leader's partition over whether or not a call needs it
    assert whole and all(p.taken_by is not None for p in whole), whole
