"""The queue's surface, declared once: the coroutines every async queue object offers.

:class:`s3q.AsyncQueue` (embedded), :class:`s3q.client.AsyncRemoteQueue` (through a broker) and
the broker's :class:`~s3q.broker.forward.ForwardedQueue` (to the broker leading the queue) each
implement :class:`AsyncQueueSurface` (mypy checks each where it is defined), and code that works
with any of them (workers, ``s3q bench``, the SQS endpoint) is typed against it. The surface's
docstrings are the only ones of the queue's methods: :func:`documented` gives them to each
implementation and to the blocking twins (:class:`s3q.Queue`, :class:`s3q.client.RemoteQueue`).
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, TypeVar

from .config import Setting
from .log.staging import StagedObject
from .message import CompactionReport, Message, MessageStatus, QueueStats

Target = Message | str  # a delivered message or its receipt


class AsyncQueueSurface(Protocol):
    """What a queue offers, wherever it is served from. Its docstrings are the queue's: each
    class that implements it takes them (:func:`documented`), its blocking twins too."""

    @property
    def url(self) -> str:
        """Where the queue is: its store's URL, or its broker's and name."""

    async def enqueue(
        self,
        payload: bytes,
        priority: int = 0,
        delay: float = 0.0,
        dedup_id: str | None = None,
        group: str | None = None,
        attributes: dict[str, str] | None = None,
        *,
        durability: str | None = None,
        tenant: str | None = None,
    ) -> str:
        """Add a message; its id once it is durable (the first id on a dedup hit).
        ``durability``: "buffered" to be answered before then, "durable", or None (the
        queue's setting). ``tenant``: who it is for; while a tenant is noisy (holds much of
        what is in flight or of the processing time), other tenants' messages go first."""

    async def enqueue_batch(
        self, items: Iterable[bytes | dict[str, Any]], *, durability: str | None = None
    ) -> list[str]:
        """Add many messages in one commit: payloads, or dicts of ``enqueue``'s keywords
        (``durability`` as ``enqueue``'s, for the whole batch)."""

    async def enqueue_staged(
        self, objects: Iterable[StagedObject], token: str | None = None
    ) -> Sequence[str] | None:
        """Commit the messages of staged objects (``s3q.log.staging``) in one log object, all or
        none. With ``token``, a commit carrying a token seen before enqueues nothing and
        returns None (a replayed streaming batch); otherwise the ids, as ``enqueue_batch``.
        A partitioned queue commits each object in the partition it lies in (its key from the
        queue's URL: ``partitions/<i>/staged/…``), one commit per partition, all or none in
        each, ``token`` in each; None only if every partition had seen it."""

    async def dequeue(
        self,
        max_messages: int = 1,
        visibility_timeout: float | None = None,
        wait: float = 0.0,
        *,
        per_group: int = 1,
        complete: Iterable[Target] = (),
    ) -> list[Message]:
        """Lease up to ``max_messages``, waiting up to ``wait`` seconds for the first.
        ``per_group``: a group's messages delivered together, in order (1 to 10; 1: one at a
        time); while any of them is leased, the group's later messages wait. ``complete``:
        acknowledge these delivered messages first, as ``complete_batch`` (all or none), in
        the commit of this lease: a consumer settles its last batch with the call that takes
        the next, one request and one commit instead of two."""

    async def complete(self, target: Target) -> None:
        """Acknowledge a delivered message: it is done."""

    async def complete_batch(self, targets: Iterable[Target]) -> None:
        """Acknowledge many delivered messages in one commit (all or none)."""

    async def fail(self, target: Target, error: str | None = None) -> float | None:
        """Give a delivered message back: retried after a backoff, or dead if out of attempts.
        When it will be retried (unix seconds), or None if it is now dead."""

    async def release(self, targets: Target | Iterable[Target]) -> None:
        """Give delivered messages back unprocessed: visible at once, the delivery uncounted
        (for a consumer shutting down with messages it never started)."""

    async def extend(self, target: Target, seconds: float, *, revive: bool = False) -> None:
        """Make a lease end ``seconds`` from now (0: the message is visible again at once).
        ``revive``: also a lease that has run out, if nobody was delivered the message since
        (as SQS's ChangeMessageVisibility); otherwise that is ReceiptExpired."""

    async def status(self, id: str) -> MessageStatus:
        """Where message ``id`` stands; MessageNotFound if unknown or past retention."""

    async def stats(self) -> QueueStats:
        """Counts by status and the writer's commit figures."""

    async def peek(self, limit: int = 10) -> list[Message]:
        """The next ``limit`` messages a dequeue would deliver, without leasing them."""

    async def dead_letters(self, limit: int = 100) -> list[Message]:
        """Up to ``limit`` dead messages, oldest first, with their last error."""

    async def redrive(self, ids: Iterable[str] | None = None) -> int:
        """Move dead messages (all, or those named) back to pending; how many moved."""

    async def discard(self, ids: Iterable[str]) -> int:
        """Remove dead letters for good (e.g. once copied to another queue); how many.
        MessageNotFound, and nothing removed, if one of ``ids`` is not a dead letter."""

    async def configure(self, /, **settings: Any) -> dict[str, Setting]:
        """Change queue settings (those of ``s3q.config.PERSISTED``: ``max_attempts``,
        ``visibility_timeout``, ``max_message_size``, ``attributes``, …) of the open queue, in
        force at once and saved with it; the saved settings now in force (call it with no
        argument to read them)."""

    async def cleanup(self) -> int:
        """Forget completed messages past ``completed_retention``; how many were forgotten."""

    async def purge(self) -> int:
        """Remove every message not completed; how many were removed."""

    async def compact(self) -> CompactionReport:
        """Checkpoint now and collect garbage (both also happen on their own)."""

    async def close(self) -> None:
        """Let go of the queue: an embedded queue finishes its pending commits and gives up
        its writer lease; a queue served by a broker stays open there (close the client to
        drop its connections). Later calls raise QueueClosed; closing twice is fine. (A queue
        a broker forwards to the broker leading it is that one's to close: this does nothing.)"""


#: the names of the surface, whose docstrings every queue class takes
NAMES = tuple(
    name
    for name, member in vars(AsyncQueueSurface).items()
    if not name.startswith("_") and isinstance(member, property | types.FunctionType)
)

C = TypeVar("C", bound=type)


def documented(cls: C) -> C:
    """Class decorator: give the members of ``cls`` that are the surface's (its coroutines,
    their blocking twins, ``url``) the surface's docstrings, so that the queue is documented
    once, here. A member is a function, a property, or a descriptor holding its function as
    ``function`` (:class:`s3q.blocking.blocking`, whose function has the docstring of the
    coroutine it runs already). TypeError, at import, if ``cls`` lacks one of them, or one
    carries a docstring that differs from the surface's (delete it, or change the surface's)."""
    for name in NAMES:
        doc = getattr(AsyncQueueSurface, name).__doc__
        member = inspect.getattr_static(cls, name, None)
        if member is None:
            raise TypeError(f"{cls.__qualname__} lacks {name} of the queue's surface")
        function = member.fget if isinstance(member, property) else member
        function = getattr(function, "function", function)
        if function.__doc__ is None and name in vars(cls):
            function.__doc__ = doc
            if isinstance(member, property):
                setattr(cls, name, property(function, member.fset, member.fdel, doc))
        elif function.__doc__ != doc:
            raise TypeError(
                f"{cls.__qualname__}.{name} has a docstring of its own, not the surface's: "
                "delete it (s3q.surface.AsyncQueueSurface documents the queue)"
            )
    return cls
