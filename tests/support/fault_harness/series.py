"""A soak's figures over time, its targets judged, and the JSON and PNG a person reads.

:func:`intervals` cuts a :class:`~fault_harness.soak.SoakRun` into its sampling intervals:
messages enqueued and finished a second, p50 and p99 per call kind, errors by type and
availability in each, beside what was sampled at its end (RSS, descriptors, store objects and
bytes, checkpoint and collection lag, backlog). :func:`targets` judges the run against issue 36's
targets, comparing a late window with an early one (minutes 10-20 and the last 10 minutes of a
run of 30 minutes or more; the middle and last thirds of a shorter one). Latencies, errors and
availability leave out the injected outages: each partition of a broker's store, and each kill
or stall until its queues served again, plus a second (``PARTITION_GRACE``).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fault_harness.soak import FINISHING, UNTIMED, BrokerStalled, Disruption, Sample, SoakRun
from fault_harness.workload import DOWN, PARTITION_GRACE, _length, _union

#: errors of the SQS endpoint's clients that say the queue was not serving
SQS_DOWN = frozenset(
    {
        "ServiceUnavailable",
        "InternalError",
        "InternalFailure",
        "EndpointConnectionError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "ConnectionClosedError",
        BrokerStalled.__name__,  # the soak's own: a probe of the broker went unanswered
    }
)
UNKNOWN = frozenset({"OutcomeUnknown"})
POLLS = frozenset({"dequeue", "sqs_receive"})


def served_again_by_queue(run: SoakRun, d: Disruption) -> dict[str, float | None]:
    """For each queue ``d``'s broker led: seconds from ``d`` to its first call sent after
    ``d`` and answered ok (None: none was)."""
    firsts: dict[str, float | None] = dict.fromkeys(d.queues)
    for s in run.samples:
        if s.queue in firsts and s.error is None and s.invoked > d.started:
            first = firsts[s.queue]
            firsts[s.queue] = s.returned if first is None else min(first, s.returned)
    return {q: None if t is None else t - d.started for q, t in firsts.items()}


def served_again(run: SoakRun, d: Disruption) -> float | None:
    """The longest of :func:`served_again_by_queue` (None if a queue never served again)."""
    again = served_again_by_queue(run, d).values()
    return None if None in again else max((a for a in again if a is not None), default=0.0)


def takers_partitioned(run: SoakRun, d: Disruption) -> dict[str, float]:
    """For each queue ``d``'s broker led: the seconds between ``d`` and the queue's serving
    again during which the store of a broker that could take it over (any but ``d``'s) was
    partitioned. A broker cut off from the store cannot write the queue's lease, so a takeover
    through it waits for the partition's end; which broker a client's calls reached is not
    recorded, so any partition of a possible taker counts."""
    again = served_again_by_queue(run, d)
    out: dict[str, float] = {}
    for q in d.queues:
        end = again.get(q)
        if end is None:
            out[q] = 0.0
            continue
        spans = [
            (max(a, d.started), min(b, d.started + end))
            for url, found in run.partitions_of.items()
            if url != d.broker
            for a, b in found
        ]
        out[q] = _length(_union([(a, b) for a, b in spans if a < b]))
    return out


def recovered(run: SoakRun, d: Disruption) -> float | None:
    """The longest time one of ``d``'s queues took to serve again, less the time a broker that
    could take it over had its store partitioned meanwhile (None if a queue never served)."""
    again = served_again_by_queue(run, d)
    if None in again.values():
        return None
    cut = takers_partitioned(run, d)
    return max(((a or 0.0) - cut[q] for q, a in again.items()), default=0.0)


def timeline(run: SoakRun, d: Disruption, after: float = 12.0) -> list[str]:
    """What happened around ``d``, a line each (seconds from its start): the broker that took
    each queue over and when, the partitions of any broker's store that overlap, and each call
    to its queues answered from just before ``d`` to ``after`` seconds past it."""
    t0 = d.started
    out = [f"{d.kind} of {d.broker} at {t0 - run.started:.2f} s, until +{d.ended - t0:.2f} s"]
    for q, (url, at) in sorted(d.takers.items()):
        out.append(f"  {q}: led next by {url} from +{at - t0:.2f} s")
    for url, spans in sorted(run.partitions_of.items()):
        for a, b in spans:
            if a < t0 + after and b > t0 - 1:
                out.append(f"  store of {url} partitioned +{a - t0:.2f} .. +{b - t0:.2f} s")
    for s in sorted(run.samples, key=lambda s: s.invoked):
        if s.queue in d.queues and s.returned > t0 - 0.5 and s.invoked < t0 + after:
            out.append(
                f"    {s.queue} {s.kind} +{s.invoked - t0:.2f} .. +{s.returned - t0:.2f} "
                f"{s.error or 'ok'} {s.messages}" + (f" ({s.detail})" if s.detail else "")
            )
    return out


def outages(run: SoakRun) -> list[tuple[float, float]]:
    """The injected outages, each stretched by ``PARTITION_GRACE`` (merged, monotonic)."""
    spans = list(run.partitions)
    for d in run.disruptions:
        again = served_again(run, d)
        spans.append((d.started, d.started + (again if again is not None else run.seconds)))
    return _union([(start, end + PARTITION_GRACE) for start, end in spans])


def _outside(samples: list[Sample], windows: list[tuple[float, float]]) -> list[Sample]:
    return [s for s in samples if not any(a < s.returned and s.invoked < b for a, b in windows)]


def _down(s: Sample) -> bool:
    return s.error is not None and (s.error in DOWN or s.error in SQS_DOWN)


def availability(samples: list[Sample], windows: list[tuple[float, float]], span: float) -> float:
    """Share of ``span`` seconds outside ``windows`` in which no call outside them failed for
    a queue that was not serving (as :meth:`fault_harness.workload.Report.availability`)."""
    down = _union([(s.invoked, s.returned) for s in _outside(samples, windows) if _down(s)])
    total = span - _length(windows)
    return 1.0 - _length(down) / total if total > 0 else 1.0


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


def latencies(samples: list[Sample]) -> dict[str, dict[str, float | None]]:
    """p50 and p99 (ms) of the ok calls of each kind (receives only when they got messages:
    an empty one waited out its long poll)."""
    by: dict[str, list[float]] = {}
    for s in samples:
        if s.error is None and s.kind not in UNTIMED and (s.messages or s.kind not in POLLS):
            by.setdefault(s.kind, []).append((s.returned - s.invoked) * 1000)
    return {k: {"p50": _pct(v, 0.5), "p99": _pct(v, 0.99)} for k, v in sorted(by.items())}


def intervals(run: SoakRun) -> list[dict[str, Any]]:
    """One row per sampling interval, ending at each point."""
    windows = outages(run)
    rows: list[dict[str, Any]] = []
    begin = 0.0
    previous = None
    for point in run.points:
        lo, hi = run.started + begin, run.started + point.at
        inside = [s for s in run.samples if lo <= s.invoked < hi]
        clear = _outside(inside, windows)
        span = hi - lo
        errors: dict[str, int] = {}
        for s in inside:
            if s.error is not None:
                errors[s.error] = errors.get(s.error, 0) + 1
        clipped = _clipped(windows, lo, hi)
        disrupted = any(
            d.started < hi and d.started + (served_again(run, d) or 0.0) > lo
            for d in run.disruptions
        )
        finished: dict[str, float] = {}
        for s in inside:
            if s.kind in FINISHING:
                finished[s.queue] = finished.get(s.queue, 0.0) + s.messages / span
        moved = previous is not None and any(
            was is not None and point.leaders.get(q) not in (None, was)
            for q, was in previous.leaders.items()
        )
        rows.append(
            {
                "start": round(begin, 1),
                "end": round(point.at, 1),
                "enqueued_per_s": sum(
                    s.messages for s in inside if s.kind in ("enqueue_batch", "sqs_send", "enqueue")
                )
                / span,
                "finished_per_s": sum(s.messages for s in inside if s.kind in FINISHING) / span,
                "latency_ms": latencies(clear),
                "errors": errors,
                "calls": len(inside),
                "availability": availability(inside, clipped, span),
                "finished_per_s_by_queue": finished,
                "disturbed": disrupted,  # by a kill or a stall (partitions come and go)
                # a queue's lease moved without a kill or stall: its leader's store was cut off
                # for longer than the lease, or it lost a renewal to a fault
                "taken_over": moved and not disrupted,
                "store_cut_s": {
                    url: round(_length(_clipped(cuts, lo, hi)), 1)
                    for url, cuts in run.partitions_of.items()
                },
                "checkpointed": previous is not None and point.checkpoint != previous.checkpoint,
                "collected": previous is not None
                and any(point.garbage[q] < previous.garbage.get(q, 0) for q in point.garbage),
                "rss_max": max((v for v in point.rss.values() if v is not None), default=None),
                **{k: v for k, v in asdict(point).items() if k != "at"},
            }
        )
        begin, previous = point.at, point
    return rows


def _clipped(spans: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    """The parts of ``spans`` between ``lo`` and ``hi``."""
    return [(max(a, lo), min(b, hi)) for a, b in spans if a < hi and b > lo]


def windows(run: SoakRun) -> tuple[tuple[float, float], tuple[float, float]]:
    """The early and late windows compared (seconds into the run, before the drain)."""
    total = run.plan.seconds
    if total >= 1800:
        return (600.0, 1200.0), (total - 600.0, total)
    return (total / 3, 2 * total / 3), (2 * total / 3, total)


@dataclass
class Target:
    name: str
    figure: str
    passed: bool


def _in(rows: list[dict[str, Any]], window: tuple[float, float]) -> list[dict[str, Any]]:
    return [r for r in rows if window[0] <= r["start"] and r["end"] <= window[1] + 1]


def _within(late: float | None, early: float | None, bound: float = 1.10) -> bool:
    return late is not None and early is not None and late <= bound * early


def _mean(values: list[Any]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def targets(run: SoakRun, rows: list[dict[str, Any]] | None = None) -> list[Target]:
    """Issue 36's targets, judged on ``run``."""
    rows = intervals(run) if rows is None else rows
    plan = run.plan
    out: list[Target] = []
    checks: dict[str, int] = {}
    for found in run.violations.values():
        for v in found:
            checks[v.check] = checks.get(v.check, 0) + 1
    total = sum(checks.values())
    out.append(Target("history checker: 0 violations", f"{total} {checks or ''}", total == 0))
    for name in ("lost", "double-lease"):
        out.append(Target(f"0 {name}", str(checks.get(name, 0)), not checks.get(name)))
    early, late = windows(run)
    e_rows, l_rows = _in(rows, early), _in(rows, late)
    span = (
        f"[{early[0] / 60:.1f}-{early[1] / 60:.1f}] vs [{late[0] / 60:.1f}-{late[1] / 60:.1f}] min"
    )
    rss_e, rss_l = _mean([r["rss_max"] for r in e_rows]), _mean([r["rss_max"] for r in l_rows])
    out.append(
        Target(
            f"broker RSS (largest) late within 10 % of early, {span}",
            f"{_mib(rss_e)} -> {_mib(rss_l)} MiB",
            _within(rss_l, rss_e),
        )
    )
    windows_out = outages(run)
    e_lat = latencies(_outside(_samples(run, early), windows_out))
    l_lat = latencies(_outside(_samples(run, late), windows_out))
    # The S3 server's own p99 (each interval's, averaged over the window) drifts as it runs;
    # s3q's part is the call's p99 over the store's.
    e_up = _mean([r["upstream_p99"] for r in e_rows])
    l_up = _mean([r["upstream_p99"] for r in l_rows])
    for kind in sorted(set(e_lat) & set(l_lat)):
        a, b = e_lat[kind]["p99"], l_lat[kind]["p99"]
        if a is None or b is None or not e_up or not l_up:
            out.append(Target(f"p99 {kind} over the S3 server's p99", "-", False))
            continue
        ea, lb = a / (e_up * 1000), b / (l_up * 1000)
        out.append(
            Target(
                f"p99 {kind} over the S3 server's p99, late within 10 % of early",
                f"{a:.0f} / {e_up * 1000:.0f} = {ea:.2f} -> {b:.0f} / {l_up * 1000:.0f} = {lb:.2f}",
                _within(lb, ea),
            )
        )
    for what in ("objects", "bytes"):
        a = max((r[what] for r in e_rows), default=None)
        b = max((r[what] for r in l_rows), default=None)
        out.append(
            Target(
                f"store {what} bounded (late peak within 10 % of early peak)",
                f"{a} -> {b}",
                _within(b, a),
            )
        )
    timed = [r for r in rows[1:] if not r["disturbed"] and r["end"] <= plan.seconds + 1]
    steady_rows = [r for r in timed if not r["taken_over"]]
    steady = statistics.median([r["finished_per_s"] for r in steady_rows]) if steady_rows else 0.0
    busy = [r for r in steady_rows if r["checkpointed"] or r["collected"]]
    low = min((r["finished_per_s"] for r in busy), default=None)
    moved = [r for r in timed if r["taken_over"]]
    moved_low = min((r["finished_per_s"] for r in moved), default=None)
    out.append(
        Target(
            "throughput >= 80 % of steady while checkpointing / collecting (intervals with a "
            "takeover apart)",
            (
                f"steady {steady:.0f} msg/s, lowest {low:.0f} msg/s in {len(busy)} intervals"
                if low is not None
                else f"steady {steady:.0f} msg/s, no such interval"
            )
            + (
                f"; {len(moved)} with a takeover, lowest {moved_low:.0f} msg/s"
                if moved_low is not None
                else ""
            ),
            low is not None and low >= 0.8 * steady,
        )
    )
    bound = plan.lease_ttl + 2
    for kind in ("kill", "stall"):
        done = [d for d in run.disruptions if d.kind == kind]
        again = [recovered(run, d) for d in done]
        worst = max((a if a is not None else float("inf") for a in again), default=None)
        out.append(
            Target(
                f"each {kind} recovered within lease ttl + 2 s ({bound:g} s; the takers' "
                "partitions apart)",
                f"{len(done)} {kind}s, longest {worst:.2f} s" if worst is not None else "none",
                worst is not None and worst <= bound,
            )
        )
    avail = availability(run.samples, windows_out, run.seconds)
    out.append(
        Target("availability >= 99.9 % outside injected outages", f"{avail:.4%}", avail >= 0.999)
    )
    clear = _outside(run.samples, windows_out)
    errs = sum(1 for s in clear if s.error is not None and s.error not in UNKNOWN)
    unknown = sum(1 for s in run.samples if s.error in UNKNOWN)
    all_errs = sum(1 for s in run.samples if s.error is not None and s.error not in UNKNOWN)
    rate = errs / max(len(clear), 1)
    out.append(
        Target(
            "errors <= 0.1 % outside injected outages (OutcomeUnknown apart)",
            f"{rate:.3%} ({errs} of {len(clear)}; all: {all_errs} of {len(run.samples)}, "
            f"OutcomeUnknown {unknown})",
            rate <= 0.001,
        )
    )
    return out


def _samples(run: SoakRun, window: tuple[float, float]) -> list[Sample]:
    lo, hi = run.started + window[0], run.started + window[1]
    return [s for s in run.samples if lo <= s.invoked < hi]


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:.0f}"


def table(found: list[Target]) -> str:
    width = max(len(t.name) for t in found)
    lines = [f"{'target'.ljust(width)}  {'result':6}  figure"]
    lines += [
        f"{t.name.ljust(width)}  {'pass' if t.passed else 'FAIL':6}  {t.figure}" for t in found
    ]
    return "\n".join(lines)


def report(run: SoakRun, command: str) -> dict[str, Any]:
    """The run as JSON-ready data: settings, intervals, disruptions, verdict, targets."""
    rows = intervals(run)
    return {
        "command": command,
        "plan": {k: v for k, v in asdict(run.plan).items() if k != "profile"},
        "seconds": run.seconds,
        "calls": len(run.samples),
        "faults_injected": run.injected,
        "partitions": len(run.partitions),
        "disruptions": [
            {
                **asdict(d),
                "started": d.started - run.started,
                "ended": d.ended - run.started,
                "served_again": served_again(run, d),
                "served_again_by_queue": served_again_by_queue(run, d),
                "takers_partitioned": takers_partitioned(run, d),
                "recovered": recovered(run, d),
                "takers": {q: url for q, (url, _) in d.takers.items()},
                #: seconds from the disruption to the lease naming the taker: the rest of
                #: ``served_again`` is the clients finding it
                "taken_after": {q: at - d.started for q, (_, at) in d.takers.items()},
            }
            for d in run.disruptions
        ],
        "violations": {
            q: [{"check": v.check, "detail": v.detail} for v in vs[:50]]
            for q, vs in run.violations.items()
        },
        #: writers whose answers the fenced-ack check compared, by queue (those that named one)
        "writers": {q: len(h.opens) for q, h in run.histories.items()},
        "worker_stops": run.worker_stops,
        "dead_letters": run.dead_letters,
        "sample_failures": run.sample_failures,
        "intervals": rows,
        "targets": [asdict(t) for t in targets(run, rows)],
    }


def write_json(data: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(data, indent=1, default=str))


def plot(data: dict[str, Any], path: Path) -> None:
    """A PNG of the series over time (needs matplotlib): throughput, p99 per kind, RSS per
    broker, store objects, checkpoint and collection lag, errors; disruptions shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = data["intervals"]
    t = [r["end"] / 60 for r in rows]
    fig, axes = plt.subplots(3, 2, figsize=(14, 11), sharex=True)
    (a, b), (c, d), (e, f) = axes
    a.plot(t, [r["finished_per_s"] for r in rows], label="finished/s")
    a.plot(t, [r["enqueued_per_s"] for r in rows], label="enqueued/s")
    a.set_title("throughput (msg/s)")
    kinds = sorted({k for r in rows for k in r["latency_ms"]})
    for kind in kinds:
        b.plot(t, [r["latency_ms"].get(kind, {}).get("p99") for r in rows], label=kind)
    b.plot(t, [(r["upstream_p99"] or 0) * 1000 for r in rows], "k--", label="S3 server p99")
    b.set_yscale("log")
    b.set_title("p99 per call kind (ms, outside outages)")
    for url in sorted({u for r in rows for u in r["rss"]}):
        c.plot(t, [_mb(r["rss"].get(url)) for r in rows], label=f"RSS {url.rsplit(':', 1)[1]}")
    c.plot(t, [_mb(r["store_rss"]) for r in rows], "k--", label="S3 server RSS")
    c.set_title("resident memory (MiB)")
    d.plot(t, [r["objects"] for r in rows], label="objects")
    d2 = d.twinx()
    d2.plot(t, [r["bytes"] / 2**20 for r in rows], "r:", label="MiB")
    d.set_title("store: objects (line), MiB (dotted)")
    for queue in sorted({q for r in rows for q in r["unchecked"]}):
        (line,) = e.plot(
            t, [r["unchecked"].get(queue) for r in rows], label=f"{queue} not checkpointed"
        )
        e.plot(
            t,
            [r["garbage"].get(queue) for r in rows],
            ":",
            color=line.get_color(),
            label=f"{queue} garbage",
        )
    e.set_title("log objects: since the newest checkpoint, and awaiting collection")
    f.plot(t, [sum(r["errors"].values()) for r in rows], label="errors")
    f.plot(t, [(1 - r["availability"]) * 1000 for r in rows], label="unavailability (‰)")
    f.set_title("errors per interval, unavailability (‰)")
    for ax in axes.flat:
        for dis in data["disruptions"]:
            ax.axvspan(dis["started"] / 60, dis["ended"] / 60, color="orange", alpha=0.2)
        ax.legend(fontsize=7, loc="upper left")
        ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("minutes (orange: leader killed or stalled)")
    fig.suptitle(data["command"], fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _mb(value: int | None) -> float | None:
    return None if value is None else value / 2**20
