"""Dead letters: listing them, giving them another life (``redrive``), dropping them
(``discard``), and emptying the whole queue (``purge``)."""

from __future__ import annotations

import itertools

from ..errors import MessageNotFound
from ..log.ops import Discard, Purge, Redrive
from ..message import Message
from .core import Core
from .leasing import Leasing
from .payloads import Payloads, message
from .retirement import retire


class DeadLetters:
    """The dead letters of one writer's queue."""

    def __init__(self, core: Core, leasing: Leasing, payloads: Payloads) -> None:
        self.core = core
        self.leasing = leasing
        self.payloads = payloads

    async def listed(self, limit: int) -> list[Message]:
        """The first ``limit`` dead letters, with their payloads."""
        self.core.check()
        await self.leasing.sweep()
        recs = list(itertools.islice(self.core.state.iter_dead(), limit))
        payloads = await self.payloads.of(recs)
        return [message(rec, p) for rec, p in zip(recs, payloads, strict=True)]

    async def redrive(self, ids: list[str] | None) -> int:
        core = self.core
        core.check()
        await self.leasing.sweep()
        chosen = list(core.state.dead) if ids is None else self._dead(ids)
        if not chosen:
            return 0
        batch = core.commit.add(Redrive(chosen, core.clock()))
        core.notify()
        await core.commit.durable_after(batch)
        return len(chosen)

    async def discard(self, ids: list[str]) -> int:
        core = self.core
        core.check()
        await self.leasing.sweep()
        chosen = self._dead(ids)
        if not chosen:
            return 0
        await core.commit.durable_after(core.commit.add(Discard(chosen, core.clock())))
        return len(chosen)

    async def purge(self) -> int:
        core = self.core
        core.check()
        retire(core)  # (what is past the retention is not counted as purged)
        count = core.state.live + len(core.state.dead)
        batch = core.commit.add(Purge(core.clock()))
        core.cache.clear()
        await core.commit.durable_after(batch)
        return count

    def _dead(self, ids: list[str]) -> list[str]:
        """``ids`` once each, in their order; MessageNotFound unless each is a dead letter."""
        chosen = list(dict.fromkeys(ids))
        for mid in chosen:
            if mid not in self.core.state.dead:
                raise MessageNotFound(
                    f"message {mid!r} is not a dead letter of {self.core.store.url}"
                )
        return chosen
