"""The writer lease: who may write a queue, until when.

On a local directory it is an OS file lock held for the writer's lifetime. Elsewhere it is a small
object replaced by compare-and-swap and renewed in the background; a writer that finds it taken
by someone else has lost the queue. The lease keeps writers from stepping on each other; the log's
create-if-absent writes are what makes a stale writer harmless (see ``engine``).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import os
import socket
from collections.abc import Callable

import msgspec

from .errors import QueueLocked, WriterFenced
from .store import Conflict, LocalStore, Store

KEY = "writer.lease"
LOCK_KEY = "writer.lock"


class LeaseRecord(msgspec.Struct):
    """The content of the lease object."""

    holder: str  # who, for people: host, pid, address
    token: str  # which writer, for machines
    expires_at: float | None  # None: held for as long as the holding process lives
    address: str | None = None  # the holder's broker, where other brokers forward requests


def describe_holder(address: str | None = None) -> str:
    text = f"pid {os.getpid()} on {socket.gethostname()}"
    return f"{text} at {address}" if address else text


class WriterLease(abc.ABC):
    """Held by exactly one writer of a queue at a time."""

    renew_every: float | None = None  # seconds between renewals, None if it needs none
    store: Store

    @abc.abstractmethod
    async def acquire(self) -> None:
        """Take the lease or raise QueueLocked naming the live holder."""

    async def renew(self) -> None:  # noqa: B027 - only CAS leases need renewal
        """Prolong the lease; raise WriterFenced if it was lost."""

    async def ensure(self) -> None:  # noqa: B027 - only CAS leases can lapse
        """Before a commit: renew now if renewal is overdue, so a writer whose lease lapsed
        (a long pause, a stalled renewal) finds out before writing, not after."""

    @abc.abstractmethod
    async def release(self) -> None:
        """Give the lease up so the next writer need not wait for it to lapse."""

    async def holder_now(self) -> str | None:
        """Who the lease object names now (to tell a fenced writer who took over)."""
        current = await read_record(self.store)
        record = current[0] if current is not None else None
        return record.holder if record is not None else None


async def read_record(store: Store) -> tuple[LeaseRecord | None, str] | None:
    """The lease record of the queue in ``store`` (None if unreadable) and its version;
    None if there is none."""
    current = await store.get_versioned(KEY)
    if current is None:
        return None
    data, version = current
    try:
        return msgspec.json.decode(data, type=LeaseRecord), version
    except msgspec.DecodeError:
        return None, version


def writer_lease(
    store: Store,
    holder: str,
    token: str,
    ttl: float,
    clock: Callable[[], float],
    address: str | None = None,
) -> WriterLease:
    if isinstance(store.base, LocalStore):
        return FileLockLease(store.base, holder, token, address)
    return CasLease(store, holder, token, ttl, clock, address)


class FileLockLease(WriterLease):
    """An exclusive ``flock`` on ``writer.lock``; the holder is described in ``writer.lease``."""

    store: LocalStore

    def __init__(
        self, store: LocalStore, holder: str, token: str, address: str | None = None
    ) -> None:
        self.store, self.holder, self.token, self.address = store, holder, token, address
        self._fd: int | None = None

    async def acquire(self) -> None:
        fd = self.store.lock(LOCK_KEY)
        if fd is None:
            other = await self.store.get_versioned(KEY)
            who, address = "another process", None
            if other is not None:
                with contextlib.suppress(msgspec.DecodeError):
                    record = msgspec.json.decode(other[0], type=LeaseRecord)
                    who, address = record.holder, record.address
            raise QueueLocked(
                f"queue {self.store.url} is open in {who}; its lock lasts until that process "
                "closes the queue or exits",
                holder=who,
                expires_at=None,
                address=address,
            )
        self._fd = fd
        record = LeaseRecord(self.holder, self.token, None, self.address)
        await self.store.put(KEY, msgspec.json.encode(record))

    async def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


class CasLease(WriterLease):
    """A lease object replaced with If-Match, renewed every ``ttl / 3`` seconds.

    A write whose answer was lost may have applied: a compare-and-swap that then meets a
    ``Conflict`` reads the lease again and, when the record there carries this writer's token,
    adopts it as its own instead of concluding that another writer took over.
    """

    def __init__(
        self,
        store: Store,
        holder: str,
        token: str,
        ttl: float,
        clock: Callable[[], float],
        address: str | None = None,
    ) -> None:
        self.store, self.holder, self.token, self.ttl, self.clock = store, holder, token, ttl, clock
        self.address = address
        self.renew_every = ttl / 3
        self._version: str | None = None
        self._tried = False  # a write of ours may be in the lease object
        self._expires_at = 0.0  # as far as this writer knows
        self._renewing = asyncio.Lock()

    async def acquire(self) -> None:
        for _ in range(5):
            current = await read_record(self.store)
            version = None
            if current is not None:
                other, version = current
                now = self.clock()
                live = other is not None and (other.expires_at is None or other.expires_at > now)
                if other is not None and live and other.token != self.token:
                    left = (
                        ""
                        if other.expires_at is None
                        else f" for another {other.expires_at - now:.1f} s"
                    )
                    raise QueueLocked(
                        f"queue {self.store.url} is held by {other.holder}{left} "
                        "(until its lease lapses or it closes)",
                        holder=other.holder,
                        expires_at=other.expires_at,
                        address=other.address,
                    )
            expires_at = self.clock() + self.ttl
            self._tried = True
            try:
                self._version = await self.store.put_versioned(
                    KEY, self._record(expires_at), version
                )
                self._expires_at = expires_at
                return
            except Conflict:
                continue  # somebody wrote it meanwhile, perhaps our own lost attempt: look again
        raise QueueLocked(
            f"queue {self.store.url}: the writer lease keeps changing hands; try again",
            holder="unknown",
            expires_at=None,
        )

    def _overdue(self) -> bool:
        return self.clock() >= self._expires_at - 2 * self.ttl / 3

    async def ensure(self) -> None:
        if self._overdue():
            async with self._renewing:
                if self._overdue():  # not renewed by the renewal we waited for
                    await self._renew()

    async def renew(self) -> None:
        async with self._renewing:
            await self._renew()

    async def _renew(self) -> None:
        """Replace the lease object; callers hold ``_renewing``: two CAS writes at once
        would make this writer fence itself."""
        for _ in range(5):
            expires_at = self.clock() + self.ttl
            try:
                self._version = await self.store.put_versioned(
                    KEY, self._record(expires_at), self._version
                )
            except Conflict:
                current = await read_record(self.store)
                other = current[0] if current is not None else None
                if current is None or other is None or other.token != self.token:
                    raise self._fenced(other) from None
                self._version = current[1]  # our own write, whose answer was lost: again
                continue
            self._expires_at = expires_at
            return
        raise WriterFenced(
            f"queue {self.store.url}: the writer lease keeps changing under this writer",
        )

    def _fenced(self, other: LeaseRecord | None) -> WriterFenced:
        if other is None:
            return WriterFenced(
                f"queue {self.store.url}: this writer lost its own lease (the lease object "
                "was removed or overwritten); reopen the queue"
            )
        return WriterFenced(
            f"queue {self.store.url} was taken over by {other.holder}; this queue object can "
            "no longer change it",
            holder=other.holder,
        )

    async def release(self) -> None:
        """Mark the lease lapsed, if it is still this writer's; a lost answer is looked into
        rather than taken for a rival's write, so a failed ``open`` or ``close`` never leaves
        the queue locked by a writer that is gone."""
        async with self._renewing:
            if not self._tried:
                return
            record = msgspec.json.encode(LeaseRecord(self.holder, self.token, 0.0, self.address))
            version = self._version
            for _ in range(5):
                if version is None:
                    current = await read_record(self.store)
                    if current is None or current[0] is None or current[0].token != self.token:
                        break  # not ours (any more)
                    if current[0].expires_at == 0.0:
                        break  # released already: our lost answer
                    version = current[1]
                try:
                    await self.store.put_versioned(KEY, record, version)
                    break
                except Conflict:
                    version = None  # look again: perhaps our own attempt applied
            self._version, self._tried = None, False

    def _record(self, expires_at: float) -> bytes:
        return msgspec.json.encode(LeaseRecord(self.holder, self.token, expires_at, self.address))
