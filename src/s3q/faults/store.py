"""A store that fails like a network, on a seeded schedule.

Each request draws one fault (or none) from a :class:`FaultProfile`:

- ``delay``: it is answered late;
- ``before``: it fails before reaching the store (500, 503 SlowDown, a reset);
- ``after``: the store applies it, then the answer is lost (500, a reset, a timeout);
- ``hang``: it hangs for the client's timeout, then fails, applied or not (even odds);
- ``truncate``: a read whose body is cut short (the client sees a broken body).

Beside these, a store can be *partitioned*: for a while every request fails at once, while
another writer's store over the same objects works. Tests also *script* faults: the next
requests of one kind to keys with a given prefix meet a chosen fault. Faults are counted by
kind in ``injected``; each counts as a failed request of the wrapped store.
"""

from __future__ import annotations

import asyncio
import collections
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from ..store import Store, TransientError
from ..store.base import WrappingStore

T = TypeVar("T")

FAULTS = ("delay", "before", "after", "hang", "truncate")


@dataclass(frozen=True, slots=True)
class FaultProfile:
    """How often each fault strikes: probabilities per request, and partitions."""

    delay: float = 0.0
    max_delay: float = 0.05  # seconds, drawn uniformly
    before: float = 0.0  # 500 / 503 SlowDown / reset, not applied
    after: float = 0.0  # applied, answer lost
    hang: float = 0.0  # hung until the request timeout
    truncate: float = 0.0  # reads only: body cut short
    #: mean seconds between partitions (0: none), and the range of their lengths
    partition_every: float = 0.0
    partition_length: tuple[float, float] = (1.5, 10.0)

    def draw(self, rng: random.Random, read: bool) -> str | None:
        """The fault one request meets, if any."""
        x = rng.random()
        for name in FAULTS:
            p: float = getattr(self, name)
            if name == "truncate" and not read:
                continue
            if x < p:
                return name
            x -= p
        return None


#: The faults object stores were seen to produce, at realistic rates: about 1 % 5xx, 0.2 %
#: answers lost after applying, 2 % truncated reads, rare hung requests, a partition of
#: 1.5 to 10 s about every 40 s.
REALISTIC = FaultProfile(
    delay=0.02,
    before=0.01,
    after=0.002,
    hang=0.0005,
    truncate=0.02,
    partition_every=40.0,
)

#: Many times the realistic rates, without partitions: for short runs that must meet faults.
HARSH = FaultProfile(delay=0.05, before=0.05, after=0.02, hang=0.002, truncate=0.05)


class Partitions:
    """When a store is cut off: a seeded schedule, and cuts made by hand."""

    def __init__(self, profile: FaultProfile, rng: random.Random) -> None:
        self.profile = profile
        self.rng = rng
        self.until = 0.0  # monotonic time the current cut lasts until
        self.spans: list[tuple[float, float]] = []  # every cut: (start, end), monotonic
        self._next = self._after(time.monotonic())

    def _after(self, now: float) -> float:
        every = self.profile.partition_every
        return now + self.rng.expovariate(1 / every) if every else float("inf")

    def cut(self, seconds: float) -> None:
        """Cut the store off for ``seconds`` from now."""
        now = time.monotonic()
        self.until = max(self.until, now + seconds)
        self.spans.append((now, now + seconds))

    def down(self) -> bool:
        now = time.monotonic()
        if now >= self._next:
            self.cut(self.rng.uniform(*self.profile.partition_length))
            self._next = self._after(self.until)
        return now < self.until


class FaultyStore(WrappingStore):
    """``inner``, with faults drawn from ``profile`` by a generator seeded with ``seed``.

    ``timeout`` is how long a hung request hangs before it fails, as a client's request
    timeout would make it. Turn faults off and on with ``enabled``.
    """

    def __init__(
        self,
        inner: Store,
        profile: FaultProfile,
        seed: int = 0,
        timeout: float = 1.0,
    ) -> None:
        super().__init__(inner)
        self.profile = profile
        self.rng = random.Random(seed)
        self.timeout = timeout
        self.enabled = True
        self.partitions = Partitions(profile, self.rng)
        self.injected: collections.Counter[str] = collections.Counter()
        self._scripted: list[list[Any]] = []  # [fault, request, key prefix, times left]

    def script(self, fault: str, request: str, prefix: str = "", times: int = 1) -> None:
        """Make the next ``times`` requests named ``request`` (``put_new``, ``put``,
        ``get``, ``list``, ``delete``, ``put_versioned``, ``get_versioned``) to keys
        starting with ``prefix`` meet ``fault`` (one of FAULTS), whatever the profile."""
        if fault not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS}, got {fault!r}")
        self._scripted.append([fault, request, prefix, times])

    def _draw(self, what: str, read: bool) -> str | None:
        request, _, key = what.partition(" ")
        for entry in self._scripted:
            fault, wanted, prefix, left = entry
            if left > 0 and wanted == request and key.startswith(prefix):
                entry[3] = left - 1
                return str(fault)
        return self.profile.draw(self.rng, read)

    async def _faulty(self, what: str, call: Callable[[], Awaitable[T]], read: bool = False) -> T:
        if not self.enabled:
            return await call()
        if self.partitions.down():
            return self._fail("partition", f"{what}: connection refused (partitioned)")
        fault = self._draw(what, read)
        if fault is None:
            return await call()
        if fault == "delay":
            self.injected[fault] += 1
            await asyncio.sleep(self.rng.uniform(0, self.profile.max_delay))
            return await call()
        if fault == "before":
            text = self.rng.choice(("500 Internal Error", "503 SlowDown", "connection reset"))
            return self._fail(fault, f"{what}: {text} (injected, not applied)")
        if fault == "hang":
            applies = self.rng.random() < 0.5
            await asyncio.sleep(self.timeout)
            if applies:
                await call()
            return self._fail(fault, f"{what}: timed out after {self.timeout:g} s (injected)")
        if fault == "truncate":
            await call()
            return self._fail(fault, f"{what}: body cut short (injected)")
        await call()  # "after": applied, then the answer is lost
        text = self.rng.choice(("500 Internal Error", "connection reset", "timed out"))
        return self._fail(fault, f"{what}: {text} (injected, applied)")

    def _fail(self, fault: str, text: str) -> NoReturn:
        self.injected[fault] += 1
        self.counts.errors += 1
        raise TransientError(f"store {self.url}: {text}")

    async def put_new(self, key: str, data: bytes | bytearray) -> None:
        await self._faulty(f"put_new {key}", lambda: self.inner.put_new(key, data))

    async def put(self, key: str, data: bytes | bytearray) -> None:
        await self._faulty(f"put {key}", lambda: self.inner.put(key, data))

    async def get(self, key: str) -> bytes:
        return await self._faulty(f"get {key}", lambda: self.inner.get(key), read=True)

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        return await self._faulty(
            f"get {key}", lambda: self.inner.get_range(key, start, end), read=True
        )

    async def keys(self, prefix: str, after: str | None = None) -> list[str]:
        return await self._faulty(f"list {prefix}", lambda: self.inner.keys(prefix, after), True)

    async def usage(self) -> tuple[int, int]:
        return await self._faulty("list", self.inner.usage, read=True)

    async def delete(self, key: str) -> None:
        await self._faulty(f"delete {key}", lambda: self.inner.delete(key))

    async def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        return await self._faulty(
            f"get_versioned {key}", lambda: self.inner.get_versioned(key), read=True
        )

    async def put_versioned(self, key: str, data: bytes, version: str | None) -> str:
        return await self._faulty(
            f"put_versioned {key}", lambda: self.inner.put_versioned(key, data, version)
        )
