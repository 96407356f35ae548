"""Running a handler by its path (``s3q worker module:function``): :func:`run_worker`."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import Any, TypeVar

from ..errors import InvalidArgument
from ..store import default_store, queue_url
from .events import EventHook
from .handlers import HandlerOptions, handler_options, load_handler
from .metrics import WorkerMetrics, serve_metrics
from .runner import Worker

__all__ = ["run_worker"]

logger = logging.getLogger("s3q.worker")

T = TypeVar("T")


def run_worker(
    target: str,
    *,
    queue_url: str | None = None,
    store: str | None = None,
    concurrency: int | None = None,
    prefetch: int | None = None,
    visibility_timeout: float | None = None,
    grace: float | None = None,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    on_event: EventHook | None = None,
    options: Mapping[str, Any] | None = None,
    push: bool = True,
) -> None:
    """Import ``target`` (``package.module:function``) and run it as a worker until signalled.

    The queue is ``queue_url``, else the name given to ``@handler`` under ``store`` or the
    default store (``$S3Q_STORE``, else ``./s3q-data``). Arguments left None take the
    decorator's values, then the :class:`Worker` defaults. ``metrics_port`` serves Prometheus
    metrics there. The current directory is importable, as when running ``python -m``.
    """
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    fn = load_handler(target)
    marked = handler_options(fn) or HandlerOptions("")
    url = queue_url or (_queue_url(marked.queue, store) if marked.queue else None)
    if url is None:
        raise InvalidArgument(
            f"handler {target!r} names no queue: pass a queue URL or decorate it with "
            "@s3q.worker.handler('queue-name')"
        )
    workers = _first(concurrency, marked.concurrency)
    seconds = _first(grace, marked.grace)
    metrics = WorkerMetrics() if metrics_port is not None else None
    worker = Worker(
        url,
        fn,
        concurrency=8 if workers is None else workers,
        prefetch=_first(prefetch, marked.prefetch),
        visibility_timeout=_first(visibility_timeout, marked.visibility_timeout),
        grace=30.0 if seconds is None else seconds,
        on_event=on_event,
        metrics=metrics,
        options={**marked.options, **(options or {})},
        push=push,
    )
    server = None
    if metrics is not None and metrics_port is not None:
        server = serve_metrics(metrics.registry, metrics_port, metrics_host)
        logger.info("metrics at %s", server.url)
    try:
        worker.run()
    finally:
        if server is not None:
            server.close()


def _first(*values: T | None) -> T | None:
    """The first value that is not None."""
    return next((v for v in values if v is not None), None)


def _queue_url(name: str, store: str | None) -> str:
    """A queue name under ``store`` (or the default store); a URL or absolute path stays."""
    if "://" in name or os.path.isabs(name):
        return name
    return queue_url(store or default_store(), name)
