"""When the writer checkpoints, and writing the checkpoints (their encoding is ``checkpoint``).

A checkpoint is taken as a log object leaves for the store, when the index holds exactly the
log up to it, and is written once that object is durable. One is due when any of these holds:

* so many changes to the index since the last one (``QueueState.changes``: a record made or
  changed, a run of untouched messages added) that they reach ``max(checkpoint_ops, size / 4)``,
  where ``size`` is the index's in entries (``QueueState.size``), so encoding, which costs time
  and bytes in the size of the index, is amortised O(1) per change;
* so many log objects since the last one that replaying them would cost more than writing a
  checkpoint: replaying an object (a GET, mostly latency) is worth ``REPLAYED_OBJECT_BYTES``
  of checkpoint, and no fewer than ``size / 4`` objects (so a writer of one message per commit
  does not encode a large index every hundred commits: O(1) per change again), within
  ``CHECKPOINT_OBJECTS``, so recovery replays a bounded tail whatever the rate of commits;
* ``checkpoint_interval`` seconds since the newest checkpoint, whoever wrote it (a new leader
  does not restart that clock).

A writer knows when the checkpoints it wrote and the one it recovered from were taken; when an
older one found in the store was taken is read from its first bytes when collection asks
(:meth:`Checkpointer.taken_at`), so a new leader does not wait ``gc_grace`` from its own start
to collect what earlier leaders' checkpoints let go.

A checkpoint whose write failed (a full store) is due again ``RETRY_AFTER`` seconds later.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from ..errors import S3QError
from ..index import checkpoint
from ..index.state import QueueState
from ..store import AlreadyExists, Store

REPLAYED_OBJECT_BYTES = 64 * 1024
#: seconds before a checkpoint whose write failed is taken again
RETRY_AFTER = 5.0
#: log objects between checkpoints: at least (a small queue), at most (however large its index)
CHECKPOINT_OBJECTS = (100, 1_000)


class Checkpointer:
    """The checkpoint schedule of one writer, and the checkpoints it knows of."""

    def __init__(
        self,
        store: Store,
        token: str,
        clock: Callable[[], float],
        every_ops: int,
        every_seconds: float,
    ) -> None:
        self.store, self.token, self.clock = store, token, clock
        self.every_ops, self.every_seconds = every_ops, every_seconds
        self.known: dict[int, float] = {}  # checkpoint seq -> when written, as far as known
        self.changes_at = 0  # ``QueueState.changes`` when the last checkpoint was taken
        self.objects_since = 0  # log objects a reopen would replay
        self.last_at = 0.0  # when the newest checkpoint was written, by anyone
        self.last_bytes = 0  # the size of the last checkpoint this writer encoded
        self.not_before = 0.0  # no checkpoint is due before then (one failed to be written)
        self._before = (0, 0, 0.0)  # changes_at, objects_since, last_at before the last take

    async def taken_at(self, seq: int) -> float | None:
        """When checkpoint ``seq`` (one the store holds) was taken: as known, else read from its
        first bytes and known from then on; None if the store failed to answer (asked again
        next time). One whose first bytes say nothing of it counts as taken now: it is there
        now, so it was written by then."""
        at = self.known.get(seq)
        if at is not None:
            return at
        try:
            data = await self.store.get_range(checkpoint.key(seq), 0, checkpoint.HEAD_BYTES)
        except S3QError:  # gone (collected by a writer before us), or the store failed
            return None
        found = checkpoint.head(data)
        at = found[1] if found is not None and found[0] == seq else self.clock()
        self.known[seq] = at
        return at

    def recovered(
        self, state: QueueState, known: dict[int, float], log_started: float | None, replayed: int
    ) -> None:
        """What recovery found: the index, the checkpoints, when the log began, how much was
        replayed."""
        self.changes_at = state.changes
        self.known.update(known)
        self.last_at = max(
            known.values(), default=self.clock() if log_started is None else log_started
        )
        self.objects_since = replayed

    def long_replay(self) -> bool:
        """Whether the tail replayed since the last checkpoint is worth a checkpoint now."""
        return self.objects_since >= CHECKPOINT_OBJECTS[0]

    def behind(self, state: QueueState) -> bool:
        """Whether ``state`` changed since the last checkpoint."""
        return state.changes != self.changes_at

    def due(self, state: QueueState) -> bool:
        """Whether a checkpoint of ``state`` is due as the log object being filled leaves."""
        if self.clock() < self.not_before:
            return False
        ops = state.changes - self.changes_at
        least, most = CHECKPOINT_OBJECTS
        objects = min(most, max(least, self.last_bytes // REPLAYED_OBJECT_BYTES, state.size // 4))
        return (
            ops >= max(self.every_ops, state.size // 4)
            or self.objects_since >= objects
            or bool(ops and self.clock() - self.last_at >= self.every_seconds)
        )

    def leaving(self, state: QueueState) -> bool:
        """A log object leaves for the store: whether a checkpoint of ``state`` as of it is due
        (counting that object)."""
        self.objects_since += 1
        return self.due(state)

    def take(self, seq: int, state: QueueState) -> bytearray:
        """The encoded checkpoint of ``state``, which holds exactly the log up to ``seq``."""
        now = self.clock()
        self._before = (self.changes_at, self.objects_since, self.last_at)
        self.changes_at, self.objects_since, self.last_at = state.changes, 0, now
        data = checkpoint.encode(
            checkpoint.Checkpoint(seq, self.token, now, checkpoint.take(state))
        )
        self.last_bytes = len(data)
        return data

    def missed(self) -> None:
        """The checkpoint taken last was not written: it is due again, ``RETRY_AFTER``
        seconds from now (``behind`` meanwhile, so a close writes one)."""
        changes_at, objects_since, self.last_at = self._before
        self.changes_at = changes_at
        self.objects_since += objects_since
        self.not_before = self.clock() + RETRY_AFTER

    async def write(self, seq: int, data: bytearray, replace: bool = False) -> None:
        """Write checkpoint ``seq``; ``replace`` rewrites one already there (the same index,
        a shorter garbage list: what a collection just deleted)."""
        if replace:
            await self.store.put(checkpoint.key(seq), data)
        else:
            with contextlib.suppress(AlreadyExists):
                await self.store.put_new(checkpoint.key(seq), data)
        self.known.setdefault(seq, self.clock())
