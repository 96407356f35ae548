"""The last minutes of every open queue's throughput, kept by the broker so that the
dashboard's charts show them the moment the page opens, not only from then on."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...errors import S3QError
from ...message import QueueStats
from ..metrics import STATUSES
from ..registry import QueueRegistry

log = logging.getLogger("s3q.broker")

Sample = tuple[float, int, int]  # (unix time, total enqueued, finished)


def finished(stats: QueueStats) -> int:
    """The messages that left the live states: completed ones, purged ones and retired ones."""
    live: int = sum(getattr(stats, s) for s in STATUSES if s != "completed")
    return stats.total_enqueued - live


@dataclass
class _Ring:
    """One queue's samples, and its store writes when they were last looked at."""

    samples: deque[Sample]
    puts: int = -1
    moved: bool = True  # its writes moved at the last look: read its figures again


class History:
    """Every open queue's total enqueued and finished, sampled every ``step`` seconds by
    :meth:`run` and kept for ``span`` seconds: a ring of at most ``span / step + 1`` samples a
    queue, from which the page draws throughput the moment it opens.

    Off the request path, and cheap: those counters change only by a commit, so a queue whose
    store writes did not move since the last two looks keeps its figures without a ``stats()``
    read (an idle queue costs nothing). A queue is first sampled as it opens (:meth:`opened`),
    and forgotten at the next step once closed here.
    """

    def __init__(
        self,
        registry: QueueRegistry,
        span: float = 300.0,
        step: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.registry, self.span, self.step, self.clock = registry, span, step, clock
        self._rings: dict[str, _Ring] = {}
        self._looking: set[asyncio.Task[None]] = set()  # looks at queues just opened

    async def run(self) -> None:
        """Sample every ``step`` seconds, until cancelled."""
        while True:
            try:
                await self.sample()
            except Exception:  # a sampler that died would take the history with it: go on
                log.exception("sampling the dashboard's history failed")
            await asyncio.sleep(self.step)

    async def sample(self) -> None:
        """Take every open queue's counters now."""
        names = self.registry.names()
        for gone in self._rings.keys() - set(names):
            del self._rings[gone]
        for name in names:
            await self._look(name)

    def opened(self, name: str) -> None:
        """Queue ``name`` was just opened here: take its counters before its first calls
        move them, so traffic from its first second on is seen."""
        task = asyncio.create_task(self._look(name))
        self._looking.add(task)
        task.add_done_callback(self._looking.discard)

    async def _look(self, name: str) -> None:
        queue = self.registry.local(name)
        if queue is None:  # closed meanwhile
            return
        ring = self._rings.get(name)
        if ring is None:
            ring = self._rings[name] = _Ring(deque(maxlen=int(self.span / self.step) + 1))
        puts = queue.requests.puts
        if ring.samples and puts == ring.puts and not ring.moved:
            _, enqueued, done = ring.samples[-1]
        else:
            try:
                stats = await queue.stats()
            except S3QError:  # its writer stopped: no figures
                return
            enqueued, done = stats.total_enqueued, finished(stats)
            ring.moved, ring.puts = puts != ring.puts, puts
        ring.samples.append((self.clock(), enqueued, done))

    def summary(self, sees: Callable[[str], bool] | None = None) -> dict[str, Any]:
        """``{span, step, queues: {name: [[t, total_enqueued, finished], ...]}}``, oldest
        first, the samples of the last ``span`` seconds (of the queues ``sees`` lets through,
        if given)."""
        since = self.clock() - self.span
        return {
            "span": self.span,
            "step": self.step,
            "queues": {
                name: [list(s) for s in ring.samples if s[0] >= since]
                for name, ring in self._rings.items()
                if sees is None or sees(name)
            },
        }
