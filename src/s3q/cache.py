"""Recently written log objects, kept in memory to serve deliveries without a read."""

from __future__ import annotations

from collections import OrderedDict


class ObjectCache:
    """Log objects by sequence number, as written, holding at most ``max_bytes`` of them
    (oldest evicted first): the payloads of recent enqueues, at a cost per object, not per
    message."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._objects: OrderedDict[int, bytes] = OrderedDict()

    def put(self, seq: int, data: bytes) -> None:
        if len(data) > self.max_bytes or seq in self._objects:
            return
        self._objects[seq] = data
        self.size += len(data)
        while self.size > self.max_bytes:
            self.size -= len(self._objects.popitem(last=False)[1])

    def get(self, seq: int) -> bytes | None:
        """Log object ``seq``, if it is here."""
        return self._objects.get(seq)

    def clear(self) -> None:
        self._objects.clear()
        self.size = 0
