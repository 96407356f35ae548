"""The queue's surface, declared once: the coroutines every async queue object offers.

:class:`s3q.AsyncQueue` (embedded), :class:`s3q.client.AsyncRemoteQueue` (through a broker) and
the broker's :class:`~s3q.broker.forward.ForwardedQueue` (to the broker leading the queue) each
implement :class:`AsyncQueueSurface`; mypy checks them against it (below), and code that works
with any of them (workers, ``s3q bench``, the SQS endpoint) is typed against it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .collector import CompactionReport
from .config import Setting
from .message import Message, MessageStatus, QueueStats
from .staging import StagedObject

Target = Message | str  # a delivered message or its receipt


class AsyncQueueSurface(Protocol):
    """What a queue offers, wherever it is served from."""

    @property
    def url(self) -> str: ...

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
    ) -> str: ...

    async def enqueue_batch(
        self, items: Iterable[bytes | dict[str, Any]], *, durability: str | None = None
    ) -> list[str]: ...

    async def enqueue_staged(
        self, objects: Iterable[StagedObject], token: str | None = None
    ) -> Sequence[str] | None: ...

    async def dequeue(
        self,
        max_messages: int = 1,
        visibility_timeout: float | None = None,
        wait: float = 0.0,
        *,
        per_group: int = 1,
    ) -> list[Message]: ...

    async def complete(self, target: Target) -> None: ...

    async def complete_batch(self, targets: Iterable[Target]) -> None: ...

    async def fail(self, target: Target, error: str | None = None) -> float | None: ...

    async def release(self, targets: Target | Iterable[Target]) -> None: ...

    async def extend(self, target: Target, seconds: float, *, revive: bool = False) -> None: ...

    async def status(self, id: str) -> MessageStatus: ...

    async def stats(self) -> QueueStats: ...

    async def peek(self, limit: int = 10) -> list[Message]: ...

    async def dead_letters(self, limit: int = 100) -> list[Message]: ...

    async def redrive(self, ids: Iterable[str] | None = None) -> int: ...

    async def discard(self, ids: Iterable[str]) -> int: ...

    async def configure(self, /, **settings: Any) -> dict[str, Setting]: ...

    async def cleanup(self) -> int: ...

    async def purge(self) -> int: ...

    async def compact(self) -> CompactionReport: ...

    async def close(self) -> None: ...


if TYPE_CHECKING:  # mypy checks that each queue class offers the whole surface
    from .api import AsyncQueue
    from .broker.forward import ForwardedQueue
    from .client import AsyncRemoteQueue

    def _implementations(
        embedded: AsyncQueue, remote: AsyncRemoteQueue, forwarded: ForwardedQueue
    ) -> list[AsyncQueueSurface]:
        return [embedded, remote, forwarded]
