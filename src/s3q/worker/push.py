"""A worker's queue through a broker's subscription: messages pushed instead of polled.

:class:`Pushed` stands for the broker's queue in the worker's parts (prefetch, acks, leases):
a "dequeue" takes what the broker pushed, and every settle travels on the subscription's
channel; any other call goes to the queue as before. A channel that breaks (the broker
restarted, say) is opened again by the next call; a broker that offers no subscriptions is
polled, as before them (:func:`subscribed`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from ..client.queues import AsyncRemoteQueue
from ..client.subscriptions import AsyncSubscription
from ..message import Message
from ..surface import Target
from ..wire.codec import BrokerUnreachable
from ..wire.subscriptions import SubscriptionsUnsupported

__all__ = ["Pushed", "subscribed"]

logger = logging.getLogger("s3q.worker")


async def subscribed(
    aq: AsyncRemoteQueue, visibility_timeout: float, window: int, concurrency: int
) -> Pushed | None:
    """``aq`` with its messages pushed (a subscription holding ``window + concurrency``
    unsettled: the prefetch buffer and the handlers); None if its broker offers none."""
    pushed = Pushed(aq, visibility_timeout, window + concurrency, concurrency)
    try:
        await pushed.channel()
    except SubscriptionsUnsupported as exc:
        logger.info("polling %s: %s", aq.url, exc)
        return None
    return pushed


class Pushed:
    """``aq`` as a worker uses it, its messages pushed on a subscription."""

    def __init__(
        self, aq: AsyncRemoteQueue, visibility_timeout: float, prefetch: int, concurrency: int
    ) -> None:
        self._aq = aq
        self._vt = visibility_timeout
        self._prefetch = prefetch
        self._concurrency = concurrency
        self.subscription: AsyncSubscription | None = None

    @property
    def url(self) -> str:
        return self._aq.url

    async def channel(self) -> AsyncSubscription:
        """The subscription, opened again if its channel broke (BrokerUnreachable if it
        cannot be now: the worker's calls ride that out)."""
        sub = self.subscription
        if sub is not None and sub.closed and isinstance(sub.error, BrokerUnreachable):
            await sub.close()
            sub = None
        if sub is None:
            sub = self._aq.subscribe(self._prefetch, self._vt)
            await sub.open()
            self.subscription = sub
        return sub

    async def dequeue(
        self,
        max_messages: int = 1,
        visibility_timeout: float | None = None,
        wait: float = 0.0,
        *,
        per_group: int = 1,
        complete: Iterable[Target] = (),
    ) -> list[Message]:
        """What the broker pushed, up to ``max_messages``, waiting up to ``wait`` seconds for
        the first; ``complete``'s completions are sent first. The subscription's prefetch
        grows with the worker's buffer."""
        sub = await self.channel()
        done = list(complete)
        if done:
            await sub.complete_batch(done)
        wanted = max_messages + self._concurrency
        if wanted > self._prefetch:
            self._prefetch = wanted
            await sub.set_prefetch(wanted)
        return await sub.take(max_messages, wait)

    async def complete(self, target: Target) -> None:
        await (await self.channel()).complete(target)

    async def complete_batch(self, targets: Iterable[Target]) -> None:
        await (await self.channel()).complete_batch(targets)

    async def fail(self, target: Target, error: str | None = None) -> float | None:
        return await (await self.channel()).fail(target, error)

    async def release(self, targets: Target | Iterable[Target]) -> None:
        await (await self.channel()).release(targets)

    async def extend(self, target: Target, seconds: float, *, revive: bool = False) -> None:
        await (await self.channel()).extend(target, seconds, revive=revive)

    async def close(self) -> None:
        """Close the subscription (its leases not settled go back); not the queue."""
        if self.subscription is not None:
            await self.subscription.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._aq, name)  # (status, stats: the queue's own)
