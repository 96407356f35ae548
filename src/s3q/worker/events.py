"""The events a worker reports to its ``on_event`` hook: frozen dataclasses, the union ``Event``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from ..message import Message

__all__ = [
    "Completed",
    "Dead",
    "Event",
    "EventHook",
    "Retry",
    "WorkerStarted",
    "WorkerStopped",
    "WorkerStopping",
]


@dataclass(frozen=True, slots=True)
class WorkerStarted:
    """The worker is fetching messages."""

    queue: str
    concurrency: int
    prefetch: int | None  # None: adaptive
    visibility_timeout: float


@dataclass(frozen=True, slots=True)
class Completed:
    """A handler returned and the message's completion is durable."""

    id: str
    duration: float  # seconds the handler ran
    attempts: int  # deliveries, this one included
    result: Any  # what the handler returned
    message: Message = field(repr=False)


@dataclass(frozen=True, slots=True)
class Retry:
    """A handler raised; the message will be delivered again after a backoff."""

    id: str
    error: str
    attempts: int
    duration: float
    next_visible_at: float | None  # unix seconds when it is retried
    message: Message = field(repr=False)


@dataclass(frozen=True, slots=True)
class Dead:
    """A handler raised on the message's last attempt: it is now a dead letter."""

    id: str
    error: str
    attempts: int
    duration: float
    message: Message = field(repr=False)


@dataclass(frozen=True, slots=True)
class WorkerStopping:
    """A stop began: no more fetching; running handlers have ``grace`` seconds."""

    queue: str
    grace: float
    reason: str | None  # the error that stopped the worker, None on a stop request


@dataclass(frozen=True, slots=True)
class WorkerStopped:
    """The worker has stopped: acknowledgements flushed, unprocessed leases given back."""

    queue: str
    completed: int
    retried: int
    dead: int
    released: int  # leases given back unprocessed (prefetched, or handlers past the grace)
    error: str | None  # what stopped the worker, if it was not a stop request


Event: TypeAlias = WorkerStarted | Completed | Retry | Dead | WorkerStopping | WorkerStopped
EventHook: TypeAlias = Callable[[Event], object]
