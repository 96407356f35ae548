"""The writer lease: who may write a queue, until when.

On a local directory it is an OS file lock held for the writer's lifetime. Elsewhere it is a small
object replaced by compare-and-swap and renewed in the background; a writer that finds it taken
by someone else has lost the queue. The lease keeps writers from stepping on each other; the log's
create-if-absent writes are what makes a stale writer harmless (see ``engine``).

A broker leads many queues on one lease of its own, kept in ``.brokers/`` beside them: each
queue's lease object then names the broker lease (``LeaseRecord.broker``) and runs while that one
runs, so an idle queue costs no requests; only the broker lease is renewed.
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
BROKERS = ".brokers"  # the folder, beside a broker's queues, of the brokers' own leases


class LeaseRecord(msgspec.Struct):
    """The content of the lease object."""

    holder: str  # who, for people: host, pid, address
    token: str  # which writer, for machines
    expires_at: float | None  # None: held for as long as the holding process lives
    address: str | None = None  # the holder's broker, where other brokers forward requests
    #: the broker lease (a key in BROKERS beside the queue) this queue's lease rides on: it runs
    #: while that one does, and its own ``expires_at`` is only the broker's when it was written
    broker: str | None = None


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

    def runs(self) -> bool:
        """Whether this writer holds the lease now, by its clock, as far as it knows without
        asking the store (a lock held by the process always runs)."""
        return True

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


async def read_record(store: Store, key: str = KEY) -> tuple[LeaseRecord | None, str] | None:
    """The lease record of the queue in ``store`` (None if unreadable) and its version;
    None if there is none. ``key``: another lease object of ``store``."""
    current = await store.get_versioned(key)
    if current is None:
        return None
    data, version = current
    try:
        return msgspec.json.decode(data, type=LeaseRecord), version
    except msgspec.DecodeError:
        return None, version


async def broker_expiry(store: Store, broker: str) -> float:
    """When the broker lease ``broker`` beside the queue in ``store`` runs out (0 if it is gone
    or unreadable: a broker that left its lease garbled holds nothing)."""
    brokers = store.beside(BROKERS)
    try:
        current = await read_record(brokers, broker)
    finally:
        await brokers.close()
    record = current[0] if current is not None else None
    if record is None or record.expires_at is None:
        return 0.0
    return record.expires_at


async def opened_once(store: Store) -> bool:
    """Whether the queue in ``store`` was ever opened: its writer lease object is there. One
    GET; nothing is written."""
    return await store.get_versioned(KEY) is not None


def writer_lease(
    store: Store,
    holder: str,
    token: str,
    ttl: float,
    clock: Callable[[], float],
    address: str | None = None,
    broker: CasLease | None = None,
) -> WriterLease:
    """The lease of a writer of the queue in ``store``: a file lock on a local directory, else
    a lease object, riding on ``broker``'s lease if given."""
    if isinstance(store.base, LocalStore):
        return FileLockLease(store.base, holder, token, address)
    return CasLease(store, holder, token, ttl, clock, address, broker=broker)


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

    Given ``broker`` (the lease of the broker leading the queue), it is written when the queue
    is opened and closed and never renewed: it runs while the broker's does. A broker lease
    renewed only after it had run out (``lapses``) may have let another broker take the queue
    meanwhile, so the next commit reads the queue's lease object first. ``key`` names the lease
    object in ``store``: ``writer.lease`` for a queue, the broker's id for a broker lease.
    """

    def __init__(
        self,
        store: Store,
        holder: str,
        token: str,
        ttl: float,
        clock: Callable[[], float],
        address: str | None = None,
        *,
        key: str = KEY,
        broker: CasLease | None = None,
    ) -> None:
        self.store, self.holder, self.token, self.ttl, self.clock = store, holder, token, ttl, clock
        self.address, self.key, self.broker = address, key, broker
        self.what = f"queue {store.url}" if key == KEY else f"broker lease {store.url}/{key}"
        self.renew_every = None if broker is not None else ttl / 3
        self.expires_at = 0.0  # as far as this writer knows
        self.lapses = 0  # renewals that came after the lease had run out
        self.lost: WriterFenced | None = None  # why this lease is gone for good
        self._version: str | None = None
        self._tried = False  # a write of ours may be in the lease object
        self._lapses_seen = 0  # of the broker lease, when this lease was last known to be ours
        self._renewing = asyncio.Lock()

    async def acquire(self) -> None:
        for _ in range(5):
            current = await read_record(self.store, self.key)
            version = None
            if current is not None:
                other, version = current
                if other is not None and other.token != self.token:
                    await self._refuse_if_live(other)
            if self.broker is not None:
                await self.broker.ensure()
                self._lapses_seen = self.broker.lapses
                expires_at = self.broker.expires_at
            else:
                expires_at = self.clock() + self.ttl
            self._tried = True
            try:
                self._version = await self.store.put_versioned(
                    self.key, self._record(expires_at), version
                )
                self.expires_at = expires_at
                return
            except Conflict:
                continue  # somebody wrote it meanwhile, perhaps our own lost attempt: look again
        raise QueueLocked(
            f"{self.what}: the writer lease keeps changing hands; try again",
            holder="unknown",
            expires_at=None,
        )

    async def _refuse_if_live(self, other: LeaseRecord) -> None:
        """QueueLocked if ``other``'s hold on the queue runs still."""
        if other.broker is None:
            expires_at = other.expires_at
        elif self.broker is not None and other.broker == self.broker.key:
            return  # a queue object of this very broker, gone (evicted, or its close failed)
        else:
            expires_at = await broker_expiry(self.store, other.broker)
        now = self.clock()
        if expires_at is not None and expires_at <= now:
            return
        left = "" if expires_at is None else f" for another {expires_at - now:.1f} s"
        raise QueueLocked(
            f"{self.what} is held by {other.holder}{left} (until its lease lapses or it closes)",
            holder=other.holder,
            expires_at=expires_at,
            address=other.address,
        )

    def runs(self) -> bool:
        if self.lost is not None:
            return False
        broker = self.broker
        if broker is None:
            return self.clock() < self.expires_at
        # a broker lease that lapsed, even if renewed since, may have let another writer in
        return broker.runs() and broker.lapses == self._lapses_seen

    def _overdue(self) -> bool:
        return self.clock() >= self.expires_at - 2 * self.ttl / 3

    async def ensure(self) -> None:
        if self.lost is not None:
            raise self.lost
        if self.broker is not None:
            await self.broker.ensure()
            if self.broker.lapses != self._lapses_seen:
                async with self._renewing:
                    await self._still_ours()
        elif self._overdue():
            async with self._renewing:
                if self._overdue():  # not renewed by the renewal we waited for
                    await self._renew()

    async def _still_ours(self) -> None:
        """After its broker's lease ran out: make sure no other writer took the queue."""
        assert self.broker is not None
        lapses = self.broker.lapses
        if lapses == self._lapses_seen:
            return  # looked into while we waited
        current = await read_record(self.store, self.key)
        other = current[0] if current is not None else None
        if other is None or other.token != self.token:
            self.lost = self._fenced(other)
            raise self.lost
        self._lapses_seen = lapses

    async def renew(self) -> None:
        if self.broker is not None:
            await self.ensure()  # the broker renews; a queue riding on it only checks
            return
        async with self._renewing:
            if self.lost is not None:
                raise self.lost
            await self._renew()

    async def _renew(self) -> None:
        """Replace the lease object; callers hold ``_renewing``: two CAS writes at once
        would make this writer fence itself."""
        for _ in range(5):
            expires_at = self.clock() + self.ttl
            try:
                self._version = await self.store.put_versioned(
                    self.key, self._record(expires_at), self._version
                )
            except Conflict:
                current = await read_record(self.store, self.key)
                other = current[0] if current is not None else None
                if current is None or other is None or other.token != self.token:
                    self.lost = self._fenced(other)
                    raise self.lost from None
                self._version = current[1]  # our own write, whose answer was lost: again
                continue
            if self.clock() >= self.expires_at:
                self.lapses += 1  # another writer may have seen it run out
            self.expires_at = expires_at
            return
        raise WriterFenced(f"{self.what}: the writer lease keeps changing under this writer")

    def _fenced(self, other: LeaseRecord | None) -> WriterFenced:
        if other is None:
            return WriterFenced(
                f"{self.what}: this writer lost its own lease (the lease object "
                "was removed or overwritten); reopen the queue"
            )
        return WriterFenced(
            f"{self.what} was taken over by {other.holder}; this queue object can "
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
                    current = await read_record(self.store, self.key)
                    if current is None or current[0] is None or current[0].token != self.token:
                        break  # not ours (any more)
                    if current[0].expires_at == 0.0:
                        break  # released already: our lost answer
                    version = current[1]
                try:
                    await self.store.put_versioned(self.key, record, version)
                    break
                except Conflict:
                    version = None  # look again: perhaps our own attempt applied
            self._version, self._tried = None, False

    def _record(self, expires_at: float) -> bytes:
        broker = self.broker.key if self.broker is not None else None
        record = LeaseRecord(self.holder, self.token, expires_at, self.address, broker)
        return msgspec.json.encode(record)
