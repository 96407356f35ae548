"""A byte-bounded cache of payloads, oldest evicted first."""

from __future__ import annotations

from collections import OrderedDict


class PayloadCache:
    """Payloads by message id, holding at most ``max_bytes`` of them."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._items: OrderedDict[str, bytes] = OrderedDict()  # oldest first; O(1) eviction

    def put(self, mid: str, payload: bytes) -> None:
        if len(payload) > self.max_bytes:
            return
        self._items[mid] = payload
        self.size += len(payload)
        while self.size > self.max_bytes:
            self.size -= len(self._items.popitem(last=False)[1])

    def put_many(self, ids: list[str], payloads: list[bytes], size: int) -> None:
        """``put`` each of ``payloads`` (``size`` bytes in all) under its id."""
        if size > self.max_bytes:  # keep the newest that fit
            keep, total = 0, 0
            for payload in reversed(payloads):
                if total + len(payload) > self.max_bytes:
                    break
                total += len(payload)
                keep += 1
            ids, payloads, size = ids[len(ids) - keep :], payloads[len(payloads) - keep :], total
        self._items.update(zip(ids, payloads, strict=True))
        self.size += size
        while self.size > self.max_bytes:
            self.size -= len(self._items.popitem(last=False)[1])

    def pop(self, mid: str) -> bytes | None:
        payload = self._items.pop(mid, None)
        if payload is not None:
            self.size -= len(payload)
        return payload

    def get(self, mid: str) -> bytes | None:
        return self._items.get(mid)

    def clear(self) -> None:
        self._items.clear()
        self.size = 0
