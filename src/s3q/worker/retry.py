"""The errors a worker rides out (tries the call again after a pause) rather than stops on, and
the pause between two tries."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time

from ..errors import (
    OutcomeUnknown,
    QueueClosed,
    StoreError,
    StoreFull,
    TransientError,
    Unavailable,
    WriterFenced,
)

__all__ = ["BACKOFF", "BACKOFF_MAX", "Backoff", "rides_out"]

logger = logging.getLogger("s3q.worker")

BACKOFF = 0.1  # seconds before the second try, doubled each time, jittered
BACKOFF_MAX = 5.0


def rides_out(exc: BaseException, remote: bool) -> bool:
    """Whether a call of a worker that raised ``exc`` is tried again instead of stopping it.

    Any queue: the store did not confirm the write (``OutcomeUnknown``: trying a completion
    again is safe, its receipt says which lease it ends), a store fault that outlasted the
    retries, a full store, a queue moving between brokers (``Unavailable``). Through a broker
    (``remote``) also a broker that cannot be reached or failed mid-request, and a writer the
    broker lost (fenced, stopped, closed): the broker reopens the queue, or another broker takes
    it over, on a later call. What a retry cannot mend stops the worker: a bad argument, a wrong
    token, a queue that is not there, and on an embedded queue a writer that stopped or was
    fenced (reopen the queue) or a store that refused access."""
    if isinstance(exc, OutcomeUnknown | TransientError | StoreFull | Unavailable):
        return True
    if not remote:
        return False
    if isinstance(exc, StoreError | WriterFenced | QueueClosed):
        return True  # BrokerUnreachable and a transport failure are StoreErrors
    from ..wire.codec import BrokerError  # (only through a broker: the client loaded it)

    status = exc.status if isinstance(exc, BrokerError) else 0
    return status == 408 or status >= 500


class Backoff:
    """The pauses between the tries of one call that fails on errors a worker rides out: from
    ``BACKOFF`` doubling to ``BACKOFF_MAX``, jittered; each failure logged as a warning."""

    def __init__(self, what: str, queue: str) -> None:
        self.what, self.queue = what, queue
        self.tries = 0

    def reset(self) -> None:
        """The call succeeded: the next failure pauses briefly again."""
        self.tries = 0

    async def pause(
        self, exc: BaseException, wake: asyncio.Event | None = None, until: float | None = None
    ) -> None:
        """Log ``exc`` and wait before the next try, at most until monotonic time ``until``
        and no longer than it takes ``wake`` to be set."""
        delay = min(BACKOFF_MAX, BACKOFF * 2.0**self.tries) * random.uniform(0.5, 1.0)
        if until is not None:
            delay = max(0.0, min(delay, until - time.monotonic()))
        self.tries += 1
        logger.warning(
            "%s on %s failed (try %d), trying again in %.2f s: %s: %s",
            self.what,
            self.queue,
            self.tries,
            delay,
            type(exc).__name__,
            exc,
        )
        if wake is None:
            await asyncio.sleep(delay)
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await wake.wait()
