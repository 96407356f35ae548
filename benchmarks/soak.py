"""A soak: three brokers over S3 (moto behind the fault proxy) under a steady mixed load for
``--minutes``, leaders killed and stalled now and then; figures every interval, the history
checked at the end, issue 36's targets judged.

    python benchmarks/soak.py --minutes 60 [--disrupt-every 300] [--rate 200] [--out soak]

The load (see ``fault_harness.soak``): native batch producers and consumers through s3q's client
(delayed messages, groups, tenants), single-message SQS clients through boto3 (send, receive,
delete on a FIFO queue), a worker with retries and dead letters. Every ``--sample-every``
seconds: each broker's RSS and open descriptors, the S3 server's RSS, the store's objects and
bytes, each queue's log objects since its newest checkpoint and those awaiting collection, its
backlog; per interval: throughput, p50/p99 per call kind, errors by type, availability.
Writes ``OUT.json`` and ``OUT.png`` (the series over time; needs matplotlib), prints the
targets with pass/fail and the command. Exits 1 if any target failed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shlex
import sys
from pathlib import Path

import local_s3  # (also puts tests/support, the fault harness, on the path)
from fault_harness.series import plot, recovered, report, table, timeline, write_json
from fault_harness.soak import SoakPlan, run_soak

from s3q.faults import HARSH, REALISTIC

PROFILES = {"realistic": REALISTIC, "harsh": HARSH}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = SoakPlan()
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="realistic")
    numbers = (  # noqa: SIM905
        "producers consumers batch rate sqs_clients sqs_rate job_rate worker_concurrency "
        "delayed delay_max grouped groups tenants disrupt_every sample_every lease_ttl "
        "visibility_timeout store_timeout commit_timeout gc_grace checkpoint_interval "
        "completed_retention drain"
    ).split()
    for name in numbers:
        value = getattr(defaults, name)
        parser.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    parser.add_argument("--out", default="soak", help="OUT.json and OUT.png are written")
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)
    command = "python " + shlex.join(sys.argv)
    print("$ " + command, flush=True)
    plan = SoakPlan(
        seconds=args.minutes * 60,
        seed=args.seed,
        profile=PROFILES[args.profile],
        **{name: getattr(args, name) for name in numbers},
    )
    moto = local_s3.start("soak")
    try:
        run = asyncio.run(
            run_soak(plan, moto.endpoint, "soak", moto.store_options(), store_pid=moto.proc.pid)
        )
    finally:
        moto.stop()
    data = report(run, command)
    for d in run.disruptions:  # what the clients saw around each slow recovery
        took = recovered(run, d)
        if took is None or took > plan.lease_ttl + 2:
            print("\n".join(timeline(run, d)))
    write_json(data, Path(args.out + ".json"))
    plot(data, Path(args.out + ".png"))
    for row in data["intervals"]:
        lat = ", ".join(
            f"{k} {v['p50']:.0f}/{v['p99']:.0f}" for k, v in row["latency_ms"].items() if v["p99"]
        )
        print(
            f"{row['end'] / 60:5.1f} min: {row['finished_per_s']:6.0f} done/s "
            f"{row['enqueued_per_s']:6.0f} in/s, RSS max {(row['rss_max'] or 0) / 2**20:4.0f} "
            f"MiB, objects {row['objects']:6d}, errors {sum(row['errors'].values())}, "
            f"avail {row['availability']:.4%}; p50/p99 ms: {lat}"
        )
    for d in data["disruptions"]:
        print(
            f"{d['kind']} of {d['broker']} (led {', '.join(d['queues'])}) at "
            f"{d['started']:.1f} s: served again after {d['served_again']} s "
            f"{d['served_again_by_queue']}, taken over by {d['takers']} "
            f"(their leases after {d['taken_after']} s), a possible taker's "
            f"store partitioned meanwhile {d['takers_partitioned']} s: recovered in "
            f"{d['recovered']} s"
        )
    rows = data["intervals"]
    if rows:  # what each queue holds in the store, first sample and last
        first, last = rows[0]["queue_usage"], rows[-1]["queue_usage"]
        print(
            "store by queue (objects, MB), first -> last sample: "
            + ", ".join(
                f"{q} {first[q][0]} -> {last[q][0]}, "
                f"{first[q][1] / 1e6:.1f} -> {last[q][1] / 1e6:.1f}"
                for q in last
                if q in first
            )
        )
    for queue, found in data["violations"].items():
        for v in found[:10]:
            print(f"VIOLATION {queue} {v['check']}: {v['detail']}")
    print(
        f"{data['calls']} calls in {data['seconds']:.0f} s, faults injected "
        f"{data['faults_injected']}, {data['partitions']} partitions, "
        f"dead letters {data['dead_letters']}, worker stopped by {data['worker_stops']}, "
        f"samples missed {data['sample_failures']}; writers whose answers the fenced-ack "
        f"check compared {data['writers']}"
    )
    print(table_of(data))
    print(f"wrote {args.out}.json and {args.out}.png")
    print("command: " + command)
    sys.exit(0 if all(t["passed"] for t in data["targets"]) else 1)


def table_of(data: dict[str, object]) -> str:
    from fault_harness.series import Target

    return table([Target(**t) for t in data["targets"]])  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
