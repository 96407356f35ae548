"""A short soak (benchmarks/soak.py at small numbers): three brokers over S3 through the fault
proxy under a mixed load, a leader killed and another stalled; every promise kept, each
disruption recovered within lease ttl + 2 s (the time a broker that could take over had its
store partitioned apart), the worker never stopped, the queues available, the store bounded;
the fenced-ack check ran over the native calls, each naming the writer that answered it."""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
from pathlib import Path

import pytest
from conftest import MotoServer
from fault_harness.series import (
    availability,
    intervals,
    outages,
    plot,
    recovered,
    report,
    served_again_by_queue,
    takers_partitioned,
    targets,
    timeline,
)
from fault_harness.soak import NATIVE, SoakPlan, run_soak

from s3q.faults import check

# three brokers and a steady load, held to availability and recovery times: after the rest
pytestmark = pytest.mark.alone

TTL = 3.0


@pytest.mark.timeout(420)
def test_a_short_soak_keeps_every_promise_through_a_kill_and_a_stall(
    moto_server: MotoServer, s3_bucket: str, tmp_path: Path
) -> None:
    plan = SoakPlan(
        seconds=120,
        seed=3,
        rate=60,
        batch=10,
        sqs_rate=2,
        job_rate=5,
        disrupt_every=40,
        sample_every=10,
        lease_ttl=TTL,
        visibility_timeout=10,
        gc_grace=10,
        checkpoint_interval=5,
        completed_retention=30,  # most completions forgotten by the end: the checker knows
        drain=5,
    )
    run = asyncio.run(
        run_soak(
            plan,
            moto_server.endpoint,
            s3_bucket,
            moto_server.store_options(),
            store_pid=moto_server.proc.pid,
        )
    )
    data = report(run, "tests/e2e/test_soak.py")
    (tmp_path / "soak.json").write_text(json.dumps(data, default=str))
    plot(data, tmp_path / "soak.png")
    found = {t.name: t for t in targets(run)}
    print("\n" + "\n".join(f"{t.name}: {t.passed} {t.figure}" for t in found.values()))
    for d in run.disruptions:
        print("\n".join(timeline(run, d)))

    assert {q: v for q, v in run.violations.items() if v} == {}
    for queue, history in run.histories.items():  # each kind of client made its calls
        acked = [c for c in history.calls if c.kind == "enqueue" and c.outcome == "ok"]
        done = [c for c in history.calls if c.kind == "complete" and c.outcome == "ok"]
        assert len(acked) > 50 and done, queue
    assert run.dead_letters > 0  # the worker's always-failing messages died
    # The fenced-ack check had the native calls to check: each delivery and completion
    # answered names its writer, and the kill of the native queue's leader (the first
    # disruption) brought a second; an acknowledgement of the first, put into the history
    # after the second opened, is flagged.
    native = run.histories[NATIVE]
    acked = [c for c in native.calls if c.outcome == "ok" and c.ids and c.kind != "enqueue"]
    assert acked and all(c.writer for c in acked)
    assert len(native.opens) >= 2, native.opens
    assert data["writers"][NATIVE] == len(native.opens)
    writer, successor = next(  # (a writer may have answered only enqueues)
        (w, then)
        for (w, _), (_, then) in itertools.pairwise(native.opens)
        if any(c.writer == w for c in acked)
    )
    late = copy.deepcopy([c for c in acked if c.writer == writer][-1])
    late.invoked, late.returned = successor + 0.01, successor + 0.02
    corrupted = copy.deepcopy(native)
    corrupted.calls.append(late)
    assert any(v.check == "fenced-ack" and writer in v.detail for v in check(corrupted))
    kinds = sorted(d.kind for d in run.disruptions)
    assert kinds == ["kill", "stall"], kinds
    assert run.worker_stops == []  # the worker rode out every takeover
    for d in run.disruptions:
        # a broker whose store is partitioned cannot take a queue over: that time is the
        # partition's, not the takeover's (a call reaching such a broker waits it out)
        again = recovered(run, d)
        assert again is not None and again <= TTL + 2, (
            d.kind,
            served_again_by_queue(run, d),
            takers_partitioned(run, d),
        )
    assert availability(run.samples, outages(run), run.seconds) >= 0.999
    assert len(run.points) >= 8, run.sample_failures
    # Storage is given back: garbage a takeover left goes once a checkpoint (whichever leader
    # took it) is gc_grace old, so by the end the store holds about what it held in the
    # steady state before the first disruption. (The hour's soak compares late with early
    # peaks; two minutes hold no late window clear of the disruptions.)
    first = min(d.started for d in run.disruptions) - run.started  # (seconds into the run)
    rows = intervals(run)
    steady = max(r["objects"] for r in rows if r["end"] <= first)
    assert rows[-1]["objects"] <= 1.25 * steady, ([r["objects"] for r in rows], steady)
    assert (tmp_path / "soak.png").stat().st_size > 10_000
