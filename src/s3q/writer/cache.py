"""Recently written log objects, kept in memory to serve deliveries without a read."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

#: puts between two sweeps for objects no longer needed, at the least
SWEEP_EVERY = 16


class ObjectCache:
    """Log objects by sequence number, as written, holding at most ``max_bytes`` of them
    (oldest evicted first): the payloads of recent enqueues, at a cost per object, not per
    message.

    Objects no live message needs (``needed`` says so: every message in each finished) are
    swept out whatever room is left, so a queue whose consumers keep up holds what they have
    yet to read, not ``max_bytes`` of payloads no one reads again. A sweep looks at every
    object, once as many puts as the last sweep kept objects (at least ``SWEEP_EVERY``) have
    been made since: amortised O(1) a put.
    """

    def __init__(self, max_bytes: int, needed: Callable[[int], bool] = lambda seq: True) -> None:
        self.max_bytes = max_bytes
        self.needed = needed
        self.size = 0
        self._objects: OrderedDict[int, bytes] = OrderedDict()
        self._puts = 0  # since the last sweep
        self._kept = 0  # objects the last sweep kept

    def put(self, seq: int, data: bytes) -> None:
        if len(data) > self.max_bytes or seq in self._objects or not self.needed(seq):
            return
        objects = self._objects
        self._puts += 1
        if self._puts >= max(SWEEP_EVERY, self._kept):
            self._sweep()
        objects[seq] = data
        self.size += len(data)
        while self.size > self.max_bytes:
            self.size -= len(objects.popitem(last=False)[1])

    def _sweep(self) -> None:
        self._puts = 0
        objects = self._objects
        for seq in [seq for seq in objects if not self.needed(seq)]:
            self.size -= len(objects.pop(seq))
        self._kept = len(objects)

    def get(self, seq: int) -> bytes | None:
        """Log object ``seq``, if it is here."""
        return self._objects.get(seq)

    def clear(self) -> None:
        self._objects.clear()
        self.size = 0
