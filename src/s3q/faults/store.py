"""A store that fails like a network or a full disk, on a seeded schedule (see
:mod:`s3q.faults.schedule` for the faults). Each injected failure counts as a failed request
of the wrapped store."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable
from typing import NoReturn, TypeVar

from ..errors import StoreFull
from ..store import Store, TransientError
from ..store.base import WrappingStore
from .schedule import FaultProfile, Partitions, Schedule

T = TypeVar("T")


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
        self.schedule = Schedule(profile, seed)
        self.timeout = timeout
        self.script = self.schedule.script

    @property
    def enabled(self) -> bool:
        return self.schedule.enabled

    @enabled.setter
    def enabled(self, on: bool) -> None:
        self.schedule.enabled = on

    @property
    def injected(self) -> collections.Counter[str]:
        return self.schedule.injected

    @property
    def partitions(self) -> Partitions:
        return self.schedule.partitions

    async def _faulty(self, what: str, call: Callable[[], Awaitable[T]], read: bool = False) -> T:
        request, _, key = what.partition(" ")
        fault = self.schedule.draw(request, key, read)
        if fault is None or (fault == "full" and request == "delete"):  # a delete frees space
            return await call()
        if fault == "partition":
            return self._fail(fault, f"{what}: connection refused (partitioned)")
        if fault == "delay":
            self.schedule.struck(fault)
            await asyncio.sleep(self.schedule.delay())
            return await call()
        if fault == "before":
            text = self.schedule.choose("500 Internal Error", "503 SlowDown", "connection reset")
            return self._fail(fault, f"{what}: {text} (injected, not applied)")
        if fault == "hang":
            applies = self.schedule.chance(0.5)
            await asyncio.sleep(self.timeout)
            if applies:
                await call()
            return self._fail(fault, f"{what}: timed out after {self.timeout:g} s (injected)")
        if fault == "full":
            self.schedule.struck(fault)
            self.counts.errors += 1
            raise StoreFull(f"store {self.url}: {what}: no space left on device (injected)")
        if fault == "truncate":
            await call()
            return self._fail(fault, f"{what}: body cut short (injected)")
        await call()  # "after": applied, then the answer is lost
        text = self.schedule.choose("500 Internal Error", "connection reset", "timed out")
        return self._fail(fault, f"{what}: {text} (injected, applied)")

    def _fail(self, fault: str, text: str) -> NoReturn:
        self.schedule.struck(fault)
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

    async def get_tail(self, key: str, size: int) -> bytes:
        return await self._faulty(f"get {key}", lambda: self.inner.get_tail(key, size), read=True)

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
