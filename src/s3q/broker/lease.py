"""The broker's one lease, on which the leases of all the queues it leads ride.

On an object store a queue's writer lease would cost a PUT every ``lease_ttl / 3`` seconds,
idle or not. A broker instead keeps one lease object of its own, ``<store>/.brokers/<id>``, and
renews only that: each queue it opens names it in its writer lease (see :mod:`s3q.lease`), so an
idle queue costs no requests and the broker's idle cost does not grow with the queues it leads.
Fencing stays per queue, on the log. On a local directory queues hold file locks: no lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import S3QError, Unavailable, WriterFenced
from ..lease import BROKERS, CasLease, describe_holder, read_record
from ..store import Store, StoreKind, open_store, queue_url, store_kind
from ..store.base import Counts

log = logging.getLogger("s3q.broker")

#: a broker lease run out this long ago is deleted by the next broker to take one (a broker
#: killed leaves its lease object behind)
STALE_AFTER = 3600.0
SWEEP_AT_MOST = 100  # stale broker leases looked at per start


class BrokerLease:
    """The lease of the broker serving the queues of ``store``, taken when the first queue is
    opened (:meth:`current`) and renewed until :meth:`close`.

    A lease found lost (its object removed by another broker's sweep after this one stalled
    past ``STALE_AFTER``) is given up: ``on_lost`` is awaited (the queues riding on it are
    fenced and must be closed) and the next queue opened takes a new one.
    """

    def __init__(
        self,
        store: str,
        options: dict[str, Any],
        *,
        ttl: float,
        on_lost: Callable[[], Awaitable[None]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ttl, self.clock, self.on_lost = ttl, clock, on_lost
        self.address: str | None = None  # where this broker answers, named in the lease
        self._store: Store = open_store(queue_url(store, BROKERS), options)
        self.kind: StoreKind = store_kind(self._store)  # what the broker's store is
        self.local = self.kind == "directory"
        self._lease: CasLease | None = None
        self._taking = asyncio.Lock()
        self._stopping = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def requests(self) -> Counts:
        """The store requests of this broker's leases (taking, renewing, sweeping)."""
        return self._store.counts

    @property
    def held(self) -> CasLease | None:
        """The lease now held, if any."""
        lease = self._lease
        return lease if lease is not None and lease.lost is None else None

    async def current(self) -> CasLease | None:
        """The lease to open a queue on, taken now if none is held; None on a local
        directory. Unavailable once the broker is closing."""
        if self.local:
            return None
        held = self.held
        if held is not None:
            return held
        async with self._taking:
            held = self.held
            if held is not None:
                return held
            if self._closed:
                raise Unavailable("the broker is shutting down")
            token = secrets.token_hex(8)
            lease = CasLease(
                self._store,
                describe_holder(self.address),
                token,
                self.ttl,
                self.clock,
                self.address,
                key=token,
            )
            await lease.acquire()
            self._lease = lease
            log.info("took broker lease %s", lease.what)
            self._background(self._renew(lease))
            self._background(self._sweep(token))
            return lease

    def _background(self, work: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _renew(self, lease: CasLease) -> None:
        """Renew every ``ttl / 3`` seconds until closing; stopped between renewals, never in
        the middle of one."""
        every = self.ttl / 3
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), every)
                return
            try:
                await lease.renew()
            except WriterFenced as exc:
                log.error("lost %s: %s; its queues are closed", lease.what, exc)
                await self.on_lost()
                return
            except S3QError as exc:
                log.warning("renewing %s failed: %s", lease.what, exc)

    async def _sweep(self, own: str) -> None:
        """Delete the leases of brokers gone for ``STALE_AFTER``: what a killed broker left."""
        try:
            for key in (await self._store.keys(""))[:SWEEP_AT_MOST]:
                if key == own:
                    continue
                current = await read_record(self._store, key)
                if current is None:
                    continue
                record = current[0]
                expires_at = record.expires_at if record is not None else 0.0
                if expires_at is not None and expires_at < self.clock() - STALE_AFTER:
                    await self._store.delete(key)
                    log.info("deleted the stale broker lease %s/%s", self._store.url, key)
        except S3QError as exc:
            log.warning("could not sweep the stale broker leases of %s: %s", self._store.url, exc)

    async def close(self, timeout: float = 1.0) -> None:
        """Stop renewing and delete the lease object (the queues riding on it are closed by
        now): another broker may take them at once. A lease not deleted lapses by itself."""
        self._closed = True
        self._stopping.set()
        async with self._taking:
            tasks = list(self._tasks)
            lease, self._lease = self._lease, None
        try:
            async with asyncio.timeout(timeout):
                if tasks:
                    await asyncio.gather(*tasks, return_exceptions=True)
                if lease is not None and lease.lost is None:
                    await self._store.delete(lease.key)
        except (S3QError, TimeoutError) as exc:
            log.warning("could not give up %s (it lapses by itself): %r", self._store.url, exc)
        finally:
            for task in tasks:
                task.cancel()
            await self._store.close()
