"""Which broker of the cluster leads a queue: this one, or another that calls are forwarded to.

A queue's writer lease names the broker that leads it. Asked for a queue, a broker opens it
itself, or learns from the lease which broker holds it, waits while that broker is down and its
lease has not lapsed, and takes the queue over once it has. The partitions of a queue are
placed over the cluster's brokers in the queue's rendezvous order, and a partition whose leader's
lease lapses is adopted by a broker serving the queue, though no call reaches it.

The leadership sees the broker it decides for through :class:`Seat` (the queue registry is
one): this module does not import the registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Mapping
from typing import Protocol

from ..api import AsyncQueue
from ..client.nodes import rank
from ..errors import InvalidConfig, QueueLocked, S3QError, StoreError, Unavailable
from ..partitions import placement
from ..partitions.queue import PartitionedQueue
from ..wire.peers import normalize
from .forward import LAPSED, RETRY_PAUSE, Peers

log = logging.getLogger("s3q.broker")

DOWN_FOR = 5.0  # seconds a broker that failed a forwarded call is not sent more


class Seat(Protocol):
    """What the leadership needs of the broker it decides for (its queue registry)."""

    @property
    def address(self) -> str | None:
        """This broker's URL as it advertises it (None: not yet known)."""

    @property
    def lease_ttl(self) -> float:
        """The writer lease length of the queues this broker opens."""

    async def take_over(self, name: str) -> AsyncQueue:
        """Open queue ``name`` here: QueueLocked while another writer's lease runs."""

    def read_ahead(self, name: str) -> None:
        """Queue ``name``'s leader is away: read the queue ahead of a takeover."""


class Leadership:
    """Which broker leads each queue ``seat`` serves: ``seat`` itself, or one of ``peers``.

    Keeps the brokers that failed a forwarded call lately (not sent more for ``DOWN_FOR``
    seconds), and, once a partitioned queue is served, adopts every half lease the partitions
    whose leader's lease has lapsed. Must be used from the server's one loop.
    """

    def __init__(self, seat: Seat, peers: Peers) -> None:
        self.seat = seat
        self.peers = peers
        self._down: dict[str, float] = {}  # broker address -> until when it counts as down
        self._adopter: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()

    def brokers(self) -> list[str]:
        """The URLs of the brokers of the cluster: this one's (as advertised), then its
        configured peers (``--peer``)."""
        address = self.seat.address
        own = [normalize(address)] if address is not None else []
        return list(dict.fromkeys(own + sorted(self.peers.allowed or ())))

    async def leader(self, name: str, deadline: float) -> AsyncQueue | str:
        """This broker's queue ``name``, or the address of the broker that leads it.

        A queue whose leader is down (or is this broker's previous life, whose lease has not
        lapsed) is waited for until ``deadline`` (loop time), then Unavailable. A queue held by
        a writer that is not a broker raises QueueLocked; one whose lease names a broker that
        is not a peer, Unavailable at once.
        """
        loop = asyncio.get_running_loop()
        name = placement.log_name(name)
        while True:
            try:
                return await self.seat.take_over(name)
            except QueueLocked as exc:
                address, here = exc.address, self.seat.address
                if address is None:
                    raise
                if address != here and not self.peers.allows(address):
                    raise self.peers.refuse(name, address) from None
                if address != here and self._down.get(address, 0.0) <= loop.time():
                    return address
                if loop.time() >= deadline:
                    raise Unavailable(
                        f"queue {name} is held by {exc.holder}, which cannot be reached; "
                        "its lease has not lapsed yet: try again"
                    ) from None
                self.seat.read_ahead(name)
                pause = min(RETRY_PAUSE, max(0.0, deadline - loop.time()))
                if exc.expires_at is not None:  # looked at again just after it lapses
                    pause = min(pause, max(0.0, exc.expires_at - time.time()) + LAPSED)
                await asyncio.sleep(pause)

    def unreachable(self, address: str, error: Exception) -> None:
        """A broker did not serve a forwarded call: look for the queue's leader elsewhere (or
        wait for its lease to lapse) instead of going back to it for a while."""
        now = asyncio.get_running_loop().time()
        if self._down.get(address, 0.0) <= now:
            log.warning("broker %s did not serve a forwarded call: %s", address, error)
        self._down[address] = now + DOWN_FOR

    async def place(self, name: str, count: int, first: str | None) -> list[str | None]:
        """The leader of each of queue ``name``'s ``count`` partitions (``first``: partition
        0's; None: to be found). The others are led by the brokers of the cluster in turn, in
        the queue's rendezvous order (``brokers()``), so the partitions spread evenly; this
        broker opens those that fall to it, and a partition whose broker is away is taken over
        by whichever broker calls it next, as any queue is."""
        order: list[str | None] = [None]
        if self.seat.address is not None:
            order = sorted(self.brokers(), key=functools.partial(rank, name))
        # partition i goes to the broker i places after partition 0's in the order
        known = _normalized(first)
        start = order.index(known) if known in order else 0
        leaders = [first]
        for index in range(1, count):
            leader = order[(start + index) % len(order)]
            if leader is None or leader == _normalized(self.seat.address):
                try:
                    await self.seat.take_over(placement.name_of(name, index))
                    leader = self.seat.address
                except QueueLocked as exc:
                    if exc.address is None:
                        raise
                    leader = exc.address
            leaders.append(leader)
        return leaders

    def adopt(self, partitioned: Mapping[str, PartitionedQueue]) -> None:
        """Adopt from now on the lapsed partitions of the queues in ``partitioned`` (the
        partitioned queues served, by name, as they come and go), until :meth:`close`."""
        if self._adopter is None:
            self._adopter = asyncio.create_task(self._adopt_lapsed(partitioned))

    async def _adopt_lapsed(self, partitioned: Mapping[str, PartitionedQueue]) -> None:
        """Every half lease, open here each partition of the queues in ``partitioned`` whose
        leader's lease has lapsed (a broker dead, paused or cut off from the store), so its
        messages are served again within about a lease though no call reaches it (this
        broker's calls find enough in the partitions it leads). A read of the partition's
        lease each; a partition whose lease runs is left alone."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), self.seat.lease_ttl / 2)
                return
            for name, whole in list(partitioned.items()):
                for part in whole.partitions:
                    if part.led is not None:
                        continue
                    try:
                        await self.seat.take_over(placement.name_of(name, part.index))
                    except (QueueLocked, Unavailable, StoreError):
                        continue  # its lease runs (or the store or the broker is away)
                    except S3QError as exc:
                        log.warning("taking %s@%d over failed: %s", name, part.index, exc)
                        continue
                    log.info("took %s@%d over: its leader's lease had lapsed", name, part.index)

    async def close(self) -> None:
        """Stop adopting; returns once an adoption under way is done (a queue it opened is
        open by then)."""
        self._closing.set()
        if self._adopter is not None:
            await self._adopter


def _normalized(address: str | None) -> str | None:
    """``address`` as ``brokers()`` lists it (None if it is no broker URL)."""
    if address is None:
        return None
    try:
        return normalize(address)
    except InvalidConfig:
        return None
