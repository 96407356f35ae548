"""The broker's Prometheus metrics, served at ``/metrics``.

Operations are counted as they are answered; queue figures (depth by status, commits, store
requests) are read from every open queue when the endpoint is scraped.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from ..history.lives import percentile
from ..prices import MONTH, S3, Prices
from ..store.base import Counts
from .registry import QueueRegistry
from .request_log import RequestTally
from .tallies import Count, Spread, Tallies

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REQUEST_KINDS = ("put", "get", "list", "delete", "all", "failed", "retried")
STATUSES = ("pending", "delayed", "processing", "retry", "completed", "dead")
QUIET_STATES = ("visible", "in_flight", "delayed")  # QueueStats.quiet_<state>
# Operations answered once a commit made them durable: their time is the commit latency seen
# by clients. (A dequeue's time is mostly its long poll, so it is left out.)
COMMITTING = frozenset(
    {"enqueue", "enqueueBatch", "complete", "fail", "extend", "release", "redrive", "purge"}
)


def by_kind(counts: Counts) -> tuple[int, ...]:
    """``counts`` in the order of REQUEST_KINDS."""
    return (
        counts.puts,
        counts.gets,
        counts.lists,
        counts.deletes,
        counts.requests,
        counts.errors,
        counts.retries,
    )


@dataclass
class _Step:
    start: int  # index of the step: its start time is start * step seconds
    samples: list[float] = field(default_factory=list)
    count: int = 0


class LatencyWindow:
    """Request times of the last ``span`` seconds in steps of ``step`` seconds, for percentiles.

    Each step keeps at most ``per_step`` samples (a uniform reservoir sample of its requests),
    so memory stays bounded whatever the request rate.
    """

    def __init__(
        self,
        span: float = 300.0,
        step: float = 5.0,
        per_step: int = 1000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.span, self.step, self.per_step, self.clock = span, step, per_step, clock
        self._steps: deque[_Step] = deque()

    def record(self, seconds: float) -> None:
        index = int(self.clock() // self.step)
        if not self._steps or self._steps[-1].start != index:
            self._steps.append(_Step(index))
            self._trim(index)
        current = self._steps[-1]
        current.count += 1
        if len(current.samples) < self.per_step:
            current.samples.append(seconds)
        else:
            slot = random.randrange(current.count)
            if slot < self.per_step:
                current.samples[slot] = seconds

    def _trim(self, index: int) -> None:
        oldest = index - int(self.span // self.step)
        while self._steps and self._steps[0].start <= oldest:
            self._steps.popleft()

    def summary(self) -> dict[str, Any]:
        """``{span, step, p50, p99, count, series: [{t, count, p50, p99}]}`` (seconds; the
        percentiles are null when no request was answered)."""
        self._trim(int(self.clock() // self.step))
        series: list[dict[str, Any]] = []
        everything: list[float] = []
        for s in self._steps:
            ordered = sorted(s.samples)
            everything.extend(ordered)
            series.append(
                {
                    "t": s.start * self.step,
                    "count": s.count,
                    "p50": percentile(ordered, 0.5),
                    "p99": percentile(ordered, 0.99),
                }
            )
        everything.sort()
        return {
            "span": self.span,
            "step": self.step,
            "count": sum(s.count for s in self._steps),
            "p50": percentile(everything, 0.5) if everything else None,
            "p99": percentile(everything, 0.99) if everything else None,
            "series": series,
        }


class SpendRate:
    """What the store requests cost per month at the rate of the last ``span`` seconds (or
    since the broker started, if that is shorter), from the spend sampled when asked."""

    def __init__(self, span: float = 600.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.span, self.clock = span, clock
        self._samples: deque[tuple[float, float]] = deque([(clock(), 0.0)])

    def per_month(self, dollars: float) -> float:
        """Sample ``dollars`` (spent since the start) now; the monthly rate."""
        now = self.clock()
        self._samples.append((now, dollars))
        while len(self._samples) > 2 and self._samples[1][0] <= now - self.span:
            self._samples.popleft()  # keep the newest sample at least ``span`` old
        then, before = self._samples[0]
        return max(0.0, dollars - before) / (now - then) * MONTH if now > then else 0.0


#: the broker's series: (attribute, kind, name, help, labels, options)
SERIES: tuple[tuple[str, type[Any], str, str, tuple[str, ...], dict[str, Any]], ...] = (
    (
        "depth",
        Gauge,
        "s3q_queue_messages",
        ("Messages by status."),
        ("queue", "status"),
        {},
    ),
    (
        "commits",
        Gauge,
        "s3q_queue_commits",
        ("Log objects written since the queue opened."),
        ("queue",),
        {},
    ),
    (
        "waits",
        Gauge,
        "s3q_queue_commit_waits",
        (
            "Commits that waited for more operations before their write (the commit window),"
            " since the queue opened."
        ),
        ("queue",),
        {},
    ),
    (
        "buffered",
        Gauge,
        "s3q_queue_buffered_answers",
        (
            'Messages whose enqueue was answered before it was durable (durability "buffered"),'
            " since the queue opened."
        ),
        ("queue",),
        {},
    ),
    (
        "deliveries",
        Gauge,
        "s3q_queue_deliveries",
        ("Messages delivered since the queue opened, by priority."),
        ("queue", "priority"),
        {},
    ),
    (
        "noisy",
        Gauge,
        "s3q_queue_noisy_tenants",
        (
            "Tenants noisy now: their messages wait behind the others' (as SQS fair queues'"
            " ApproximateNumberOfNoisyGroups)."
        ),
        ("queue",),
        {},
    ),
    (
        "quiet",
        Gauge,
        "s3q_queue_quiet_messages",
        (
            "Messages of quiet tenants (and with no tenant), by state: visible, in_flight,"
            " delayed (as SQS fair queues' ApproximateNumberOfMessages...InQuietGroups)."
        ),
        ("queue", "state"),
        {},
    ),
    (
        "quiet_age",
        Gauge,
        "s3q_queue_quiet_oldest_age_seconds",
        ("Age of the oldest visible message of a quiet tenant (or with no tenant); 0 if none."),
        ("queue",),
        {},
    ),
    (
        "history",
        Gauge,
        "s3q_queue_history_objects",
        ("Objects garbage collection keeps only for history_retention (as of its last pass)."),
        ("queue",),
        {},
    ),
    (
        "retired",
        Gauge,
        "s3q_queue_retired_messages",
        ("Messages removed past the queue's retention since the queue was opened here."),
        ("queue",),
        {},
    ),
    (
        "classes",
        Gauge,
        "s3q_queue_tenant_deliveries",
        ("Messages delivered since the queue opened, to noisy tenants and to the others."),
        ("queue", "tenants"),
        {},
    ),
    (
        "batch",
        Gauge,
        "s3q_queue_ops_per_commit",
        ("Mean operations per commit (group commit)."),
        ("queue",),
        {},
    ),
    (
        "requests",
        Gauge,
        "s3q_queue_store_requests",
        (
            "Object-store requests since the queue opened, by kind (put, get, list, delete, all;"
            " failed: those that failed; retried: those sent again)."
        ),
        ("queue", "kind"),
        {},
    ),
    (
        "broker_requests",
        Gauge,
        "s3q_broker_store_requests",
        (
            "Object-store requests since the broker started, of every queue it led and of its own"
            " lease, by kind (put, get, list, delete, all, failed, retried)."
        ),
        ("kind",),
        {},
    ),
    (
        "spent",
        Gauge,
        "s3q_broker_store_dollars",
        (
            "What the broker's store requests cost since it started, at its prices (--put-price,"
            " --get-price; by default S3's list prices on an object store, nothing on a local"
            " directory). A month at the present rate: rate(s3q_broker_store_dollars[1h]) *"
            " 2592000."
        ),
        (),
        {},
    ),
    (
        "read_aheads",
        Gauge,
        "s3q_broker_read_aheads",
        (
            "Queues read while their leader's lease ran out, ahead of a takeover, since the"
            " broker started: started; taken (the takeover's open read on from it: only the log"
            " written since); dropped (the leader kept its lease, or the read failed)."
        ),
        ("outcome",),
        {},
    ),
    (
        "in_progress",
        Gauge,
        "s3q_broker_requests_in_progress",
        ("Native API requests being served (long polls included)."),
        (),
        {},
    ),
    (
        "subscriptions",
        Gauge,
        "s3q_broker_subscriptions",
        ("Subscriptions open: consumers the broker pushes messages to."),
        (),
        {},
    ),
)


class BrokerMetrics:
    """One registry of the broker's metrics."""

    depth: Gauge
    commits: Gauge
    waits: Gauge
    buffered: Gauge
    deliveries: Gauge
    noisy: Gauge
    quiet: Gauge
    quiet_age: Gauge
    history: Gauge
    retired: Gauge
    classes: Gauge
    batch: Gauge
    requests: Gauge
    broker_requests: Gauge
    spent: Gauge
    read_aheads: Gauge
    in_progress: Gauge
    subscriptions: Gauge

    def __init__(
        self, serves: Callable[[str], bool] = lambda name: True, prices: Prices = S3
    ) -> None:
        #: whether the broker serves a queue: only those are labelled
        self.serves = serves
        self.prices = prices  # what the store charges: for the spend reckoned
        self._shown: set[str] = set()  # queues whose figures the last scrape set
        self._priorities: dict[str, set[str]] = {}  # queue -> priorities with deliveries shown
        self.registry = CollectorRegistry()
        r = self.registry
        for attr, kind, name, doc, labels, options in SERIES:
            setattr(self, attr, kind(name, doc, labels, registry=r, **options))
        self.serving = 0  # native API requests being served: in_progress, read when scraped
        self.in_progress.set_function(lambda: self.serving)
        self.subscribed = 0  # subscriptions open: read when scraped
        self.subscriptions.set_function(lambda: self.subscribed)
        self.operations = Count(
            "s3q_broker_operations",
            "Requests answered, by queue, operation and outcome (ok or the error's class).",
            ("queue", "operation", "outcome"),
        )
        self.seconds = Spread(
            "s3q_broker_request_seconds",
            "Time to answer a request, durability included, by operation.",
            ("operation",),
        )
        self.commit_seconds = Spread(
            "s3q_queue_commit_seconds",
            "Time to make one log object durable (one group commit), by queue.",
            ("queue",),
            (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
        )
        self.commit_ops = Spread(
            "s3q_queue_commit_operations",
            "Operations per group commit, by queue.",
            ("queue",),
            (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 10000),
        )
        self.refusals = Count(
            "s3q_broker_refusals",
            "Calls refused for their credentials or grants, by reason (no-credential, "
            "bad-credential, unknown, denied, not-granted) and principal (empty: not known).",
            ("reason", "principal"),
        )
        # (updated by every request and commit: plain counts, made into series when scraped)
        series: list[Count | Spread] = [self.operations, self.seconds, self.refusals]
        r.register(Tallies([*series, self.commit_seconds, self.commit_ops]))
        self.tally = RequestTally()  # for the summary line (s3q.broker.request_log)
        self.commit_latency, self.spend_rate = LatencyWindow(), SpendRate()  # for the dashboard

    def observe(self, queue: str | None, operation: str, outcome: str, seconds: float) -> None:
        """One request answered. Its queue is a label only if the broker serves that queue:
        a refused caller's made-up names add no series."""
        self.tally.outcomes[outcome] += 1
        label = queue if queue is not None and self.serves(queue) else ""
        self.operations.add((label, operation, outcome))
        self.seconds.observe((operation,), seconds)
        if outcome == "ok" and operation in COMMITTING:
            self.commit_latency.record(seconds)

    def commit(self, queue: str, seconds: float, ops: int) -> None:
        """One durable commit of ``queue``'s writer."""
        self.commit_seconds.observe((queue,), seconds)
        self.commit_ops.observe((queue,), ops)

    async def render(self, queues: QueueRegistry) -> bytes:
        """The exposition, with every open queue's figures read now (a queue closed since the
        last scrape leaves no figures behind)."""
        for name in self._shown - set(queues.names()):
            self._forget(name)
        self._shown = set(queues.names())
        for name in queues.names():
            queue = queues.local(name)
            if queue is None:
                continue
            stats = await queue.stats()
            for status in STATUSES:
                self.depth.labels(name, status).set(getattr(stats, status))
            self.commits.labels(name).set(stats.commits)
            self.waits.labels(name).set(stats.commit_waits)
            self.buffered.labels(name).set(stats.buffered_answers)
            shown = self._priorities.setdefault(name, set())
            for priority, count in stats.deliveries_by_priority.items():
                self.deliveries.labels(name, str(priority)).set(count)
                shown.add(str(priority))
            self.noisy.labels(name).set(stats.noisy_tenants)
            for state in QUIET_STATES:
                self.quiet.labels(name, state).set(getattr(stats, f"quiet_{state}"))
            self.quiet_age.labels(name).set(stats.quiet_oldest_age)
            self.history.labels(name).set(stats.history_objects)
            self.retired.labels(name).set(stats.retired)
            self.classes.labels(name, "noisy").set(stats.deliveries_noisy)
            self.classes.labels(name, "quiet").set(stats.deliveries_quiet)
            self.batch.labels(name).set(stats.mean_ops_per_commit)
            for kind, value in zip(REQUEST_KINDS, by_kind(queue.requests), strict=True):
                self.requests.labels(name, kind).set(value)
        spent = queues.requests()
        for kind, value in zip(REQUEST_KINDS, by_kind(spent), strict=True):
            self.broker_requests.labels(kind).set(value)
        self.spent.set(self.dollars(spent))
        for outcome, count in queues.read_aheads.items():
            self.read_aheads.labels(outcome).set(count)
        return generate_latest(self.registry)

    def dollars(self, counts: Counts) -> float:
        """What ``counts`` cost at the broker's prices."""
        return self.prices.dollars(counts.puts, counts.gets, counts.lists)

    def _forget(self, name: str) -> None:
        """Drop the series of queue ``name``, closed here."""
        self.commit_seconds.forget((name,))
        self.commit_ops.forget((name,))
        series: list[tuple[Any, tuple[str, ...]]] = [
            *((self.depth, (name, status)) for status in STATUSES),
            *((self.requests, (name, kind)) for kind in REQUEST_KINDS),
            *((self.deliveries, (name, p)) for p in self._priorities.pop(name, ())),
            *((self.quiet, (name, state)) for state in QUIET_STATES),
            *((self.classes, (name, kind)) for kind in ("noisy", "quiet")),
            *(
                (m, (name,))
                for m in (
                    self.commits,
                    self.waits,
                    self.buffered,
                    self.noisy,
                    self.quiet_age,
                    self.history,
                    self.retired,
                    self.batch,
                )
            ),
        ]
        for metric, labels in series:
            with contextlib.suppress(KeyError):  # never set
                metric.remove(*labels)
