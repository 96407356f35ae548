"""Prometheus metrics of a worker, each worker on a registry of its own.

Names (namespace ``s3q_worker``):

- ``s3q_worker_messages_handled_total{outcome="completed"|"retry"|"dead"}``: counter
- ``s3q_worker_handler_duration_seconds``: histogram of handler run time, any outcome
- ``s3q_worker_in_flight``: gauge of handlers running now
- ``s3q_worker_messages_fetched_total``: counter of messages leased from the queue
- ``s3q_worker_leases_extended_total``: counter of lease extensions
- ``s3q_worker_messages_released_total``: counter of leases given back unprocessed at shutdown
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

__all__ = ["DURATION_BUCKETS", "MetricsServer", "WorkerMetrics", "serve_metrics"]

DURATION_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)


class WorkerMetrics:
    """The metrics one worker updates, registered on ``registry`` (a new one by default)."""

    def __init__(
        self, registry: CollectorRegistry | None = None, *, namespace: str = "s3q_worker"
    ) -> None:
        self.registry = CollectorRegistry() if registry is None else registry
        reg, ns = self.registry, namespace
        self.handled = Counter(
            "messages_handled",
            "Messages handled, by outcome: completed, retry or dead.",
            ["outcome"],
            namespace=ns,
            registry=reg,
        )
        self.completed = self.handled.labels("completed")
        self.retried = self.handled.labels("retry")
        self.dead = self.handled.labels("dead")
        self.duration = Histogram(
            "handler_duration_seconds",
            "Seconds a handler ran, whatever its outcome.",
            namespace=ns,
            registry=reg,
            buckets=DURATION_BUCKETS,
        )
        self.in_flight = Gauge("in_flight", "Handlers running now.", namespace=ns, registry=reg)
        self.fetched = Counter(
            "messages_fetched", "Messages leased from the queue.", namespace=ns, registry=reg
        )
        self.extended = Counter(
            "leases_extended",
            "Leases extended while their message waited or its handler ran.",
            namespace=ns,
            registry=reg,
        )
        self.released = Counter(
            "messages_released",
            "Leases given back unprocessed when the worker stopped.",
            namespace=ns,
            registry=reg,
        )


@dataclass(frozen=True, slots=True)
class MetricsServer:
    """A running /metrics endpoint; ``close()`` stops it."""

    host: str
    port: int
    _server: WSGIServer
    _thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def serve_metrics(
    registry: CollectorRegistry | WorkerMetrics, port: int, host: str = "127.0.0.1"
) -> MetricsServer:
    """Serve ``registry`` at ``http://host:port/metrics`` from a daemon thread.

    ``port=0`` picks a free port; the returned server's ``port`` says which.
    """
    if isinstance(registry, WorkerMetrics):
        registry = registry.registry
    server, thread = start_http_server(port, addr=host, registry=registry)
    return MetricsServer(host, int(server.server_port), server, thread)
