"""Reading a queue ahead of its takeover.

A broker that finds a queue's leader away (its broker unreachable, or a forwarded call left
unanswered while the leader's lease goes unrenewed) waits for that lease to lapse before it
opens the queue, and an open reads the newest checkpoint and the log after it. That read needs
no lease: it starts as soon as the leader is found away, and once the lease has lapsed the
open reads on from it, with only the log objects the old leader wrote meanwhile
(``snapshot.load(since=...)``). A read no open takes within ``keep`` seconds (the leader was
only slow, and kept its lease) is dropped, and with it the memory of the queue's index.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from .. import snapshot
from ..store import open_store
from ..store.base import Counts

log = logging.getLogger("s3q.broker")

#: the reads counted: ``started``; ``taken`` by an open; ``dropped`` (unused, or failed)
OUTCOMES = ("started", "taken", "dropped")


class ReadAheads:
    """The queues being read ahead of a takeover, by name: each read in a task of its own,
    over a store of its own (``open_store(url_of(name), options)``), whose requests are added
    to ``spent`` once it is done. ``counts``: reads by outcome (``OUTCOMES``)."""

    def __init__(
        self, url_of: Callable[[str], str], options: dict[str, Any], keep: float, spent: Counts
    ) -> None:
        self._url_of = url_of
        self._options = options
        self._keep = keep
        self._spent = spent
        self._reads: dict[str, asyncio.Task[snapshot.Loaded]] = {}
        self._expiries: dict[str, asyncio.TimerHandle] = {}
        self.counts = collections.Counter[str]()

    def start(self, name: str) -> None:
        """Read queue ``name`` now, unless it is being read already."""
        if name in self._reads:
            return
        task = asyncio.create_task(self._read(name))
        task.add_done_callback(_retrieved)
        self._reads[name] = task
        loop = asyncio.get_running_loop()
        self._expiries[name] = loop.call_later(self._keep, self.done, name, False)
        self.counts["started"] += 1

    async def ready(self, name: str) -> snapshot.Loaded | None:
        """The index read ahead for queue ``name`` (awaited if still being read), for an open
        to read on from; None if there is none, or its read failed. It stays here until
        :meth:`done` (an open refused the lease has not used it)."""
        task = self._reads.get(name)
        if task is None:
            return None
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():  # dropped meanwhile (not this caller cancelled)
                return None
            raise
        except Exception as exc:  # the open reads it all itself
            log.info("reading queue %s ahead of its takeover failed: %s", name, exc)
            self.done(name, taken=False)
            return None

    def done(self, name: str, taken: bool) -> None:
        """Forget the read of queue ``name`` (stopped if still under way): ``taken`` by an
        open, which read on from it, or dropped."""
        task = self._reads.pop(name, None)
        expiry = self._expiries.pop(name, None)
        if expiry is not None:
            expiry.cancel()
        if task is not None:
            task.cancel()
            self.counts["taken" if taken else "dropped"] += 1

    def close(self) -> None:
        for name in list(self._reads):
            self.done(name, taken=False)

    async def _read(self, name: str) -> snapshot.Loaded:
        store = open_store(self._url_of(name), self._options)
        try:
            return await snapshot.load(store)
        finally:
            with contextlib.suppress(Exception):
                await store.close()
            self._spent.add(store.counts)


def _retrieved(task: asyncio.Task[snapshot.Loaded]) -> None:
    """(A read that failed and was dropped unawaited: its failure is not logged again.)"""
    if not task.cancelled():
        task.exception()
