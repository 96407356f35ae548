"""Producers and consumers through brokers over one S3 store, while the store fails on the wire
and the leading broker is paused.

:func:`run_cluster` starts ``plan.brokers`` brokers (``s3q serve`` in child processes), each
reaching the S3 server through its own :class:`~s3q.faults.proxy.FaultProxy`, so one broker
can be partitioned while the others work; each broker is told the others (``--peer``). Half
the callers know every broker, half only the last one, which forwards their calls to the
leader and from which they learn the others (to move on to when it stalls); all call one
queue. A
nemesis pauses the broker that leads the queue (SIGSTOP) for longer than the writer lease,
so that another broker takes the queue over, then lets it run again (SIGCONT): the old
leader wakes up with commits in flight, which must not be acknowledged. The history is
checked as for an embedded queue. Each call records the writer that answered it (the
``s3q-writer`` header, :mod:`s3q.wire.answers`), and each writer's open is taken as its first
answer (:func:`~s3q.faults.checker.first_answers`), so the fenced-ack check sees every
acknowledgement of a writer sent after its successor opened; each pause records the writer
paused (from the lease) and the one that took the queue over.

With ``plan.partitions`` above 1 the queue is made with that many partitions (through a
broker, before the first message), the brokers lead them between them, and each pause stops
the broker leading a partition drawn at random; the history is checked on every partition's
log read back together. A call to such a queue may be answered by several writers (one per
partition it reached), so calls carry no writer and the fenced-ack check has nothing to check:
a pause's takeover is read from the paused partition's lease instead.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import random
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from fault_harness.workload import Budget, Plan, Report, merged, queue_options, read_back, run_calls
from s3q.broker.server import spawn
from s3q.client import AsyncRemoteQueue, connect_async
from s3q.faults.checker import History, check, first_answers
from s3q.faults.proxy import FaultProxy
from s3q.lease import LeaseRecord, read_record
from s3q.partitions import placement
from s3q.store import Store, open_store, queue_url

QUEUE = "work"
#: seconds a paused leader stays paused past its lease: the time another broker has to take
#: the queue over and answer a call. A takeover waits for a call: the clients tell the
#: paused broker by a probe unanswered (``PROBE_EVERY`` + ``STALL_TIMEOUT``, 2.5 s), the broker
#: they turn to watches its forwarded call ``lease_ttl`` / 3, then opens the queue (the soak
#: holds that to ``lease_ttl`` + 2 s); the rest is room for a loaded machine
PAUSE_PAST_LEASE = 4.5


@dataclass
class Pause:
    """One pause of a leader: when it began and ended (monotonic), and when a call was next
    answered ok (through any broker). ``writer``: the token of the writer paused (as its
    lease named it); ``taken_by``: the first other writer to answer a call ok after the
    pause began (its takeover), if one did."""

    broker: str
    started: float
    ended: float
    served_again: float | None = None
    writer: str | None = None
    taken_by: str | None = None


@dataclass
class ClusterReport(Report):
    pauses: list[Pause] = field(default_factory=list)

    def outages(self) -> list[tuple[float, float]]:
        """Partitions, and each pause until the queue served again."""
        return self.partitions + [
            (p.started, max(p.ended, p.served_again or self.seconds)) for p in self.pauses
        ]

    def takeover(self) -> float:
        """The longest time from a pause's start to the next call answered ok."""
        return max(((p.served_again or self.seconds) - p.started for p in self.pauses), default=0.0)

    def summary(self) -> str:
        taken = sum(1 for p in self.pauses if p.taken_by is not None)
        return (
            f"{super().summary()}; {len(self.pauses)} leader pauses ({taken} taken over by "
            f"another writer), longest until served again {self.takeover():.2f} s; "
            f"{len(self.history.opens)} writers answered"
        )


class _Remote:
    def __init__(self, queue: AsyncRemoteQueue) -> None:
        self.queue = queue

    async def current(self) -> tuple[AsyncRemoteQueue, str | None]:
        return self.queue, None


async def run_cluster(
    plan: Plan,
    upstream: str,
    bucket: str,
    options: dict[str, Any],
    brokers: int = 2,
    pause_every: float = 0.0,
) -> ClusterReport:
    """Run ``plan`` through ``brokers`` brokers over a fresh queue in ``bucket`` of the S3
    server at ``upstream`` (``options``: how to reach it directly), pausing the leader about
    every ``pause_every`` seconds (0: never); read the queue back and check the history."""
    root = f"s3://{bucket}/cluster-{uuid.uuid4().hex[:8]}"
    proxies = [
        FaultProxy(upstream, plan.profile, plan.seed * 1000 + i, 2 * plan.store_timeout)
        for i in range(brokers)
    ]
    history = History(visibility_timeout=plan.visibility_timeout)
    with contextlib.ExitStack() as stack:
        for proxy in proxies:
            stack.enter_context(proxy)
        children = stack.enter_context(Brokers(root, proxies, broker_options(plan, options)))
        # Half the callers know every broker (and call the leader first), half know only
        # the last broker (whose calls it forwards to the leader; the others are learned
        # from it, and its calls go to them when it stalls).
        urls = children.urls
        clients = [
            connect_async(urls, timeout=plan.commit_timeout + 5),
            connect_async(urls[-1], timeout=plan.commit_timeout + 5),
        ]
        try:
            url = queue_url(root, QUEUE)
            raws = [open_store(placement.url_of(url, i), options) for i in range(plan.partitions)]
            if plan.partitions > 1:
                await clients[0].queue(QUEUE).configure(partitions=plan.partitions)
            started = time.monotonic()
            pauses: list[Pause] = []
            calls = asyncio.ensure_future(
                run_calls(
                    plan, [_Remote(c.queue(QUEUE)) for c in clients], history, Budget(plan.ops)
                )
            )
            nemesis = asyncio.ensure_future(
                _pause_leaders(raws, children.children, plan, pause_every, pauses, calls, history)
            )
            await calls
            seconds = time.monotonic() - started
            await nemesis
        finally:
            await asyncio.gather(*(c.close() for c in clients))
        for proxy in proxies:
            proxy.schedule.enabled = False
    # the brokers have closed their queues: read what they left
    history.final = merged([await read_back(raw) for raw in raws])
    if plan.partitions > 1:  # (a call's writer is one of those it reached: see above)
        for call in history.calls:
            call.writer = None
    history.opens = first_answers(history.calls)
    answered = sorted((c for c in history.calls if c.outcome == "ok"), key=lambda c: c.returned)
    for pause in pauses:
        pause.served_again = next(
            (c.returned for c in answered if c.returned > pause.started), None
        )
        if plan.partitions == 1:
            pause.taken_by = next(
                (
                    c.writer
                    for c in answered
                    if c.returned > pause.started and c.writer not in (None, pause.writer)
                ),
                None,
            )
    return ClusterReport(
        plan,
        history,
        check(history),
        sum((p.schedule.injected for p in proxies), collections.Counter()),
        collections.Counter(),  # a broker reopens a stopped writer itself
        seconds,
        sorted(span for p in proxies for span in p.schedule.partitions.spans),
        "s3 via brokers",
        pauses=pauses,
    )


class Brokers:
    """One broker (``s3q serve`` in a child process) per proxy, serving ``root`` with
    ``options`` (how to reach the store, and queue settings), each reaching the store through
    its own proxy; a context manager that stops every one at the end (SIGCONT, SIGTERM, then
    SIGKILL). A broker killed can be started again on its own port."""

    def __init__(self, root: str, proxies: list[FaultProxy], options: dict[str, Any]) -> None:
        self.root, self.proxies, self.options = root, proxies, options
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self._ports: dict[str, int] = {}
        self._proxy: dict[str, FaultProxy] = {}
        self.peers: list[str] = []  # every broker's URL

    def __enter__(self) -> Brokers:
        ports = _free_ports(len(self.proxies))
        self.peers = [f"http://127.0.0.1:{port}" for port in ports]
        try:
            for port, proxy in zip(ports, self.proxies, strict=True):
                child, url = self._spawn(port, proxy)
                self.children[url] = child
                self._ports[url] = port
                self._proxy[url] = proxy
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def urls(self) -> list[str]:
        return list(self.children)

    def proxy_of(self, url: str) -> FaultProxy:
        """The proxy the broker at ``url`` reaches the store through."""
        return self._proxy[url]

    def _spawn(self, port: int, proxy: FaultProxy) -> tuple[subprocess.Popen[bytes], str]:
        """A broker on ``port`` reaching the store through ``proxy``, told its peers (as an
        operator tells a cluster's brokers, ``s3q serve --peer``): a client given one broker
        learns the others from it, and moves on to them when that one stalls."""
        options = {**self.options, "endpoint_url": proxy.endpoint}
        return spawn(self.root, port, options, log_level="critical", peers=self.peers)

    def kill(self, url: str) -> None:
        """SIGKILL the broker at ``url`` and reap it."""
        child = self.children[url]
        child.kill()
        child.wait(30)

    def restart(self, url: str) -> None:
        """Start the broker at ``url`` again (after :meth:`kill`), on the same port."""
        child, _ = self._spawn(self._ports[url], self._proxy[url])
        self.children[url] = child

    def stop(self) -> None:
        for child in self.children.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGCONT)
            if child.poll() is None:
                child.terminate()
        for child in self.children.values():
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(30)


def broker_options(plan: Plan, options: dict[str, Any]) -> dict[str, Any]:
    """What a broker of a run over ``options`` (how to reach the store) is given, besides the
    endpoint of its proxy: the plan's queue settings and store timeout."""
    return {**options, **queue_options(plan), "store_timeout": plan.store_timeout}


async def _pause_leaders(
    raws: list[Store],
    children: dict[str, subprocess.Popen[bytes]],
    plan: Plan,
    every: float,
    pauses: list[Pause],
    calls: asyncio.Future[None],
    history: History,
) -> None:
    """Until ``calls`` is done: about every ``every`` seconds, SIGSTOP the broker whose
    address the writer lease of a partition (of ``raws``, drawn at random) names for
    ``lease_ttl + PAUSE_PAST_LEASE`` s, then SIGCONT it. With one partition, only a writer
    that has answered a call (``history``) is paused: a lease may name a writer that has not
    served yet, or never will (its open failed), and pausing it tests nothing. With
    partitions, a pause's ``taken_by`` is the writer the partition's lease names after it,
    if another."""
    if not every:
        return
    rng = random.Random(f"pause-{plan.seed}")
    while not calls.done():
        await asyncio.wait([calls], timeout=rng.expovariate(1 / every))
        if calls.done():
            return
        raw = rng.choice(raws)
        lease = await holder(raw)
        led_by = lease.address if lease is not None else None
        child = children.get(led_by or "")
        if lease is None or child is None:
            continue
        if len(raws) == 1 and not any(c.writer == lease.token for c in history.calls):
            continue  # (not serving yet, or not at all: see above)
        started = time.monotonic()
        os.kill(child.pid, signal.SIGSTOP)
        try:
            await asyncio.wait([calls], timeout=plan.lease_ttl + PAUSE_PAST_LEASE)
        finally:
            os.kill(child.pid, signal.SIGCONT)
        pause = Pause(led_by or "", started, time.monotonic(), writer=lease.token)
        if len(raws) > 1:
            after = await holder(raw)
            if after is not None and after.token != lease.token:
                pause.taken_by = after.token
        pauses.append(pause)


def _free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 now (each may be taken before it is used:
    :func:`~s3q.broker.server.spawn` then fails)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


async def holder(raw: Store) -> LeaseRecord | None:
    """The queue's writer lease (who holds it: its broker's address, its writer's token), if
    it can be read."""
    with contextlib.suppress(Exception):
        current = await read_record(raw)
        if current is not None:
            return current[0]
    return None


async def leader(raw: Store) -> str | None:
    """The address of the broker holding the queue's writer lease, if any."""
    lease = await holder(raw)
    return lease.address if lease is not None else None
