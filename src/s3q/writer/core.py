"""What the parts of one queue's writer share (``engine`` makes it and keeps it).

The store, the settings in force, the index, the group commit, the payload cache and the
history horizon (``horizon``); the check every operation starts with; the calls under way; the
wakeups of long polls; work left running in the background; and the writer's counts of what
it did (``Tally``). The parts beside the engine (``intake``, ``delivery``, ``reads``,
``dead_letters``, ``upkeep``, ``payloads``) each hold the one ``Core`` of their writer, so a
change of the index or of the settings (recovery, ``configure``, a pause) is seen by every part
at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from ..config import FAIR, QueueConfig
from ..errors import QueueClosed
from ..index.state import QueueState
from ..store import Store
from .cache import ObjectCache
from .commit import GroupCommit
from .history_retention import Horizon

logger = logging.getLogger("s3q")


@dataclass
class Tally:
    """What this writer did, for ``stats``."""

    buffered_answers: int = 0  # messages whose enqueue was answered before it was durable
    buffered_acks: int = 0  # completions answered before they were durable
    deliveries: dict[int, int] = field(default_factory=dict)  # priority -> messages delivered
    deliveries_noisy: int = 0  # of them, to noisy tenants (``tenants``)
    deliveries_quiet: int = 0  # and to the others
    retired: int = 0  # messages removed past the queue's retention (``retirement``)


class Core:
    """The shared state of one queue's writer."""

    def __init__(self, store: Store, config: QueueConfig, commit: GroupCommit, token: str) -> None:
        self.store = store
        self.config = config  # the settings in force: ``configure`` replaces it
        self.clock: Callable[[], float] = config.clock
        self.state = QueueState()  # recovery replaces it
        self.commit = commit
        self.token = token
        self.cache = ObjectCache(config.payload_cache_bytes, self._holds_live_payloads)
        self.closed = False
        self.tally = Tally()
        self.horizon = Horizon()  # how far history retention lets collection go
        self.staged_claims: set[str] = set()  # staged objects being committed: not orphans
        self.tasks: set[asyncio.Task[None]] = set()  # background work (``background``)
        self._changed: asyncio.Future[None] | None = None
        self._no_waits = False  # stop_waiting() was called
        self.calls = 0  # calls under way (``call_began``)
        self.idle = asyncio.Event()  # set while none is
        self.idle.set()
        self.unpaused = asyncio.Event()  # clear while the index is read back after a pause
        self.unpaused.set()

    def _holds_live_payloads(self, seq: int) -> bool:
        """Whether log object ``seq`` holds payloads of messages not finished."""
        return seq in self.state.payloads.refs

    def check(self) -> None:
        """Raise why this writer stopped or paused, or that it was closed, if any."""
        if (halted := self.commit.halted) is not None:
            raise halted
        if self.closed:
            raise QueueClosed(f"queue {self.store.url} is closed")

    async def call_began(self) -> None:
        """Count a call under way (until :meth:`call_ended`; a paused writer waits until none
        is); one that comes while the index is read back after a pause waits for that first,
        up to ``commit_timeout``. (A pair of calls, not a context manager: this runs on
        every call, and an ``asynccontextmanager`` costs a generator and two frames more.)"""
        if not self.unpaused.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.unpaused.wait(), self.config.commit_timeout)
        self.calls += 1
        self.idle.clear()

    def call_ended(self) -> None:
        """A call counted by :meth:`call_began` has ended."""
        self.calls -= 1
        if not self.calls:
            self.idle.set()

    @property
    def fair(self) -> bool:
        """Whether priorities share deliveries (``delivery="fair"``) rather than the highest
        going first."""
        return self.config.delivery == FAIR

    # -- waking consumers ------------------------------------------------------------------------

    @property
    def no_waits(self) -> bool:
        """Whether long polls are over (``stop_waiting``)."""
        return self._no_waits

    def stop_waiting(self) -> None:
        """Long polls end now with what is there, and later ones do not wait."""
        self._no_waits = True
        self.notify()

    def notify(self) -> None:
        """Something changed that a long poll may be waiting for."""
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)
        self._changed = None

    async def wait_change(self, timeout: float) -> None:
        """Until the next ``notify``, at most ``timeout`` seconds."""
        if self._changed is None:
            self._changed = asyncio.get_running_loop().create_future()
        await asyncio.wait([self._changed], timeout=timeout)

    # -- background work -------------------------------------------------------------------------

    def background(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` beside the writer; its failure is logged (``close`` waits for it)."""
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("background work on %s failed: %s", self.store.url, task.exception())
