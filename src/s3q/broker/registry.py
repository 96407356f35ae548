"""The queues a broker serves: led here (opened on first use, one writer each) or forwarded.

The registry is the broker's one place to find a queue by name: it keeps the queues it serves
(those it leads, those forwarded to their leaders, and the partitioned ones served whole),
opens, sweeps, evicts and closes them, and keeps the ledger of their store requests. Which
broker leads a queue, and when to take one over, it leaves to its :class:`.Leadership`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..api import AsyncQueue, open_log
from ..config import QueueConfig
from ..errors import InvalidArgument, QueueLocked, Unavailable
from ..lease import opened_once
from ..partitions import placement
from ..partitions.queue import PartitionedQueue
from ..store import STORE_OPTIONS, open_store, queue_url
from ..store.base import Counts
from ..wire.codec import QueueNotFound, check_name
from .forward import ForwardedQueue, Peers
from .leadership import Leadership
from .lease import BrokerLease
from .limits import DEFAULT_IDLE_CLOSE
from .readahead import OUTCOMES, ReadAheads

DEFAULT_LEASE_TTL = QueueConfig().lease_ttl


def _log_url(store: str, name: str) -> str:
    """The URL of the log named ``name`` (``NAME@i``: partition ``i`` of queue ``NAME``)."""
    base, index = placement.split_name(name)
    if placement.SEPARATOR in base:
        raise InvalidArgument(f"no partition {name!r}: partitions number from 0 to 63")
    return placement.url_of(queue_url(store, base), index or 0)


@functools.lru_cache(maxsize=4096)
def _log_name(store: str, name: str) -> str:
    """The log a call naming ``name`` reaches (InvalidArgument for a bad name): worked out once
    per name, since a broker's calls name the same few queues over and over."""
    check_name(name)
    _log_url(store, name)
    return placement.log_name(name)


log = logging.getLogger("s3q.broker")

#: how long (in leases) a queue read ahead of its takeover is kept for an open to take: the
#: leader's lease runs at most one from when the leader is found away
READ_AHEAD_KEEP = 2.0


class QueueRegistry:
    """Every queue of ``store`` the broker serves, as ``<store>/<name>``.

    A queue this broker leads is one :class:`~s3q.AsyncQueue`, opened with ``s3q.open_async`` in
    the server's event loop, so the operations of all clients of a queue share its group commits;
    on an object store their writer leases ride on the broker's one :class:`BrokerLease`.
    A queue another broker of the cluster leads (its writer lease names that broker's
    ``address``) is a :class:`~s3q.broker.forward.ForwardedQueue` to it, if that broker is
    among ``peers`` (see :class:`~s3q.broker.forward.Peers` for the default); ``token`` signs
    the calls forwarded. A forwarded queue sees the registry only as its
    :class:`~s3q.broker.forward.Cluster`; which broker leads a queue is found by its
    :class:`~s3q.broker.leadership.Leadership`. Must be used from the server's one loop.
    """

    def __init__(
        self,
        store: str,
        options: dict[str, Any] | None = None,
        *,
        address: str | None = None,
        token: str | None = None,
        peers: Iterable[str] | None = None,
        failover_timeout: float = 30.0,
        on_commit: Callable[[str, float, int], None] | None = None,
        idle_close: float = DEFAULT_IDLE_CLOSE,
    ) -> None:
        self.store = store
        self.idle_close = idle_close  # 0: never
        self.on_commit = on_commit  # (queue, seconds, operations) after each commit here
        self.on_open: Callable[[str], None] | None = None  # (queue) once opened here
        self.address: str | None = None
        self.options = dict(options or {})
        self.store_options = {k: v for k, v in self.options.items() if k in STORE_OPTIONS}
        self.lease = BrokerLease(
            store,
            self.store_options,
            ttl=self.lease_ttl,
            on_lost=self._lease_lost,
            clock=self.options.get("clock", time.time),
        )
        if address is not None:
            self.advertise(address)
        self.failover_timeout = failover_timeout
        self.peers = Peers(token, peers)
        self.leadership = Leadership(self, self.peers)
        self._queues: dict[str, AsyncQueue] = {}
        self._forwarded: dict[str, ForwardedQueue] = {}
        self._partitioned: dict[str, PartitionedQueue] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        self._closing_idle: set[str] = set()  # idle queues being closed
        self._spent = Counts()  # the requests of queues closed here, and of look-ups
        self._leaving: list[Counts] = []  # those of queues being closed
        self._used: dict[str, float] = {}  # queue -> loop time of its latest call
        self._sweeper: asyncio.Task[None] | None = None
        self._draining = asyncio.Event()
        self._closing = asyncio.Event()
        self._closed = False
        #: queues whose leader is away, read while its lease runs out (``readahead``)
        self._ahead = ReadAheads(
            self._url_of, self.store_options, READ_AHEAD_KEEP * self.lease_ttl, self._spent
        )

    def advertise(self, address: str) -> None:
        """Name this broker ``address`` in the writer leases of the queues it opens from now on,
        so the other brokers of the cluster forward to it."""
        self.address = address
        self.options["writer_address"] = address
        self.lease.address = address

    def brokers(self) -> list[str]:
        """The URLs of the brokers of the cluster, for clients to turn to when one cannot
        answer: this one's (as advertised), then its configured peers (``--peer``)."""
        return self.leadership.brokers()

    def names(self) -> list[str]:
        """The names of the queues this broker leads now (idle ones being closed included:
        they hold their lease until closed), sorted."""
        return sorted(self._queues.keys() | self._closing_idle)

    def serves(self, name: str) -> bool:
        """Whether queue ``name`` is open here or forwarded to its leader."""
        return name in self._queues or name in self._forwarded

    def local(self, name: str) -> AsyncQueue | None:
        """Queue ``name`` if this broker leads it."""
        return self._queues.get(placement.log_name(name))

    _now = staticmethod(time.monotonic)

    async def get(
        self, name: str, *, forwarded: bool = False, create: bool = True
    ) -> AsyncQueue | ForwardedQueue | PartitionedQueue:
        """The queue ``name`` (InvalidArgument for a bad name): opened here on first use, or
        forwarded to the broker that leads it; a queue of several partitions as one
        (``s3q.partitions``), each partition led here or forwarded to its leader.
        ``forwarded``: the call came from another broker, which believes this one leads the
        queue; Unavailable if it does not. Unless ``create``, QueueNotFound for a queue the
        store does not hold."""
        queue = await self.log(name, forwarded=forwarded, create=create)
        if placement.split_name(name)[1] is not None:
            return queue  # one partition, asked for by name
        count = queue.config.partitions if isinstance(queue, AsyncQueue) else queue.partitions
        if count == 1:
            return queue
        whole = self._partitioned.get(name)
        if whole is None or len(whole.partitions) != count:
            whole = self._partitioned[name] = await self._partition(name, count, queue)
            self.leadership.adopt(self._partitioned)  # (once)
        now = self._now()
        for index in range(1, count):  # in use: none of them is idle
            self._used[placement.name_of(name, index)] = now
        return whole

    async def whole(self, name: str) -> AsyncQueue | ForwardedQueue | PartitionedQueue:
        """Queue ``name`` as :meth:`get` finds it, never made anew (a forwarded queue that
        learns it leads the queue asks for its partitions this way)."""
        return await self.get(name, create=False)

    async def _partition(
        self, name: str, count: int, first: AsyncQueue | ForwardedQueue
    ) -> PartitionedQueue:
        """Queue ``name``'s ``count`` partitions as one queue (``first``: partition 0), each
        led where the leadership places it (``Leadership.place``: those falling here are
        opened here)."""
        leaders = await self.leadership.place(name, count, _leader(first, self.address))
        parts = [
            ForwardedQueue(self, placement.name_of(name, index), leader)
            for index, leader in enumerate(leaders)
        ]
        return PartitionedQueue(queue_url(self.store, name), parts)

    async def log(
        self, name: str, *, forwarded: bool = False, create: bool = True
    ) -> AsyncQueue | ForwardedQueue:
        """The one log named ``name`` (a queue, or a partition of one: ``NAME@i``), as
        :meth:`get` finds a queue, but never as its partitions."""
        log_name = _log_name(self.store, name)
        self._used[name] = self._used[log_name] = self._now()
        queue = self._queues.get(log_name)
        if queue is not None:
            return queue
        if not (create or forwarded or name in self._forwarded or await self.exists(name)):
            self._used.pop(name, None)
            raise QueueNotFound(f"no queue named {name!r}")
        if forwarded:
            try:
                return await self._open(name)
            except QueueLocked as exc:
                raise Unavailable(
                    f"queue {name} is led by {exc.address or exc.holder}, not by this broker"
                ) from None
        proxy = self._forwarded.get(name)
        if proxy is not None:
            return proxy
        loop = asyncio.get_running_loop()
        leader = await self.leader(name, loop.time() + self.failover_timeout)
        if isinstance(leader, str):
            proxy = self._forwarded.setdefault(name, ForwardedQueue(self, name, leader))
            return proxy
        return leader

    async def leader(self, name: str, deadline: float) -> AsyncQueue | str:
        """This broker's queue ``name``, or the address of the broker that leads it; waits for
        a leader that is down until ``deadline`` (loop time): ``Leadership.leader``."""
        return await self.leadership.leader(name, deadline)

    def _url_of(self, name: str) -> str:
        """The URL of the log named ``name`` (``NAME@i``: partition ``i`` of queue ``NAME``)."""
        return _log_url(self.store, name)

    async def exists(self, name: str) -> bool:
        """Whether the store holds queue ``name``: it was opened once (its writer lease is
        there). One GET; nothing is written."""
        store = open_store(self._url_of(name), self.store_options)
        try:
            return await opened_once(store)
        finally:
            await store.close()
            self._spent.add(store.counts)

    @property
    def draining(self) -> bool:
        """Whether the broker is shutting down: long polls end at once."""
        return self._draining.is_set()

    def drain(self) -> None:
        """The broker is shutting down: every long poll ends now with what is there (an empty
        answer), and later ones do not wait, so requests in flight finish within the grace
        period."""
        self._draining.set()
        for queue in self._queues.values():
            queue.stop_waiting()
        for whole in self._partitioned.values():
            whole.stop_waiting()

    async def pause(self, seconds: float) -> None:
        """Wait ``seconds``, or until the broker drains (a long poll of a queue not made yet)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._draining.wait(), seconds)

    async def _sweep(self) -> None:
        """Close the queues no call has used for ``idle_close`` seconds."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), min(30.0, self.idle_close / 4))
                return
            idle_since = self._now() - self.idle_close
            for name in [n for n in self._queues if self._used.get(n, 0.0) < idle_since]:
                # under its opening lock: a call meanwhile reopens it once it is closed
                async with self._opening.setdefault(name, asyncio.Lock()):
                    queue = self._queues.get(name)
                    if queue is None or self._used.get(name, 0.0) >= idle_since:
                        continue  # closed, or used again while this sweep went on
                    del self._queues[name]
                    self._used.pop(name, None)
                    self._closing_idle.add(name)  # still led here until its lease is given up
                    log.info("closing idle queue %s", queue.url)
                    try:
                        await self._shut(queue)
                    except Exception as exc:  # gone either way; the next call reopens it
                        log.warning("closing idle queue %s failed: %s", queue.url, exc)
                    finally:
                        self._closing_idle.discard(name)
            for name in [n for n in self._forwarded if self._used.get(n, 0.0) < idle_since]:
                del self._forwarded[name]
                self._used.pop(name, None)
            for name in [n for n in self._partitioned if self._used.get(n, 0.0) < idle_since]:
                del self._partitioned[name]

    @property
    def lease_ttl(self) -> float:
        """The writer lease length of the queues this broker opens."""
        return float(self.options.get("lease_ttl", DEFAULT_LEASE_TTL))

    async def take_over(self, name: str) -> AsyncQueue:
        """Open queue ``name`` here: QueueLocked while another writer's lease runs."""
        return await self._open(name)

    @property
    def read_aheads(self) -> dict[str, int]:
        """Queues read ahead of a takeover since the broker started, by outcome (``started``,
        ``taken`` by an open, ``dropped``)."""
        return {outcome: self._ahead.counts[outcome] for outcome in OUTCOMES}

    def read_ahead(self, name: str) -> None:
        """Queue ``name``'s leader is away: read the queue now, for an open here to read on
        from once the leader's lease has lapsed (``readahead``)."""
        name = placement.log_name(name)
        if name not in self._queues and not self._closed:
            self._ahead.start(name)

    def unreachable(self, address: str, error: Exception) -> None:
        """A broker did not serve a forwarded call: look for the queue's leader elsewhere (or
        wait for its lease to lapse) instead of going back to it for a while."""
        self.leadership.unreachable(address, error)

    async def _open(self, name: str) -> AsyncQueue:
        name = placement.log_name(name)
        queue = self._queues.get(name)
        if queue is not None:
            return queue
        if self._closed:
            raise Unavailable("the broker is shutting down")
        lock = self._opening.setdefault(name, asyncio.Lock())
        async with lock:
            queue = self._queues.get(name)
            if queue is None:
                if self._closed:
                    raise Unavailable("the broker is shutting down")
                url = self._url_of(name)
                broker_lease = await self.lease.current()
                since = await self._ahead.ready(name)
                try:
                    queue = await open_log(url, since, **self.options, broker_lease=broker_lease)
                except QueueLocked:
                    raise  # refused before reading: what was read ahead stays for the next try
                except BaseException:
                    self._ahead.done(name, taken=False)  # (read on from in part, perhaps)
                    raise
                self._ahead.done(name, taken=since is not None)
                if self._draining.is_set():
                    queue.stop_waiting()
                if self._sweeper is None and self.idle_close > 0:
                    self._sweeper = asyncio.create_task(self._sweep())
                if self.on_commit is not None:
                    queue.on_commit(functools.partial(self.on_commit, name))
                self._queues[name] = queue
                self._forwarded.pop(name, None)
                log.info("opened queue %s", url)
                if self.on_open is not None:
                    self.on_open(name)
        return queue

    async def _lease_lost(self) -> None:
        """The broker lease is gone: every queue led here is fenced; close them all (the next
        call reopens each on a new broker lease, or finds the broker that took it over)."""
        for name, queue in list(self._queues.items()):
            await self.evict(name, queue)

    async def evict_stopped(self, name: str | None) -> bool:
        """Evict queue ``name`` if it is open here and its writer stopped, and so each of its
        partitions open here (a call to the whole queue reaches them); whether one was."""
        if name is None:
            return False
        base, index = placement.split_name(name)
        stopped = [
            (log, queue)
            for log, queue in self._queues.items()
            if queue.stopped is not None
            and (log == placement.log_name(name) or (index is None and _partition_of(log, base)))
        ]
        for log, queue in stopped:
            await self.evict(log, queue)
        return bool(stopped)

    async def evict(self, name: str, queue: AsyncQueue) -> None:
        """Forget a queue whose writer stopped (fenced, or a failed commit): the next request
        reopens it from what is durable, or finds the broker that took it over."""
        if self._queues.get(name) is queue:
            del self._queues[name]
            log.warning("evicted queue %s after a writer failure", queue.url)
            with contextlib.suppress(Exception):
                await self._shut(queue)

    async def close_queue(self, name: str) -> None:
        """Close queue ``name`` if it is open here, and forget it (e.g. before deleting it)."""
        queue = self._queues.pop(placement.log_name(name), None)
        if queue is not None:
            await self._shut(queue)

    async def _shut(self, queue: AsyncQueue) -> None:
        """Close ``queue`` (no longer among the open ones), its requests kept in the ledger."""
        counts = queue.requests
        self._leaving.append(counts)
        try:
            await queue.close()
        finally:
            self._leaving.remove(counts)
            self._spent.add(counts)

    def requests(self) -> Counts:
        """Every store request this broker has made since it started, by kind: its queues'
        (open or closed since), its lease's, and its look-ups for queues."""
        total = Counts()
        for counts in (
            self._spent,
            *self._leaving,
            *(queue.requests for queue in self._queues.values()),
            self.lease.requests,
        ):
            total.add(counts)
        return total

    async def close(self) -> None:
        """Close every queue: pending commits finish and the writer leases are released."""
        self._closed = True
        self._closing.set()
        self._ahead.close()
        await self.leadership.close()  # no more adoptions: a queue adopted is closed below
        if self._sweeper is not None:
            await self._sweeper  # it ends between two sweeps: a queue it closes is closed
        queues, self._queues = list(self._queues.values()), {}
        results = await asyncio.gather(*(self._shut(q) for q in queues), return_exceptions=True)
        for queue, result in zip(queues, results, strict=True):
            if isinstance(result, BaseException):
                log.error("closing %s failed: %s", queue.url, result)
        self._forwarded.clear()
        self._partitioned.clear()
        await self.lease.close()
        await self.peers.close()


def _leader(queue: AsyncQueue | ForwardedQueue, here: str | None) -> str | None:
    """The address of the broker that leads ``queue`` (``here``: this one's, if it has one)."""
    if isinstance(queue, ForwardedQueue):
        return queue.leader
    return here


def _partition_of(log: str, name: str) -> bool:
    """Whether the log a broker keeps as ``log`` is a partition of queue ``name``."""
    base, index = placement.split_name(log)
    return index is not None and base == name
