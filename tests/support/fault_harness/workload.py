"""Producers and consumers running a fixed number of calls against a queue under faults.

:func:`run_embedded` opens the queue as its writer over a :class:`FaultyStore`; when the
writer stops (it should not, short of another writer taking over) the stop is counted by
cause and the queue reopened. Every call lands in a :class:`History`; at the end the faults
are turned off, the queue is read back from the store, and the history is checked.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from s3q import snapshot
from s3q.api import AsyncQueue
from s3q.config import QueueConfig, Setting
from s3q.errors import (
    InvalidArgument,
    MessageNotFound,
    QueueClosed,
    QueueFull,
    QueueLocked,
    ReceiptExpired,
    S3QError,
    StoreFull,
    Unavailable,
    WriterFenced,
)
from s3q.faults.checker import Call, Final, History, Outcome, Violation, check
from s3q.faults.schedule import HARSH, FaultProfile, Schedule
from s3q.faults.store import FaultyStore
from s3q.index.records import DONE
from s3q.message import Message
from s3q.partitions import placement
from s3q.partitions.queue import PartitionedQueue
from s3q.store import RetryingStore, Store
from s3q.wire.answers import answers
from s3q.writer.engine import Engine

if TYPE_CHECKING:
    from s3q.faults.proxy import FaultProxy

T = TypeVar("T")

#: Errors that say the call changed nothing.
KNOWN_FAILURES = (
    InvalidArgument,
    MessageNotFound,
    QueueClosed,
    QueueFull,
    QueueLocked,
    ReceiptExpired,
    StoreFull,
    Unavailable,
    WriterFenced,
)
#: Errors of a queue that is not serving (the others are answers about one message).
DOWN = frozenset(
    {
        "StoreError",
        "StoreFull",
        "TransientError",
        "OutcomeUnknown",
        "WriterFenced",
        "QueueClosed",
        "QueueLocked",
        "Unavailable",
    }
)


#: What a partition may cost beyond its own length, in seconds.
PARTITION_GRACE = 1.0


@dataclass
class Plan:
    """What to run: how many calls in all, by how many producers and consumers."""

    ops: int = 10_000
    producers: int = 4
    consumers: int = 4
    seed: int = 0
    profile: FaultProfile = HARSH
    visibility_timeout: float = 5.0
    fail_rate: float = 0.05  # share of deliveries a consumer fails rather than completes
    store_timeout: float = 0.5  # how long a hung request hangs
    lease_ttl: float = 3.0
    commit_timeout: float = 5.0
    #: the writer's clock jumps by up to this many seconds, forward or back (0: never)
    clock_jumps: float = 0.0
    jump_every: float = 3.0  # mean seconds between jumps
    #: the queue's partitions (``s3q.partitions``): each a writer of its own, each meeting the
    #: faults, the calls routed as a partitioned queue routes them
    partitions: int = 1


@dataclass
class Target:
    """Where a run's queue lives: the store its writer uses (faults in), the same objects
    without faults (to read the queue back), and the schedule of the faults."""

    store: Store
    raw: Store
    schedule: Schedule
    #: the target of partition ``i`` of this queue (its store under this one's, meeting the
    #: same faults)
    partition: Callable[[int], Target] | None = None


def in_memory(plan: Plan) -> Target:
    """A fresh in-process memory store behind a :class:`FaultyStore` and the writer's retries."""
    from s3q.store import open_store

    url = f"memory://faults-{plan.seed}-{time.monotonic_ns()}"
    schedule = Schedule(plan.profile, plan.seed)

    def at(index: int) -> Target:
        raw = open_store(placement.url_of(url, index))
        assert isinstance(raw, RetryingStore)
        faulty = FaultyStore(raw.inner, plan.profile, plan.seed, plan.store_timeout)
        faulty.schedule = schedule  # (one schedule for every partition's requests)
        faulty.script = schedule.script
        patience = max(2.0, 4 * plan.store_timeout)
        return Target(RetryingStore(faulty, patience=patience), raw, schedule, at)

    return at(0)


def through_proxy(plan: Plan, proxy: FaultProxy, url: str, options: dict[str, Any]) -> Target:
    """The S3 queue at ``url`` (``options``: how to reach the server directly), reached by
    the writer through ``proxy`` with ``plan.store_timeout``."""
    from s3q.store import open_store

    def at(index: int) -> Target:
        where = placement.url_of(url, index)
        faulty = {**options, "endpoint_url": proxy.endpoint, "store_timeout": plan.store_timeout}
        return Target(open_store(where, faulty), open_store(where, options), proxy.schedule, at)

    return at(0)


@dataclass
class Report:
    """What a run did and found."""

    plan: Plan
    history: History
    violations: list[Violation]
    injected: collections.Counter[str]
    stops: collections.Counter[str]
    seconds: float
    partitions: list[tuple[float, float]] = field(default_factory=list)
    store: str = "memory"

    @property
    def calls(self) -> int:
        return len(self.history.calls)

    @property
    def faults(self) -> int:
        return sum(self.injected.values())

    def availability(self) -> float:
        """Share of the run outside :meth:`outages` in which no call failed for a queue that
        was not serving. An outage's window runs from its start to a second after its end
        (what a partition may cost); a failed call that overlaps a window is the outage's,
        and neither it nor the window counts."""
        spans = [(c.invoked, c.returned) for c in self.down_calls()]
        total = self.seconds - _length(self._windows())
        return 1.0 - _length(_union(spans)) / total if total > 0 else 1.0

    def down_calls(self) -> list[Call]:
        """Calls that failed because the queue was not serving, outside every outage window."""
        windows = self._windows()
        return [
            c
            for c in self.history.calls
            if c.error in DOWN and not any(s < c.returned and c.invoked < e for s, e in windows)
        ]

    def _windows(self) -> list[tuple[float, float]]:
        return _union([(start, end + PARTITION_GRACE) for start, end in self.outages()])

    def outages(self) -> list[tuple[float, float]]:
        """The spans the run made the queue unreachable on purpose: its partitions."""
        return self.partitions

    def recovery(self) -> float:
        """The longest time from a partition's end to the next call answered ok."""
        answered = sorted(c.returned for c in self.history.calls if c.outcome == "ok")
        lags = [0.0]
        for _, end in self.partitions:
            after = bisect.bisect_right(answered, end)
            if after < len(answered):
                lags.append(answered[after] - end)
        return max(lags)

    def unknown_outcomes(self) -> int:
        return sum(1 for c in self.history.calls if c.outcome == "unknown")

    def summary(self) -> str:
        outcomes = collections.Counter(c.outcome for c in self.history.calls)
        return (
            f"seed {self.plan.seed} on {self.store}: {self.calls} calls in {self.seconds:.1f} s "
            f"({dict(outcomes)}), {self.faults} faults injected {dict(self.injected)}, "
            f"writer stops {dict(self.stops) or 0}, availability outside partitions "
            f"{self.availability():.4%}, longest recovery after a partition "
            f"{self.recovery():.2f} s, violations {len(self.violations)}"
        )


class Conn(Protocol):
    """How callers reach the queue: ``current()`` gives the queue object to call (an
    embedded or a remote queue) and the token of the writer behind it, when known (else the
    writer a broker's answer names is recorded: ``s3q.wire.answers``)."""

    async def current(self) -> tuple[Any, str | None]: ...


class _Writer:
    """The queue's current writer, embedded, reopened when it stops. ``settings``: those its
    first open gives (a partitioned queue's ``partitions``)."""

    def __init__(
        self,
        store: Store,
        config: QueueConfig,
        history: History,
        settings: dict[str, Setting] | None = None,
    ) -> None:
        self.store, self.config, self.history = store, config, history
        self.settings = settings
        self.engine: Engine | None = None
        self.queue: AsyncQueue | None = None
        self.stops: collections.Counter[str] = collections.Counter()
        self._opening = asyncio.Lock()

    async def current(self) -> tuple[AsyncQueue, str | None]:
        async with self._opening:
            engine = self.engine
            if engine is not None and engine.failure is None and self.queue is not None:
                return self.queue, engine.token
            if engine is not None:
                self.stops[type(engine.failure).__name__] += 1
                with contextlib.suppress(S3QError):
                    await engine.close()
            for attempt in range(1000):
                try:
                    engine = await Engine.open(self.store, self.config, self.settings)
                    break
                except (QueueLocked, S3QError):
                    await asyncio.sleep(min(0.05 * 2**attempt, 0.5))
            else:  # pragma: no cover - the store never came back
                raise RuntimeError("the queue could not be reopened")
            self.history.opens.append((engine.token, time.monotonic()))
            self.engine, self.queue = engine, AsyncQueue(engine)
            return self.queue, engine.token

    async def close(self) -> None:
        if self.engine is not None:
            with contextlib.suppress(S3QError):
                await self.engine.close()


class _Partitions:
    """The writers of a partitioned queue's partitions, reached as one queue
    (``s3q.partitions.queue.PartitionedQueue``),
    made anew when a writer was reopened."""

    def __init__(self, url: str, writers: list[_Writer]) -> None:
        self.url, self.writers = url, writers
        self.queue: PartitionedQueue | None = None
        self._of: list[AsyncQueue] = []

    async def current(self) -> tuple[PartitionedQueue, str | None]:
        queues = [(await writer.current())[0] for writer in self.writers]
        if self.queue is None or any(a is not b for a, b in zip(queues, self._of, strict=True)):
            self.queue, self._of = PartitionedQueue(self.url, queues), queues
        return self.queue, None  # (several writers: the fenced-ack check has none to hold)

    @property
    def stops(self) -> collections.Counter[str]:
        total: collections.Counter[str] = collections.Counter()
        for writer in self.writers:
            total += writer.stops
        return total

    async def close(self) -> None:
        for writer in self.writers:
            await writer.close()


class Budget:
    """How many calls are left to make, shared by every caller."""

    def __init__(self, total: int) -> None:
        self.left = total

    def take(self) -> bool:
        self.left -= 1
        return self.left >= 0


class JumpingClock:
    """Unix time, off by an offset that jumps by up to ``jumps`` seconds either way about
    every ``every`` seconds; each jump is noted in ``history.clock_jumps``."""

    def __init__(self, jumps: float, every: float, seed: int, history: History) -> None:
        self.jumps, self.every, self.history = jumps, every, history
        self.rng = random.Random(f"clock-{seed}")
        self.offset = 0.0
        self._next = time.monotonic() + self.rng.expovariate(1 / every)

    def __call__(self) -> float:
        now = time.monotonic()
        if self.jumps and now >= self._next:
            self.offset = self.rng.uniform(-self.jumps, self.jumps)
            self.history.clock_jumps.append((now, self.offset))
            self._next = now + self.rng.expovariate(1 / self.every)
        return time.time() + self.offset


def queue_options(plan: Plan) -> dict[str, Any]:
    """The queue settings of a run: the plan's timeouts, retries without end, and every
    dedup id and completion remembered for the whole run."""
    return {
        "visibility_timeout": plan.visibility_timeout,
        "lease_ttl": plan.lease_ttl,
        "commit_timeout": plan.commit_timeout,
        "max_attempts": 1_000_000,
        "retry_delay": 0.01,
        "retry_delay_max": 0.05,
        "dedup_window": 86_400.0,
        "completed_retention": 86_400.0,
        "payload_cache_bytes": 1 << 20,
    }


def merged(finals: list[Final]) -> Final:
    """The queue of several partitions, from each partition's log."""
    return Final(
        remaining=[mid for final in finals for mid in final.remaining],
        total_enqueued=sum(final.total_enqueued for final in finals),
        completed=sum(final.completed for final in finals),
        read_at=max((final.read_at for final in finals), default=0.0),
    )


async def read_back(raw: Store) -> Final:
    """The queue in ``raw`` as its log and checkpoints say it is."""
    loaded = await snapshot.load(raw)
    await snapshot.fill_tables(raw, loaded.state, loaded.state.runs.untabled())
    messages = list(loaded.state.all())
    return Final(
        remaining=[rec.id for rec in messages if rec.state != DONE],
        total_enqueued=loaded.state.total_enqueued,
        completed=sum(1 for rec in messages if rec.state == DONE)
        + loaded.state.retention.completed.count,
        read_at=time.monotonic(),
    )


async def run_embedded(plan: Plan, target: Target | None = None) -> Report:
    """Run ``plan`` on a fresh queue (in memory unless ``target`` says where, with its
    faults); read the queue back and check the history."""
    target = target or in_memory(plan)
    history = History(visibility_timeout=plan.visibility_timeout)
    clock = JumpingClock(plan.clock_jumps, plan.jump_every, plan.seed, history)
    config = QueueConfig(**queue_options(plan), clock=clock)
    writer: _Writer | _Partitions = _Writer(target.store, config, history)
    targets = [target]
    if plan.partitions > 1:
        assert target.partition is not None, "this target has no partitions"
        targets += [target.partition(i) for i in range(1, plan.partitions)]
        first = _Writer(target.store, config, history, {"partitions": plan.partitions})
        rest = [_Writer(t.store, config, history) for t in targets[1:]]
        writer = _Partitions(target.store.url, [first, *rest])
    budget = Budget(plan.ops)
    started = time.monotonic()
    await writer.current()
    await run_calls(plan, [writer], history, budget)
    seconds = time.monotonic() - started
    target.schedule.enabled = False
    await writer.close()
    history.final = merged([await read_back(t.raw) for t in targets])
    return Report(
        plan,
        history,
        check(history),
        target.schedule.injected,
        writer.stops,
        seconds,
        target.schedule.partitions.spans,
        target.store.url.partition(":")[0],
    )


async def run_calls(plan: Plan, conns: Sequence[Conn], history: History, budget: Budget) -> None:
    """``plan.producers`` producers and ``plan.consumers`` consumers, the i-th of each
    calling through ``conns[i % len(conns)]``, until ``budget`` is spent; every call is
    recorded in ``history``."""

    def conn(i: int) -> Conn:
        return conns[i % len(conns)]

    await asyncio.gather(
        *(_produce(f"p{i}", conn(i), history, budget) for i in range(plan.producers)),
        *(_consume(f"c{i}", conn(i), history, budget, plan) for i in range(plan.consumers)),
    )


async def _call(
    process: str,
    kind: Any,
    writer: Conn,
    history: History,
    act: Callable[[Any], Awaitable[T]],
    **known: Any,
) -> tuple[Call, T | None]:
    """Make one call through the current writer and record it, with the writer that
    answered: the embedded one's token, or the one a broker's answer names."""
    queue, token = await writer.current()
    wall, invoked = time.time(), time.monotonic()
    result: T | None = None
    outcome: Outcome = "ok"
    error = None
    with answers() as seen:
        try:
            result = await act(queue)
        except KNOWN_FAILURES as exc:
            outcome, error = "fail", type(exc).__name__
        except S3QError as exc:  # OutcomeUnknown, or a store error the writer let through
            outcome, error = "unknown", type(exc).__name__
    call = Call(
        process,
        kind,
        invoked,
        time.monotonic(),
        outcome,
        wall=wall,
        writer=token if token is not None else seen.writer,
        error=error,
        **known,
    )
    history.calls.append(call)
    return call, result


async def _produce(process: str, writer: Conn, history: History, budget: Budget) -> None:
    n = 0
    while budget.take():
        dedup = f"{process}-{n}"
        call, mid = await _call(
            process,
            "enqueue",
            writer,
            history,
            # each producer a tenant: noisy ones are set aside, replayed and checkpointed too
            lambda q, d=dedup: q.enqueue(d.encode(), dedup_id=d, tenant=process),  # type: ignore[misc]
            dedup=dedup,
        )
        if call.outcome == "ok" and mid is not None:
            call.ids = [mid]
            n += 1  # else: the same dedup id again, as a careful producer retries


async def _consume(
    process: str, writer: Conn, history: History, budget: Budget, plan: Plan
) -> None:
    rng = random.Random(f"{plan.seed}-{process}")
    while budget.take():
        call, got = await _call(
            process,
            "dequeue",
            writer,
            history,
            lambda q: q.dequeue(max_messages=8, wait=0.05),
        )
        messages: list[Message] = got or []
        if not messages:
            if budget.left <= 0:
                return
            continue
        call.ids = [m.id for m in messages]
        call.receipts = [m.receipt or "" for m in messages]
        call.dedups = [m.dedup_id for m in messages]
        failing = [m for m in messages if rng.random() < plan.fail_rate]
        done = [m for m in messages if m not in failing]
        for m in failing:
            budget.take()
            await _call(
                process,
                "fail",
                writer,
                history,
                lambda q, m=m: q.fail(m, "injected by the workload"),  # type: ignore[misc]
                ids=[m.id],
                receipts=[m.receipt or ""],
            )
        if done:
            budget.take()
            await _call(
                process,
                "complete",
                writer,
                history,
                lambda q, d=done: q.complete_batch(d),  # type: ignore[misc]
                ids=[m.id for m in done],
                receipts=[m.receipt or "" for m in done],
            )


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(spans: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in spans)
