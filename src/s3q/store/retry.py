"""Trying store requests again after transient faults.

Object stores fail like a network: a 500 or 503 SlowDown, a reset connection, a request that
hangs past the client's timeout, a body cut short. :class:`RetryingStore` wraps any store and
sends a request that failed that way again, with capped exponential backoff and full jitter,
until it succeeds, fails for good, or ``patience`` seconds have passed. Until the store has
answered once, patience is at most :data:`FIRST_PATIENCE`: a store that never answered is more
likely misconfigured (a wrong endpoint, a port nothing listens on) than briefly away.

Every request of the interface is safe to send twice: reads and deletes are idempotent, a plain
``put`` writes the same bytes again, and a create-if-absent or compare-and-swap write that
meets its own first attempt says so (``AlreadyExists`` / ``Conflict``) for the caller to tell
by content, as the :class:`~s3q.store.base.Store` contract requires.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from .base import Store, TransientError, WrappingStore

T = TypeVar("T")

logger = logging.getLogger("s3q")

#: Seconds of patience before the store has answered any request.
FIRST_PATIENCE = 2.0


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delays between attempts: ``first`` doubling up to ``cap``, each drawn uniformly below
    that bound (full jitter), so many writers do not retry in step."""

    first: float = 0.05
    cap: float = 1.0

    def delay(self, attempt: int) -> float:
        return random.uniform(0, min(self.cap, self.first * 2.0 ** min(attempt, 30)))


async def retrying(
    call: Callable[[], Awaitable[T]],
    patience: float,
    backoff: Backoff = Backoff(),
    on_retry: Callable[[TransientError], None] | None = None,
) -> T:
    """``call()`` again after each :class:`TransientError`, until it succeeds or fails
    otherwise, or ``patience`` seconds have passed (then the last fault is raised)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    attempt = 0
    while True:
        try:
            return await call()
        except TransientError as exc:
            pause = backoff.delay(attempt)
            if loop.time() + pause > deadline:
                raise
            if on_retry is not None:
                on_retry(exc)
            attempt += 1
            await asyncio.sleep(pause)


class RetryingStore(WrappingStore):
    """``inner`` with every request retried after transient faults for up to ``patience`` s."""

    def __init__(self, inner: Store, patience: float = 10.0, backoff: Backoff = Backoff()) -> None:
        super().__init__(inner)
        self.patience = patience
        self.backoff = backoff
        self._answered = False  # has the store answered a request yet?

    def _retry(self, call: Callable[[], Awaitable[T]]) -> Awaitable[T]:
        patience = self.patience if self._answered else min(self.patience, FIRST_PATIENCE)
        return retrying(lambda: self._noting_answers(call), patience, self.backoff, self._noted)

    async def _noting_answers(self, call: Callable[[], Awaitable[T]]) -> T:
        try:
            result = await call()
        except TransientError:
            raise
        except Exception:
            self._answered = True  # an answer, if not the one hoped for (e.g. NotFound)
            raise
        self._answered = True
        return result

    def _noted(self, exc: TransientError) -> None:
        self.counts.retries += 1
        logger.debug("retrying a request to %s after: %s", self.url, exc)

    async def put_new(self, key: str, data: bytes | bytearray) -> None:
        await self._retry(lambda: self.inner.put_new(key, data))

    async def put(self, key: str, data: bytes | bytearray) -> None:
        await self._retry(lambda: self.inner.put(key, data))

    async def get(self, key: str) -> bytes:
        return await self._retry(lambda: self.inner.get(key))

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        return await self._retry(lambda: self.inner.get_range(key, start, end))

    async def get_tail(self, key: str, size: int) -> bytes:
        return await self._retry(lambda: self.inner.get_tail(key, size))

    async def keys(self, prefix: str, after: str | None = None) -> list[str]:
        return await self._retry(lambda: self.inner.keys(prefix, after))

    async def usage(self) -> tuple[int, int]:
        return await self._retry(self.inner.usage)

    async def delete(self, key: str) -> None:
        await self._retry(lambda: self.inner.delete(key))

    async def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        return await self._retry(lambda: self.inner.get_versioned(key))

    async def put_versioned(self, key: str, data: bytes, version: str | None) -> str:
        return await self._retry(lambda: self.inner.put_versioned(key, data, version))
