"""Message groups: a group's messages are delivered one at a time, in order (or, with
``per_group``, a head with the messages after it), the next one only when those before it
are finished."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Mapping

from ..config import MAX_PER_GROUP
from .records import LEASED, QUEUED, Record


class Groups:
    """The live messages of each group, in order; ``records`` are the index's, by id."""

    def __init__(self, records: Mapping[str, Record]) -> None:
        self.members: dict[str, deque[str]] = {}
        self._records = records

    def join(self, rec: Record) -> bool:
        """``rec`` joins the end of its group; whether it heads it."""
        assert rec.group is not None
        members = self.members.setdefault(rec.group, deque())
        members.append(rec.id)
        return len(members) == 1

    def follows(self, rec: Record) -> bool:
        """Whether ``rec`` waits behind an earlier message of its group."""
        return rec.group is not None and self.members[rec.group][0] != rec.id

    def leave(self, rec: Record) -> Record | None:
        """``rec`` is finished; the message that heads its group now in its place, if any."""
        assert rec.group is not None
        members = self.members[rec.group]
        was_head = members[0] == rec.id
        members.remove(rec.id)
        if not members:
            del self.members[rec.group]
        elif was_head:
            return self._records[members[0]]
        return None

    def followers(self, head: Record, now: float, count: int, max_attempts: int) -> list[Record]:
        """Up to ``count`` messages after ``head`` in its group, deliverable now, in order."""
        assert head.group is not None
        found = []
        for mid in itertools.islice(self.members[head.group], 1, 1 + count):
            rec = self._records[mid]
            if not (
                (rec.state == QUEUED and rec.visible_at <= now)
                or (rec.state == LEASED and rec.lease_until <= now and rec.attempts < max_attempts)
            ):
                break
            found.append(rec)
        return found

    def held_behind(self, head: Record, now: float) -> float | None:
        """When the latest lease on a message after ``head`` in its group ends, if one runs
        (messages delivered together with their head: at most MAX_PER_GROUP after it)."""
        assert head.group is not None
        ends = [
            rec.lease_until
            for mid in itertools.islice(self.members[head.group], 1, MAX_PER_GROUP)
            if (rec := self._records[mid]).state == LEASED and rec.lease_until > now
        ]
        return max(ends, default=None)

    def clear(self) -> None:
        self.members.clear()
