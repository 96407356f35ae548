"""Where a consumer's messages come from: a broker's subscription (pushed, the broker holding
the prefetch), or long polls of ``dequeue`` (an embedded queue, or a broker that offers no
subscriptions). Each settles the leases it handed out: a subscription on its own channel while
it is open (the broker counts them against its prefetch), else with the queue's calls (a
lease outlives the channel that delivered it: a broker restarted keeps it, from its log).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Literal, Protocol

from ..client.subscriptions import AsyncSubscription
from ..errors import OutcomeUnknown
from ..message import Message
from ..surface import AsyncQueueSurface
from ..wire.codec import BrokerUnreachable

__all__ = ["LONG_POLL", "MOST_AT_ONCE", "Polled", "Pushed", "Settle", "Source"]

Settle = Literal["complete", "release", "fail", "extend"]

LONG_POLL = 20.0  # seconds a dequeue waits for messages (the most the broker allows)
MOST_AT_ONCE = 1000  # messages taken from a source at once


class Source(Protocol):
    """What a consumer's feed takes messages from and settles them with."""

    async def take(self, room: int) -> list[Message]:
        """Messages, up to ``room`` (a subscription: what was pushed), waiting for the first."""

    async def settle(
        self, op: Settle, receipts: list[str], error: str | None = None, seconds: float = 0.0
    ) -> None:
        """Settle leases this source handed out (``fail`` and ``extend``: one receipt)."""

    async def set_prefetch(self, prefetch: int) -> None:
        """Hold up to ``prefetch`` messages unsettled from now on."""

    async def drain(self) -> list[Message]:
        """What arrived and was not taken yet, without waiting (a subscription's pushes)."""

    async def close(self) -> None:
        """Stop; a subscription's broker gives back what it still holds."""


async def settled(
    queue: AsyncQueueSurface,
    op: Settle,
    receipts: list[str],
    error: str | None = None,
    seconds: float = 0.0,
) -> None:
    """``op`` on ``receipts`` with the queue's own calls."""
    if op == "complete":
        await queue.complete_batch(receipts)
    elif op == "release":
        await queue.release(receipts)
    elif op == "fail":
        await queue.fail(receipts[0], error)
    else:
        await queue.extend(receipts[0], seconds)


class Pushed:
    """A subscription to ``queue``, a broker's."""

    def __init__(self, subscription: AsyncSubscription, queue: AsyncQueueSurface) -> None:
        self.subscription = subscription
        self.queue = queue

    async def take(self, room: int) -> list[Message]:
        return await self.subscription.take(MOST_AT_ONCE, None)

    async def settle(
        self, op: Settle, receipts: list[str], error: str | None = None, seconds: float = 0.0
    ) -> None:
        sub = self.subscription
        if not sub.closed:
            try:
                if op == "complete":
                    await sub.complete_batch(receipts)
                elif op == "release":
                    await sub.release(receipts)
                elif op == "fail":
                    await sub.fail(receipts[0], error)
                else:
                    await sub.extend(receipts[0], seconds)
                return
            except (BrokerUnreachable, OutcomeUnknown):
                if not sub.closed:
                    raise
        await settled(self.queue, op, receipts, error, seconds)  # (the channel closed)

    async def set_prefetch(self, prefetch: int) -> None:
        if not self.subscription.closed:
            await self.subscription.set_prefetch(prefetch)

    async def drain(self) -> list[Message]:
        if self.subscription.closed:
            return []
        return await self.subscription.take(MOST_AT_ONCE, 0.0)

    async def close(self) -> None:
        await self.subscription.close()


class Polled:
    """Long polls of ``queue.dequeue``, leasing for ``visibility_timeout`` seconds; ``room``
    waits (``roomy``) while the feed holds its prefetch."""

    def __init__(
        self,
        queue: AsyncQueueSurface,
        visibility_timeout: float,
        roomy: Callable[[], Awaitable[None]],
    ) -> None:
        self.queue = queue
        self._vt = visibility_timeout
        self._roomy = roomy

    async def take(self, room: int) -> list[Message]:
        if room <= 0:
            await self._roomy()
            return []
        return await self.queue.dequeue(min(room, MOST_AT_ONCE), self._vt, wait=LONG_POLL)

    async def settle(
        self, op: Settle, receipts: list[str], error: str | None = None, seconds: float = 0.0
    ) -> None:
        await settled(self.queue, op, receipts, error, seconds)

    async def set_prefetch(self, prefetch: int) -> None:
        return None  # (the feed's room follows it)

    async def drain(self) -> list[Message]:
        return []

    async def close(self) -> None:
        await asyncio.sleep(0)
