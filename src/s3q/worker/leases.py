"""The leases a worker holds: renewed while their messages wait or run, given back at the end."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from ..errors import ReceiptExpired
from ..message import Message
from ..surface import AsyncQueueSurface
from .hooks import Hooks
from .retry import rides_out
from .stop import Stop

__all__ = ["Held", "Leases"]

logger = logging.getLogger("s3q.worker")


class Held:
    """A lease this worker holds: the message and when the lease ends (monotonic clock)."""

    __slots__ = ("deadline", "msg")

    def __init__(self, msg: Message, deadline: float) -> None:
        self.msg = msg
        self.deadline = deadline


class Leases:
    """The leases held, by receipt: messages buffered, running, or awaiting their ack.
    ``visibility_timeout``: the lease taken and renewed. A renewal that fails on an error the
    worker rides out (:func:`.retry.rides_out`; ``remote``: through a broker) is tried again
    at the next tick, while the lease has a third or more of its time left."""

    def __init__(
        self,
        aq: AsyncQueueSurface,
        visibility_timeout: float,
        hooks: Hooks,
        stop: Stop,
        remote: bool = False,
    ) -> None:
        self._aq = aq
        self._remote = remote
        self._vt = visibility_timeout
        self._hooks = hooks
        self._stop = stop
        self._held: dict[str, Held] = {}

    def hold(self, msgs: Iterable[Message], deadline: float) -> None:
        """Record new leases, which end at ``deadline``."""
        held = self._held
        for msg in msgs:
            held[msg.receipt or ""] = Held(msg, deadline)

    def holds(self, msg: Message) -> bool:
        """Whether ``msg``'s lease is still held (not given back or lost meanwhile)."""
        return msg.receipt in self._held

    def drop(self, msgs: Iterable[Message]) -> None:
        """Stop keeping these leases (acknowledged, failed or given back)."""
        held = self._held
        for msg in msgs:
            held.pop(msg.receipt or "", None)

    def messages(self) -> list[Message]:
        """The messages whose leases are held."""
        return [held.msg for held in self._held.values()]

    async def keep(self) -> None:
        """Every third of the lease, renew the leases that are a third old or more."""
        vt = self._vt
        tick = vt / 3
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            due = [held for held in self._held.values() if held.deadline - now < vt - tick]
            if due:
                await asyncio.gather(*(self._extend(held) for held in due))

    async def _extend(self, held: Held) -> None:
        receipt = held.msg.receipt or ""
        if self._held.get(receipt) is not held:
            return  # acknowledged or given back since; checked in the step that extends
        started = time.monotonic()
        try:
            await self._aq.extend(held.msg, self._vt)
        except ReceiptExpired as exc:
            if self._held.get(receipt) is held:  # not acknowledged meanwhile: really lost
                del self._held[receipt]
                logger.warning("lease of message %s was lost: %s", held.msg.id, exc)
            return
        except Exception as exc:
            if not rides_out(exc, self._remote):
                self._stop.fatal(exc)
            else:
                logger.warning(
                    "renewing the lease of message %s failed, trying again in %.1f s: %s: %s",
                    held.msg.id,
                    self._vt / 3,
                    type(exc).__name__,
                    exc,
                )
            return
        held.deadline = started + self._vt
        self._hooks.extended()

    async def give_back(self, msgs: list[Message], started: bool = False) -> None:
        """Give leases back at once: the messages are deliverable again. Unstarted ones go back
        uncounted (``release``); ones whose handler ran out of grace count the attempt
        (``extend(msg, 0)``)."""
        if not msgs:
            return
        self.drop(msgs)  # before giving back: the keeper skips them
        aq = self._aq
        give_back = (lambda m: aq.extend(m, 0)) if started else aq.release
        results = await asyncio.gather(*(give_back(msg) for msg in msgs), return_exceptions=True)
        given = 0
        for msg, res in zip(msgs, results, strict=True):
            if isinstance(res, BaseException):
                logger.warning("could not give message %s back: %s", msg.id, res)
            else:
                given += 1
        self._hooks.released(given)
        logger.info("gave back %d unprocessed lease(s)", given)
