"""The prefetch buffer: leased messages waiting for a handler, and the task that fills it."""

from __future__ import annotations

import asyncio
import time

from ..errors import InvalidArgument, ReceiptExpired
from ..message import Message
from ..surface import AsyncQueueSurface
from .acks import Acks
from .hooks import Hooks
from .leases import Leases
from .retry import Backoff, rides_out
from .stop import Stop

__all__ = ["ADAPTIVE_PREFETCH_MAX", "Prefetch"]

ADAPTIVE_PREFETCH_MAX = 1000  # the most an adaptive buffer holds


class Prefetch:
    """Messages leased but not yet started, at most ``prefetch`` of them; None adapts the
    window between ``2 * concurrency`` and ADAPTIVE_PREFETCH_MAX to keep the handlers busy.
    Each dequeue carries the completions waiting in ``acks``, if any: one commit for both. A
    dequeue that fails on an error the worker rides out (:func:`.retry.rides_out`; ``remote``:
    through a broker) is sent again after a pause."""

    def __init__(
        self,
        aq: AsyncQueueSurface,
        leases: Leases,
        hooks: Hooks,
        stop: Stop,
        acks: Acks,
        *,
        prefetch: int | None,
        concurrency: int,
        visibility_timeout: float,
        poll_wait: float,
        remote: bool = False,
    ) -> None:
        self._aq = aq
        self._remote = remote
        self._leases = leases
        self._hooks = hooks
        self._stop = stop
        self._acks = acks
        self._ride = True  # whether dequeues carry the completions waiting
        self._concurrency = concurrency
        self._vt = visibility_timeout
        self._poll_wait = poll_wait
        low = 2 * concurrency
        self.window = prefetch or low
        self._range = (prefetch, prefetch) if prefetch else (low, max(low, ADAPTIVE_PREFETCH_MAX))
        self._buffer: asyncio.Queue[Message | None] = asyncio.Queue()
        self._space = asyncio.Event()  # the buffer fell to its low-water mark
        self.busy = 0  # messages taken whose handler has not ended

    async def fill(self) -> None:
        """Lease messages into the buffer until the stop, keeping it above half the window."""
        aq, buffer, vt, stop = self._aq, self._buffer, self._vt, self._stop
        backoff = Backoff("dequeue", stop.queue)
        while not stop.stopping:
            if buffer.qsize() > self.window // 2:
                self._space.clear()
                await self._space.wait()
                continue
            want = self.window - buffer.qsize()
            started = time.monotonic()
            riding = self._acks.ride() if self._ride else []
            try:
                msgs = await aq.dequeue(
                    want,
                    vt,
                    0.0 if riding else self._poll_wait,  # (acknowledged when it answers)
                    complete=[msg for msg, _, _ in riding],
                )
            except (ReceiptExpired, InvalidArgument) as exc:
                # nothing was done: they are acknowledged on their own instead (and by a
                # broker too old to take them with a dequeue, from now on always)
                self._ride = self._ride and not isinstance(exc, InvalidArgument)
                if not riding:
                    stop.fatal(exc)
                    return
                await self._acks.rode(riding, ReceiptExpired(str(exc)))
                continue
            except Exception as exc:
                await self._acks.rode(riding, exc)
                if not rides_out(exc, self._remote):
                    return
                await backoff.pause(exc, wake=stop.requested)
                continue
            backoff.reset()
            await self._acks.rode(riding, None)
            if not msgs:
                continue
            self._leases.hold(msgs, started + vt)
            self._hooks.fetched(len(msgs))
            if stop.stopping:
                await self._leases.give_back(msgs)
                return
            starved = buffer.empty() and self.busy < self._concurrency
            for msg in msgs:
                buffer.put_nowait(msg)
            self._adapt(starved and len(msgs) == want, buffer.qsize())

    def _adapt(self, starved: bool, buffered: int) -> None:
        """Grow the window while handlers starve for messages; shrink it while it stays full."""
        low, high = self._range
        if starved:
            self.window = min(high, self.window * 2)
        elif buffered >= self.window // 4:
            self.window = max(low, self.window // 2)

    async def take(self) -> Message | None:
        """The next message for a handler, counted busy until :meth:`done`; None: stop."""
        buffer = self._buffer
        while True:
            msg = await buffer.get()
            if msg is None:
                return None
            if buffer.qsize() <= self.window // 2:
                self._space.set()
            if self._leases.holds(msg):  # else given back meanwhile
                self.busy += 1
                return msg

    def done(self) -> None:
        """A handler of a taken message ended."""
        self.busy -= 1

    def close(self, takers: int) -> list[Message]:
        """Wake the filler (it returns after a dequeue in flight), empty the buffer and wake
        ``takers`` waiting in :meth:`take` with None; the messages that were not started."""
        self._space.set()
        buffered: list[Message] = []
        while not self._buffer.empty():
            msg = self._buffer.get_nowait()
            if msg is not None:
                buffered.append(msg)
        for _ in range(takers):
            self._buffer.put_nowait(None)
        return buffered
