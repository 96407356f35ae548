"""Workers: run a handler over a queue's messages with concurrency, retries and clean shutdown.

A :class:`Worker` leases messages in batches, keeps a bounded buffer of them, hands each to the
handler (``concurrency`` at once), acknowledges successes in batches, fails the messages whose
handler raised (so the queue's retry with backoff, then dead-lettering, applies), and extends
the leases of messages still waiting or running so a slow handler keeps its message.
See docs/workers.md.

Modules: ``events`` (what ``on_event`` receives), ``handlers`` (``@handler``, loading by path),
``settings`` (their checks), ``runner`` (:class:`Worker`), ``session`` (one serving, made of
``prefetch``, ``leases``, ``acks``, ``threads`` and ``stop``), ``hooks`` (the stream a serving
reports to; ``prometheus`` subscribes metrics to it), ``launch`` (:func:`run_worker`).
"""

from .events import Completed, Dead, Event, Retry, WorkerStarted, WorkerStopped, WorkerStopping
from .handlers import (
    HandlerError,
    HandlerImportError,
    HandlerNotCallable,
    HandlerNotFound,
    HandlerOptions,
    InvalidHandlerPath,
    handler,
    handler_options,
    load_handler,
)
from .launch import run_worker
from .runner import Worker

__all__ = [
    "Completed",
    "Dead",
    "Event",
    "HandlerError",
    "HandlerImportError",
    "HandlerNotCallable",
    "HandlerNotFound",
    "HandlerOptions",
    "InvalidHandlerPath",
    "Retry",
    "Worker",
    "WorkerStarted",
    "WorkerStopped",
    "WorkerStopping",
    "handler",
    "handler_options",
    "load_handler",
    "run_worker",
]
