"""The exceptions s3q raises. Every one subclasses :class:`S3QError`."""

from __future__ import annotations


class S3QError(Exception):
    """Base class of every s3q error."""


class InvalidArgument(S3QError, ValueError):
    """An argument has the wrong type or value; nothing was changed."""


class InvalidConfig(InvalidArgument):
    """An option of ``open`` is unknown or out of range."""


class InvalidPriority(InvalidArgument):
    """A priority outside 0..255."""


class MessageTooLarge(InvalidArgument):
    """A payload larger than the queue's ``max_message_size``."""


class MessageNotFound(S3QError, KeyError):
    """No message with that id (never enqueued, purged, pruned after its completed retention,
    or retired past the queue's retention)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class QueueFull(S3QError):
    """The queue holds ``max_queue_depth`` messages already."""


class ReceiptExpired(S3QError):
    """The receipt is unknown, or its lease was superseded by a later delivery."""


class QueueLocked(S3QError):
    """Another live writer holds the queue."""

    def __init__(
        self, message: str, holder: str, expires_at: float | None, address: str | None = None
    ) -> None:
        super().__init__(message)
        self.holder = holder
        self.expires_at = expires_at
        self.address = address  # the holder's broker, when a broker holds it


class WriterFenced(S3QError):
    """This writer can no longer change the queue: another writer took it over (``holder``
    names it when known), or this writer lost its own lease. A call that raised it changed
    nothing; reopen the queue (or go through the broker that holds it)."""

    def __init__(self, message: str, holder: str | None = None) -> None:
        super().__init__(message)
        self.holder = holder


class StoreError(S3QError):
    """The object store is unreachable, refused access, or failed."""


class TransientError(StoreError):
    """A store fault worth trying again (a 5xx or 429 answer, a reset connection, a timeout, a
    truncated body) that outlasted the retries. A read that raised it changed nothing."""


class StoreFull(StoreError):
    """The store has no room for the write that carries this call (a local directory whose
    disk or quota is full: ENOSPC, EDQUOT). The call changed nothing, and the writer goes on:
    the same call succeeds once space is freed, without reopening the queue."""


class UnsupportedFormat(StoreError):
    """An object of the queue is in a format this version of s3q cannot read (written by a
    newer s3q). Nothing was read or changed: upgrade s3q to open the queue."""


class OutcomeUnknown(StoreError):
    """The store did not confirm the write that carries this call within ``commit_timeout``:
    it may yet apply, or may never. Retry with the same ``dedup_id`` (an enqueue) or the same
    receipt (a completion): either is safe whichever way the first attempt went."""


class QueueClosed(S3QError):
    """The queue object was closed."""


class Unavailable(S3QError):
    """The queue cannot be served right now (its writer is moving to another broker, or the
    broker is stopping). Nothing was done: the same call may be sent again, to any broker."""
