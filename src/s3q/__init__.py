"""s3q: a durable message queue whose whole state lives in object storage."""

from .api import AsyncQueue, Queue, open, open_async
from .collector import CompactionReport
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
    TransientError,
    Unavailable,
    UnsupportedFormat,
    WriterFenced,
)
from .message import Message, MessageStatus, QueueStats

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
    "Queue",
    "QueueClosed",
    "QueueConfig",
    "QueueFull",
    "QueueLocked",
    "QueueStats",
    "ReceiptExpired",
    "S3QError",
    "StoreError",
    "TransientError",
    "Unavailable",
    "UnsupportedFormat",
    "WriterFenced",
    "open",
    "open_async",
]
