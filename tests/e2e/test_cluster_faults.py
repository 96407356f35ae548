"""Two brokers (child processes) over S3 through the fault proxy, the leader paused with SIGSTOP
past its lease: every promise kept."""

from __future__ import annotations

import asyncio
from typing import Any

from s3q.faults import HARSH
from s3q.faults.workload import Plan


def test_brokers_whose_leader_is_paused_keep_every_promise(
    moto_server: Any, s3_bucket: str
) -> None:
    """Two brokers over S3 through the proxy; the leader SIGSTOPped past its lease, then
    woken: the other takes over, and the old one's late commits are refused."""
    from s3q.faults.cluster import run_cluster

    plan = Plan(seed=6, ops=1500, profile=HARSH, store_timeout=0.5, lease_ttl=1.5)
    report = asyncio.run(
        run_cluster(
            plan, moto_server.endpoint, s3_bucket, moto_server.store_options(), pause_every=1.0
        )
    )
    print(report.summary())
    assert report.pauses, "the leader was never paused"
    assert report.violations == [], report.violations[:5]
