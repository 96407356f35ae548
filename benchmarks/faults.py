"""A long fault run: producers and consumers against a queue whose store fails, then the
history checked.

    python benchmarks/faults.py --ops 1000000 --seed 7 [--profile realistic|harsh]

The queue is embedded, over the in-process memory store behind ``s3q.faults.FaultyStore`` and
the writer's own retries. ``realistic`` is the profile seen on object stores (about 1 % 5xx,
0.2 % answers lost after applying, 2 % truncated reads, rare hung requests, a partition of
1.5-10 s about every 40 s); ``harsh`` is many times those rates without partitions. Prints one
line per run: calls, outcomes, faults injected by kind, writer stops by cause, availability
outside partitions, calls answered OutcomeUnknown, and every violation the checker found.
Exits 1 if there is any violation or writer stop.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shlex
import sys

from s3q.faults.store import HARSH, REALISTIC
from s3q.faults.workload import Plan, run_embedded

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
        )
        report = asyncio.run(run_embedded(plan))
        print(report.summary())
        unknown = report.unknown_outcomes()
        print(
            f"  OutcomeUnknown answers: {unknown} ({unknown / max(report.calls, 1):.4%} of "
            f"calls); partitions: {len(report.partitions)}; "
            f"calls/s: {report.calls / report.seconds:,.0f}"
        )
        for violation in report.violations[:20]:
            print(f"  VIOLATION {violation.check}: {violation.detail}")
        bad = bad or bool(report.violations or report.stops)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
