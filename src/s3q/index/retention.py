"""Retention: what the index remembers of messages for a while after they are sent or finished.

Dedup ids for the dedup window, commit tokens (the last ``MAX_TOKENS``), completed records for
the completed retention, and completed messages with no record (``Completed``: their ids name
their places). ``prune`` forgets what is past its time and says how much it forgot.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import msgspec

from .completed import Completed
from .records import DONE, Record

MAX_TOKENS = 10_000  # commit tokens remembered (streaming sinks need only their last batches)


class Retention:
    """Dedup ids, commit tokens and finished messages, each forgotten in its time."""

    def __init__(self) -> None:
        self.dedup: dict[str, tuple[str, float]] = {}  # dedup_id -> (id, enqueued_at)
        self._dedup_order: deque[tuple[float, str]] = deque()
        self.tokens: dict[str, None] = {}  # commit tokens, oldest first
        self._finished: deque[tuple[float, str]] = deque()  # completed records, oldest first
        self.completed = Completed()  # completed messages with no record: those ids place

    def sent(self, dedup_id: str, mid: str, at: float) -> None:
        """Message ``mid`` was enqueued at ``at`` with ``dedup_id``."""
        self.dedup[dedup_id] = (mid, at)
        self._dedup_order.append((at, dedup_id))

    def dedup_hit(self, dedup_id: str, now: float, window: float) -> str | None:
        """The message first enqueued with ``dedup_id``, if that was within ``window``."""
        hit = self.dedup.get(dedup_id)
        return hit[0] if hit is not None and hit[1] + window > now else None

    def committed(self, token: str) -> None:
        """A commit carried ``token``."""
        self.tokens[token] = None
        if len(self.tokens) > MAX_TOKENS:
            del self.tokens[next(iter(self.tokens))]

    def finished(self, at: float, mid: str) -> None:
        """Record ``mid`` was completed at ``at`` (kept until its retention ends)."""
        self._finished.append((at, mid))

    def prunable(self, now: float, retention: float, dedup_window: float) -> bool:
        """Whether ``prune`` at ``now`` would forget anything."""
        return bool(
            (self._finished and self._finished[0][0] + retention <= now)
            or self.completed.prunable(now - retention)
            or (self._dedup_order and self._dedup_order[0][0] + dedup_window <= now)
        )

    def prune(
        self, messages: dict[str, Record], now: float, retention: float, dedup_window: float
    ) -> int:
        """Forget completed messages past ``retention`` (their records out of ``messages``) and
        dedup ids past the window; how many entries were forgotten."""
        pruned = 0
        finished = self._finished
        while finished and finished[0][0] + retention <= now:
            _, mid = finished.popleft()
            rec = messages.get(mid)
            if rec is not None and rec.state == DONE:
                del messages[mid]
                pruned += 1
        pruned += self.completed.prune(now - retention)
        order, dedup = self._dedup_order, self.dedup
        while order and order[0][0] + dedup_window <= now:
            at, did = order.popleft()
            hit = dedup.get(did)
            if hit is not None and hit[1] == at:
                del dedup[did]
                pruned += 1
        return pruned

    def dedup_snap(self) -> list[tuple[str, str, float]]:
        return [(d, mid, at) for d, (mid, at) in self.dedup.items()]

    def restore(
        self,
        dedup: Iterable[tuple[str, str, float]],
        tokens: Iterable[str],
        finished: list[tuple[float, str]],
        completed: msgspec.Raw,
    ) -> None:
        """As of a snapshot: ``finished`` the completed records, in any order; ``completed``
        the chunks as ``Completed.to_raw`` encodes them."""
        self.tokens = dict.fromkeys(tokens)
        self.completed = Completed.from_raw(completed)
        finished.sort()
        self._finished = deque(finished)
        for did, mid, at in sorted(dedup, key=lambda d: d[2]):
            self.sent(did, mid, at)
