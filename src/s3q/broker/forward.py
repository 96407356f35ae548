"""Queues another broker leads: calls are sent on to it, and follow the queue when it moves.

Brokers over one store form a cluster without a coordinator: the writer lease of a queue names
the broker that holds it (its ``writer_address``). A broker asked for a queue that another broker
leads answers through a :class:`ForwardedQueue`, which has the coroutines of
:class:`s3q.AsyncQueue` and sends each call to the leader over the native API. When the leader
cannot be reached, the call waits for its lease to lapse, for this broker (or another) to take
the queue over, and then goes to the new leader, all within ``failover_timeout``. A leader that
takes a call and then stops answering (paused, or cut off from the store) is watched through
its lease: once that lapses, this broker takes the queue over and the call ends in
``OutcomeUnknown``.

Only calls that certainly did nothing are sent again: those that could not connect, and those
the leader refused with ``Unavailable``. A call whose leader died after receiving it ends with
a ``StoreError``, as with an embedded queue whose commit failed: its outcome is unknown. The
exceptions are calls left in flight with a leader that lost its lease which may be made twice
(``_repeatable``): reads, an enqueue whose every message carries a dedup id, a dequeue that
completes nothing. They are made again with the new leader. The old one can commit nothing
more once the new one opened, and the new one holds every commit of the old: it answers the
ids the first enqueue made, or makes them, exactly once either way; a lease the first dequeue
made lapses after its visibility timeout, as one whose answer was lost.

A lease is only as trustworthy as the store, so calls go only to the configured peers
(:class:`Peers`), and carry a signature of themselves (:mod:`.peerauth`), never the token.

A forwarded queue sees the broker it belongs to through :class:`Cluster`, the few things it
needs of it (the queue registry is one): this module does not import the registry.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
import types
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    ParamSpec,
    Protocol,
    TypeVar,
    cast,
    overload,
)
from urllib.parse import urlsplit

from ..api import AsyncQueue
from ..client import AsyncClient, AsyncRemoteQueue
from ..errors import (
    InvalidConfig,
    OutcomeUnknown,
    QueueClosed,
    QueueLocked,
    StoreError,
    Unavailable,
    WriterFenced,
)
from ..message import Message
from ..partitions import placement
from ..partitions.partition import Paging
from ..surface import AsyncQueueSurface, Target, documented
from ..wire.answers import Answers, answers, heard, spread
from ..wire.codec import BrokerUnreachable
from ..wire.pages import Pages
from ..wire.peers import is_loopback, normalize
from . import peerauth

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")

#: a header on calls one broker forwards to another: the receiver must lead the queue itself
FORWARDED = "x-s3q-forwarded"
RETRY_PAUSE = 0.2  # seconds between two attempts to reach a queue's leader
LAPSED = 0.05  # seconds after a lease's end before looking again whether it lapsed
WARN_EVERY = 60.0  # seconds between two warnings about one address that is not a peer

log = logging.getLogger("s3q.broker")


class Peers:
    """The other brokers of the cluster calls may be forwarded to, one connection pool each.

    ``allowed``: their URLs (``s3q serve --peer``; compared normalised, see
    :func:`s3q.wire.peers.normalize`). None: without ``token``, the brokers on this machine
    (loopback addresses: a broker without tokens listens on loopback only); with one, none.
    An address a lease names that is not allowed is never sent anything. ``token``: the
    cluster's token, which signs each forwarded call (:mod:`.peerauth`) and is never sent.
    """

    def __init__(
        self, token: str | None, allowed: Iterable[str] | None = None, timeout: float = 30.0
    ) -> None:
        self.token, self.timeout = token, timeout
        self.allowed = None if allowed is None else frozenset(map(normalize, allowed))
        self._clients: dict[str, AsyncClient] = {}
        self._warned: dict[str, float] = {}  # address -> when it was last warned about

    def allows(self, address: str) -> bool:
        """Whether calls may be forwarded to the broker at ``address``."""
        try:
            url = normalize(address)
        except InvalidConfig:
            return False
        if self.allowed is not None:
            return url in self.allowed
        return self.token is None and is_loopback(urlsplit(url).hostname or "")

    def refuse(self, name: str, address: str) -> Unavailable:
        """The error of a call to queue ``name``, whose lease names ``address``, which is not
        allowed; logged as a warning (once a minute for each address)."""
        if self.allowed is not None:
            why = "it forwards only to the brokers given with --peer"
        elif self.token is None:
            why = "without --peer it forwards only to brokers on this machine"
        else:
            why = "a broker with tokens forwards only to the brokers given with --peer"
        message = (
            f"queue {name} is led by {address!r}, which is not a configured peer of this "
            f"broker ({why}): nothing was sent there"
        )
        now = time.monotonic()
        if now - self._warned.get(address, -WARN_EVERY) >= WARN_EVERY:
            if len(self._warned) >= 1000:  # addresses come from the store: keep a bound
                self._warned.clear()
            self._warned[address] = now
            log.warning("%s; if it is a broker of this cluster, add it: s3q serve --peer", message)
        return Unavailable(message)

    def queue(self, address: str, name: str) -> AsyncRemoteQueue:
        if not self.allows(address):
            raise self.refuse(name, address)
        client = self._clients.get(address)
        if client is None:
            sign = None if self.token is None else functools.partial(peerauth.sign, self.token)
            # no retries of its own: a ForwardedQueue decides, knowing about leases
            client = AsyncClient(
                address,
                None,
                self.timeout,
                retries=0,
                headers={FORWARDED: "1"},
                sign=sign,
                follow=False,  # to the leader only: the cluster's brokers are not its to try
            )
            self._clients[address] = client
        return client.queue(name)

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


class Cluster(Protocol):
    """What a :class:`ForwardedQueue` needs of the broker it belongs to (its queue registry)."""

    @property
    def peers(self) -> Peers:
        """The brokers calls may be forwarded to, and a connection to each."""

    @property
    def failover_timeout(self) -> float:
        """Seconds a call waits for another broker to take over a queue whose leader is away."""

    @property
    def lease_ttl(self) -> float:
        """The writer lease length: how long a leader that stopped answering keeps its queue."""

    def local(self, name: str) -> AsyncQueueSurface | None:
        """Queue ``name`` if this broker leads it."""

    async def leader(self, name: str, deadline: float) -> AsyncQueueSurface | str:
        """This broker's queue ``name``, or the address of the broker that leads it; waits for
        a leader that is down until ``deadline`` (loop time)."""

    async def take_over(self, name: str) -> AsyncQueueSurface:
        """Open queue ``name`` here: QueueLocked while another writer's lease runs."""

    def read_ahead(self, name: str) -> None:
        """Queue ``name``'s leader is away: read the queue now, for a takeover to read on
        from once the leader's lease has lapsed."""

    def unreachable(self, address: str, error: Exception) -> None:
        """The broker at ``address`` did not serve a forwarded call."""

    async def evict_stopped(self, name: str | None) -> bool:
        """Forget queue ``name`` if it is open here and its writer stopped (it was fenced)."""

    async def whole(self, name: str) -> AsyncQueueSurface:
        """Queue ``name`` as this broker serves it whole (its partitions as one queue)."""


def _reusable(value: object) -> object:
    """``value``, or a list of it if it is an iterable that may be used up (an iterator, a
    generator): a forwarded call may be sent again after a failover."""
    if isinstance(value, Iterable) and not isinstance(value, Sequence | Mapping | Message):
        return list(value)
    return value


#: calls that only read: made again with the next leader as they are
READS = frozenset({"status", "stats", "peek", "dead_letters"})


def _repeatable(name: str, arguments: Mapping[str, Any]) -> bool:
    """Whether a call of ``name`` with ``arguments``, left in flight with a leader that lost
    its lease, may be made again with the next leader: it only reads; it is an enqueue whose
    every message carries a dedup id (the next leader answers the ids the first attempt made,
    or makes them); or it is a dequeue that completes nothing (a lease the first attempt made
    lapses after its visibility timeout, as one whose answer was lost on the way does). A
    ``configure`` that changes nothing reads the settings (an SQS send reads them first)."""
    if name in READS:
        return True
    if name == "configure":
        return not arguments.get("settings")
    if name == "enqueue":
        return arguments.get("dedup_id") is not None
    if name == "enqueue_batch":
        items = arguments.get("items")
        return (
            isinstance(items, list)
            and bool(items)
            and all(isinstance(it, dict) and it.get("dedup_id") is not None for it in items)
        )
    if name in ("dequeue", "dequeue_pages"):
        return not arguments.get("complete")
    return False


#: a lease with less than this share of its length left has missed a renewal (a leader renews
#: every third of it, so a live one's runs two thirds or more): its queue is read ahead of a
#: takeover. (A call a live leader holds, a long poll, costs no read.)
UNRENEWED = 0.5


class LeaseLost(OutcomeUnknown):
    """The leader a call was sent to stopped answering and lost its lease while the call was
    in flight: it may have applied it."""


class forwarded(Generic[P, R]):
    """The coroutine method ``method`` of the queue surface, sent on to the queue's leader
    (``ForwardedQueue._call``): a descriptor, bound like a function."""

    def __init__(
        self, method: Callable[Concatenate[AsyncQueueSurface, P], Coroutine[Any, Any, R]]
    ) -> None:
        name = method.__name__
        signature = inspect.signature(method)

        @functools.wraps(method)
        async def send(self: ForwardedQueue, /, *args: P.args, **kwargs: P.kwargs) -> R:
            given = [_reusable(a) for a in args]
            named = {k: _reusable(v) for k, v in kwargs.items()}

            def again() -> bool:  # asked only when a leader lost its lease with the call
                return _repeatable(name, signature.bind(self, *given, **named).arguments)

            return await self._call(lambda q: getattr(q, name)(*given, **named), again)

        self.function = send

    def __set_name__(self, owner: type, name: str) -> None:
        self.function.__qualname__ = f"{owner.__qualname__}.{name}"
        self.function.__module__ = owner.__module__

    @overload
    def __get__(
        self, obj: None, owner: type | None = None
    ) -> Callable[Concatenate[ForwardedQueue, P], Coroutine[Any, Any, R]]: ...

    @overload
    def __get__(
        self, obj: ForwardedQueue, owner: type | None = None
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...

    def __get__(
        self, obj: ForwardedQueue | None, owner: type | None = None
    ) -> (
        Callable[Concatenate[ForwardedQueue, P], Coroutine[Any, Any, R]]
        | Callable[P, Coroutine[Any, Any, R]]
    ):
        if obj is None:
            return self.function
        return types.MethodType(self.function, obj)


@documented  # the docstrings of the queue's methods: s3q.surface
class ForwardedQueue:
    """A queue led by another broker of the cluster; the coroutines of :class:`s3q.AsyncQueue`."""

    def __init__(self, cluster: Cluster, name: str, leader: str | None) -> None:
        self._cluster = cluster
        self.name = name
        self.leader = leader  # the address calls go to now (None: to be found, maybe here)
        self._peer: AsyncRemoteQueue | None = None
        self._peer_of = leader
        #: the partitions of the queue, as the leader's answers say (``s3q-partitions``)
        self.partitions = 1

    @property
    def url(self) -> str:
        return f"{self.leader} (queue {self.name})"

    @property
    def here(self) -> AsyncQueue | None:
        """The queue, if this broker leads it now (calls then go to it at once)."""
        queue = self._cluster.local(self.name)
        return queue if isinstance(queue, AsyncQueue) else None

    def _remote(self) -> AsyncRemoteQueue:
        assert self.leader is not None
        if self._peer is None or self._peer_of != self.leader:
            self._peer, self._peer_of = (
                self._cluster.peers.queue(self.leader, self.name),
                self.leader,
            )
        return self._peer

    async def _call(
        self,
        method: Callable[[AsyncQueueSurface], Awaitable[T]],
        again: Callable[[], bool] = lambda: False,
    ) -> T:
        """``method`` on the queue's leader: the one known, found again only after a failure.
        ``again``: whether the call may be made twice (``_repeatable``): one left in flight with
        a leader that lost its lease is then made with the next leader."""
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        queue: AsyncQueueSurface | None = self._cluster.local(self.name)
        if queue is None and self.leader is None:  # no leader known: find it (or lead it)
            deadline = loop.time() + self._cluster.failover_timeout
            target = await self._cluster.leader(self.name, deadline)
            if isinstance(target, str):
                self.leader = target
            else:
                queue = target
        queue = self._remote() if queue is None else await self._whole(queue)
        while True:
            try:
                if isinstance(queue, AsyncRemoteQueue):
                    seen = Answers()
                    try:  # what its answer says (an error's too), passed on
                        with answers() as seen:
                            return await self._watched(method(queue))
                    finally:
                        self._heard(seen)
                heard(queue.writer if isinstance(queue, AsyncQueue) else None)
                return await method(queue)
            except LeaseLost as lost:
                if not again():
                    raise
                if deadline is None:
                    deadline = loop.time() + self._cluster.failover_timeout
                elif loop.time() >= deadline:
                    raise
                log.info("queue %s: %s; made again with its next leader", self.name, lost)
                target = await self._cluster.leader(self.name, deadline)  # (here, or found)
                if isinstance(target, str):
                    self.leader = target
                    queue = self._remote()
                else:
                    queue = await self._whole(target)
                continue
            except (BrokerUnreachable, Unavailable, QueueClosed, WriterFenced) as exc:
                if isinstance(exc, WriterFenced):
                    # nothing was done: the writer (here, or the leader's) lost the queue to
                    # another; one stopped here is forgotten, and the queue followed
                    await self._cluster.evict_stopped(self.name)
                elif not isinstance(queue, AsyncRemoteQueue):
                    raise  # this broker's own queue: nothing to fail over to
                # nothing was done: find the leader again (a dead one's lease lapses; one that
                # answered has handed the queue on, or is stopping, but serves its other queues)
                if isinstance(exc, BrokerUnreachable) and self.leader is not None:
                    self._cluster.unreachable(self.leader, exc)
                if deadline is None:
                    deadline = loop.time() + self._cluster.failover_timeout
                elif loop.time() >= deadline:
                    raise Unavailable(
                        f"queue {self.name}: its broker {self.leader} cannot be reached and no "
                        "other broker has taken the queue over yet; try again"
                    ) from exc
            await asyncio.sleep(RETRY_PAUSE)
            target = await self._cluster.leader(self.name, deadline)
            if isinstance(target, str):
                self.leader = target
                queue = self._remote()
            else:
                queue = await self._whole(target)  # this broker took the queue over

    async def _whole(self, queue: AsyncQueueSurface) -> AsyncQueueSurface:
        """``queue``, led here, as the calls to this name want it: a queue of several
        partitions as a whole (its own log is only partition 0), once this broker leads it."""
        if not isinstance(queue, AsyncQueue) or queue.config.partitions == 1:
            return queue
        if placement.split_name(self.name)[1] is not None:
            return queue  # (one partition, named)
        self.partitions = queue.config.partitions
        return await self._cluster.whole(self.name)

    def _heard(self, seen: Answers) -> None:
        """What the leader's answer said: noted here, and passed on to this broker's answer."""
        heard(seen.writer)
        if seen.partitions is not None:
            self.partitions = seen.partitions
            spread(seen.partitions)

    async def _watched(self, call: Awaitable[T]) -> T:
        """A call sent to the leader, watched: if it stays unanswered while the leader's lease
        lapses (a leader paused, or cut off from the store, stops renewing it), this broker
        takes the queue over, or finds that another broker did, and the call ends in
        OutcomeUnknown (the leader may have applied it before it stopped), instead of waiting
        out the peer timeout."""
        task = asyncio.ensure_future(call)
        ttl = self._cluster.lease_ttl
        try:
            await asyncio.wait([task], timeout=ttl / 3)
            while not task.done():
                try:
                    await self._cluster.take_over(self.name)
                except QueueLocked as exc:
                    if exc.address is not None and exc.address != self.leader:
                        break  # another broker took the queue over: the leader lost it
                    # its lease runs: look again once it has lapsed
                    left = ttl if exc.expires_at is None else exc.expires_at - time.time()
                    if left < ttl * UNRENEWED:  # and it is not being renewed: read the queue
                        self._cluster.read_ahead(self.name)
                    await asyncio.wait([task], timeout=min(ttl / 6, max(left, 0.0) + LAPSED))
                    continue
                except StoreError:  # the store is away
                    await asyncio.wait([task], timeout=ttl / 6)
                    continue
                raise LeaseLost(
                    f"queue {self.name}: its leader {self.leader} stopped answering and lost "
                    "its lease while this call was in flight; it may have applied it. This "
                    "broker leads the queue now: retry with a dedup id"
                )
            if not task.done():
                raise LeaseLost(
                    f"queue {self.name}: its leader {self.leader} stopped answering and lost "
                    "its lease to another broker while this call was in flight; it may have "
                    "applied it: retry with a dedup id"
                )
            return task.result()
        finally:
            task.cancel()

    enqueue = forwarded(AsyncQueueSurface.enqueue)
    enqueue_batch = forwarded(AsyncQueueSurface.enqueue_batch)
    enqueue_staged = forwarded(AsyncQueueSurface.enqueue_staged)
    dequeue = forwarded(AsyncQueueSurface.dequeue)
    complete = forwarded(AsyncQueueSurface.complete)
    complete_batch = forwarded(AsyncQueueSurface.complete_batch)
    fail = forwarded(AsyncQueueSurface.fail)
    release = forwarded(AsyncQueueSurface.release)
    extend = forwarded(AsyncQueueSurface.extend)
    status = forwarded(AsyncQueueSurface.status)
    stats = forwarded(AsyncQueueSurface.stats)
    peek = forwarded(AsyncQueueSurface.peek)
    dead_letters = forwarded(AsyncQueueSurface.dead_letters)
    redrive = forwarded(AsyncQueueSurface.redrive)
    discard = forwarded(AsyncQueueSurface.discard)
    configure = forwarded(AsyncQueueSurface.configure)
    cleanup = forwarded(AsyncQueueSurface.cleanup)
    purge = forwarded(AsyncQueueSurface.purge)
    compact = forwarded(AsyncQueueSurface.compact)

    async def dequeue_pages(
        self,
        max_messages: int = 1,
        visibility_timeout: float | None = None,
        wait: float = 0.0,
        *,
        per_group: int = 1,
        complete: Iterable[Target] = (),
    ) -> Pages:
        """``dequeue``, stretches as pages (``s3q.wire.pages``), from the leader as it answers
        them: a broker passes them on without a Message per message."""
        settle = list(complete)

        async def take(queue: AsyncQueueSurface) -> Pages:
            paged = cast("Paging", queue)  # (an AsyncQueue, or the leader's AsyncRemoteQueue)
            return await paged.dequeue_pages(
                max_messages, visibility_timeout, wait, per_group=per_group, complete=settle
            )

        return await self._call(take, lambda: _repeatable("dequeue_pages", {"complete": settle}))

    async def close(self) -> None:
        pass  # nothing to close: the leader owns the queue

    def __repr__(self) -> str:
        return f"<s3q.broker.ForwardedQueue {self.name} led by {self.leader}>"


if TYPE_CHECKING:  # mypy checks that ForwardedQueue offers the whole surface
    _forwarded: type[AsyncQueueSurface] = ForwardedQueue
