"""s3q: a durable message queue whose whole state lives in object storage."""

from typing import TYPE_CHECKING, Any

from .api import AsyncQueue, Queue, open, open_async
from .config import QueueConfig
from .errors import (
    InvalidArgument,
    InvalidConfig,
    InvalidPriority,
    MessageNotFound,
    MessageTooLarge,
    OutcomeUnknown,
    QueueClosed,
    QueueFull,
    QueueLocked,
    ReceiptExpired,
    S3QError,
    StoreError,
    StoreFull,
    TransientError,
    Unavailable,
    UnsupportedFormat,
    WriterFenced,
)
from .message import CompactionReport, Message, MessageStatus, QueueStats
from .partitions.queue import PartitionedQueue

if TYPE_CHECKING:
    from .worker import Worker, handler

__version__ = "0.1.0"

__all__ = [
    "AsyncQueue",
    "CompactionReport",
    "InvalidArgument",
    "InvalidConfig",
    "InvalidPriority",
    "Message",
    "MessageNotFound",
    "MessageStatus",
    "MessageTooLarge",
    "OutcomeUnknown",
    "PartitionedQueue",
    "Queue",
    "QueueClosed",
    "QueueConfig",
    "QueueFull",
    "QueueLocked",
    "QueueStats",
    "ReceiptExpired",
    "S3QError",
    "StoreError",
    "StoreFull",
    "TransientError",
    "Unavailable",
    "UnsupportedFormat",
    "Worker",
    "WriterFenced",
    "handler",
    "open",
    "open_async",
]


def __getattr__(name: str) -> Any:
    """``s3q.Worker`` and ``s3q.handler``, imported on first use (``s3q.worker``)."""
    if name in ("Worker", "handler"):
        from . import worker

        return getattr(worker, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
