"""A long fault run: producers and consumers against a queue whose store fails, then the
history checked.

    python benchmarks/faults.py --ops 1000000 --seed 7 [--profile realistic|harsh]
        [--store memory|s3|brokers] [--clock-jumps S] [--pause-every S --lease-ttl S]

With ``--store memory`` (the default) the queue is embedded, in the in-process memory store
behind ``s3q.faults.FaultyStore`` and the writer's own retries; with ``--store s3`` embedded
in a moto S3 server this script starts, reached by the real S3 client through
``s3q.faults.proxy.FaultProxy``, which injects the same faults on the wire; with
``--store brokers`` served by two brokers (``s3q serve``) over that server, each through its
own proxy, to clients. ``--pause-every S`` SIGSTOPs the leading broker about every S seconds
for ``--lease-ttl`` + 1.5 s. ``--clock-jumps S`` makes an embedded writer's clock jump by up
to S seconds either way every few seconds.

``realistic`` is the profile seen on object stores (about 1 % 5xx, 0.2 % answers lost after
applying, 2 % truncated reads, rare hung requests, a partition of 1.5-10 s about every 40 s);
``harsh`` is many times those rates without partitions. Prints one line per run: calls,
outcomes, faults injected by kind, writer stops by cause, availability outside partitions and
pauses, recovery after them, calls answered OutcomeUnknown, and every violation found.
Exits 1 if there is any violation or writer stop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import shlex
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import local_s3  # (also puts tests/support, the fault harness, on the path)
from fault_harness.workload import Plan, Report, in_memory, run_embedded, through_proxy

from s3q.faults import HARSH, REALISTIC

PROFILES = {"realistic": REALISTIC, "harsh": HARSH}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=100_000)
    parser.add_argument("--seed", type=int, action="append", help="repeatable; default 1")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="realistic")
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--consumers", type=int, default=8)
    parser.add_argument("--visibility-timeout", type=float, default=5.0)
    parser.add_argument("--store-timeout", type=float, default=1.0)
    parser.add_argument("--store", choices=["memory", "s3", "brokers"], default="memory")
    parser.add_argument("--pause-every", type=float, default=0.0)
    parser.add_argument("--lease-ttl", type=float, default=3.0)
    parser.add_argument("--clock-jumps", type=float, default=0.0)
    parser.add_argument("--partitions", type=int, default=1, help="the queue's partitions")
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)
    print("$ python " + " ".join(shlex.quote(a) for a in sys.argv))
    bad = False
    for seed in args.seed or [1]:
        plan = Plan(
            ops=args.ops,
            seed=seed,
            producers=args.producers,
            consumers=args.consumers,
            profile=PROFILES[args.profile],
            visibility_timeout=args.visibility_timeout,
            store_timeout=args.store_timeout,
            clock_jumps=args.clock_jumps,
            lease_ttl=args.lease_ttl,
            partitions=args.partitions,
        )
        report = run(plan, args.store, args.pause_every)
        print(report.summary())
        unknown = report.unknown_outcomes()
        print(
            f"  OutcomeUnknown answers: {unknown} ({unknown / max(report.calls, 1):.4%} of "
            f"calls); partitions: {len(report.partitions)}; "
            f"calls/s: {report.calls / report.seconds:,.0f}"
        )
        t0 = min((c.invoked for c in report.history.calls), default=0.0)
        for c in report.down_calls()[:20]:
            print(
                f"  DOWN outside outages: {c.process} {c.kind} {c.error} for "
                f"{c.returned - c.invoked:.2f} s, {c.invoked - t0:.2f} s into the run"
            )
        for violation in report.violations[:20]:
            print(f"  VIOLATION {violation.check}: {violation.detail}")
        bad = bad or bool(report.violations or report.stops)
    sys.exit(1 if bad else 0)


def run(plan: Plan, store: str, pause_every: float) -> Report:
    if store == "memory":
        return asyncio.run(run_embedded(plan, in_memory(plan)))
    with _moto() as (endpoint, options):
        if store == "brokers":
            from fault_harness.cluster import run_cluster

            return asyncio.run(
                run_cluster(plan, endpoint, "faults", options, pause_every=pause_every)
            )
        from s3q.faults.proxy import FaultProxy

        with FaultProxy(endpoint, plan.profile, plan.seed, 2 * plan.store_timeout) as proxy:
            url = f"s3://faults/{uuid.uuid4().hex[:8]}"
            return asyncio.run(run_embedded(plan, through_proxy(plan, proxy, url, options)))


@contextlib.contextmanager
def _moto() -> Iterator[tuple[str, dict[str, Any]]]:
    """A moto S3 server with a bucket "faults": its endpoint and the options to reach it."""
    moto = local_s3.start("faults")
    try:
        yield moto.endpoint, moto.store_options()
    finally:
        moto.stop()


if __name__ == "__main__":
    main()
