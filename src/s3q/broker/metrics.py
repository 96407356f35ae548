"""The broker's Prometheus metrics, served at ``/metrics``.

Operations are counted as they are answered; queue figures (depth by status, commits, store
requests) are read from every open queue when the endpoint is scraped.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from .registry import QueueRegistry

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
STATUSES = ("pending", "delayed", "processing", "retry", "completed", "dead")


class BrokerMetrics:
    """One registry of the broker's metrics."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.operations = Counter(
            "s3q_broker_operations",
            "Requests answered, by queue, operation and outcome (ok or the error's class).",
            ["queue", "operation", "outcome"],
            registry=r,
        )
        self.seconds = Histogram(
            "s3q_broker_request_seconds",
            "Time to answer a request, durability included, by operation.",
            ["operation"],
            registry=r,
        )
        self.depth = Gauge(
            "s3q_queue_messages", "Messages by status.", ["queue", "status"], registry=r
        )
        self.commits = Gauge(
            "s3q_queue_commits",
            "Log objects written since the queue opened.",
            ["queue"],
            registry=r,
        )
        self.batch = Gauge(
            "s3q_queue_ops_per_commit",
            "Mean operations per commit (group commit).",
            ["queue"],
            registry=r,
        )
        self.commit_seconds = Histogram(
            "s3q_queue_commit_seconds",
            "Time to make one log object durable (one group commit), by queue.",
            ["queue"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
            registry=r,
        )
        self.commit_ops = Histogram(
            "s3q_queue_commit_operations",
            "Operations per group commit, by queue.",
            ["queue"],
            buckets=(1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 10000),
            registry=r,
        )
        self.requests = Gauge(
            "s3q_queue_store_requests",
            "Object-store requests since the queue opened, by kind.",
            ["queue", "kind"],
            registry=r,
        )

    def observe(self, queue: str | None, operation: str, outcome: str, seconds: float) -> None:
        self.operations.labels(queue or "", operation, outcome).inc()
        self.seconds.labels(operation).observe(seconds)

    def commit(self, queue: str, seconds: float, ops: int) -> None:
        """One durable commit of ``queue``'s writer."""
        self.commit_seconds.labels(queue).observe(seconds)
        self.commit_ops.labels(queue).observe(ops)

    async def render(self, queues: QueueRegistry) -> bytes:
        """The exposition, with every open queue's figures read now."""
        for name in queues.names():
            queue = queues.local(name)
            if queue is None:
                continue
            stats = await queue.stats()
            for status in STATUSES:
                self.depth.labels(name, status).set(getattr(stats, status))
            self.commits.labels(name).set(stats.commits)
            self.batch.labels(name).set(stats.mean_ops_per_commit)
            for kind, value in (
                ("put", stats.store_puts),
                ("get", stats.store_gets),
                ("all", stats.store_requests),
            ):
                self.requests.labels(name, kind).set(value)
        return generate_latest(self.registry)
