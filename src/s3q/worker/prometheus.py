"""Worker metrics as a subscriber to the hook stream: each hook updates a
:class:`~s3q.worker.metrics.WorkerMetrics` (the metrics
themselves are declared in ``s3q.worker.metrics``)."""

from __future__ import annotations

from collections.abc import Sequence

from .events import Dead, Retry
from .hooks import Done, Hooks
from .metrics import WorkerMetrics

__all__ = ["MetricsHooks"]


class MetricsHooks(Hooks):
    """Counts what a worker reports into ``metrics``."""

    def __init__(self, metrics: WorkerMetrics) -> None:
        self.metrics = metrics

    def fetched(self, count: int) -> None:
        self.metrics.fetched.inc(count)

    def handler_started(self) -> None:
        self.metrics.in_flight.inc()

    def handler_ended(self, duration: float) -> None:
        self.metrics.in_flight.dec()
        self.metrics.duration.observe(duration)

    def completed(self, done: Sequence[Done]) -> None:
        self.metrics.completed.inc(len(done))

    def failed(self, event: Retry | Dead) -> None:
        (self.metrics.dead if isinstance(event, Dead) else self.metrics.retried).inc()

    def extended(self) -> None:
        self.metrics.extended.inc()

    def released(self, count: int) -> None:
        self.metrics.released.inc(count)
