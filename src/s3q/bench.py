"""``s3q bench``: throughput, latency and cost per message of one queue, phase by phase.

Phases: ``enqueue`` (producers enqueue N messages, in batches of ``batch``), ``dequeue+complete``
(consumers lease and acknowledge them), ``mixed`` (producers and consumers together, N more).
"""

from __future__ import annotations

import asyncio
import resource
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

from .api import AsyncQueue, open_async


@dataclass
class PhaseResult:
    """The figures of one phase."""

    phase: str
    messages: int
    seconds: float
    msg_per_s: float
    mib_per_s: float
    latency_ms: dict[str, float]  # per call: p50, p95, p99, max
    puts_per_msg: float
    gets_per_msg: float
    bytes_written_per_msg: float
    commits: int
    peak_rss_mib: float


@dataclass
class Storage:
    """Recovery and storage figures."""

    reopen_seconds: float  # close, then open with every enqueued message pending
    reopen_rss_mib: float
    objects_after_one_gc: int
    bytes_after_one_gc: int
    objects_after_two_gc: int
    bytes_after_two_gc: int


@dataclass
class BenchConfig:
    store: str | None
    messages: int
    size: int
    batch: int
    producers: int
    consumers: int


class _Meter:
    """Counts messages and per-call latencies of one phase."""

    def __init__(self) -> None:
        self.done = 0
        self.latencies: list[float] = []

    async def timed(self, call: Awaitable[Any], messages: int) -> Any:
        started = time.perf_counter()
        result = await call
        self.latencies.append(time.perf_counter() - started)
        self.done += messages
        return result


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0}
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    return {"p50": at(0.50), "p95": at(0.95), "p99": at(0.99), "max": ordered[-1] * 1000}


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


async def _produce(
    q: AsyncQueue, meter: _Meter, quota: list[int], batch: int, payload: bytes
) -> None:
    while quota[0] > 0:
        n = min(batch, quota[0])
        quota[0] -= n
        if n == 1:
            await meter.timed(q.enqueue(payload), 1)
        else:
            await meter.timed(q.enqueue_batch([payload] * n), n)


async def _consume(q: AsyncQueue, meter: _Meter, target: int, batch: int) -> None:
    async def round_trip() -> int:
        msgs = await q.dequeue(max_messages=batch, wait=0.05)
        if msgs:
            await q.complete_batch(msgs)
        return len(msgs)

    while meter.done < target:
        started = time.perf_counter()
        got = await round_trip()
        if got:
            meter.latencies.append(time.perf_counter() - started)
            meter.done += got


async def run(
    config: BenchConfig, progress: Callable[[str, int, int], None]
) -> tuple[list[PhaseResult], Storage]:
    """Run every phase; ``progress(phase, done, total)`` is called a few times a second."""
    tmp = None
    url = config.store
    if url is None:
        tmp = tempfile.mkdtemp(prefix="s3q-bench-")
        url = f"file://{tmp}/bench"
    # Completed ids are not kept and garbage has no grace: the figures show storage at rest.
    options = dict(
        max_message_size=max(config.size, 1),
        visibility_timeout=300.0,
        completed_retention=0.0,
        gc_grace=0.0,
    )
    q = await open_async(url, **options)
    try:
        await q.purge()
        payload = b"x" * config.size
        n = config.messages
        results = []

        async def phase(
            name: str, work: Callable[[_Meter], list[Awaitable[Any]]], total: int
        ) -> None:
            meter = _Meter()
            before = await q.stats()
            started = time.perf_counter()
            tasks = [asyncio.ensure_future(w) for w in work(meter)]
            while not all(t.done() for t in tasks):
                await asyncio.wait(tasks, timeout=0.25)
                progress(name, min(meter.done, total), total)
            for t in tasks:
                t.result()  # re-raise a failure
            seconds = time.perf_counter() - started
            after = await q.stats()
            count = max(meter.done, 1)
            results.append(
                PhaseResult(
                    phase=name,
                    messages=meter.done,
                    seconds=round(seconds, 4),
                    msg_per_s=round(meter.done / seconds, 1),
                    mib_per_s=round(meter.done * config.size / seconds / 2**20, 2),
                    latency_ms={k: round(v, 3) for k, v in _percentiles(meter.latencies).items()},
                    puts_per_msg=round((after.store_puts - before.store_puts) / count, 6),
                    gets_per_msg=round((after.store_gets - before.store_gets) / count, 6),
                    bytes_written_per_msg=round(
                        (after.store_bytes_written - before.store_bytes_written) / count, 1
                    ),
                    commits=after.commits - before.commits,
                    peak_rss_mib=round(_peak_rss_mib(), 1),
                )
            )

        def producers(meter: _Meter, quota: list[int]) -> list[Awaitable[Any]]:
            return [
                _produce(q, meter, quota, config.batch, payload) for _ in range(config.producers)
            ]

        def consumers(meter: _Meter, target: int) -> list[Awaitable[Any]]:
            return [_consume(q, meter, target, config.batch) for _ in range(config.consumers)]

        await phase("enqueue", lambda m: producers(m, [n]), n)
        await q.close()
        started = time.perf_counter()
        q = await open_async(url, **options)
        reopen = time.perf_counter() - started
        reopen_rss = _peak_rss_mib()
        await phase("dequeue+complete", lambda m: consumers(m, n), n)

        def mixed(meter: _Meter) -> list[Awaitable[Any]]:
            sent = _Meter()  # producers' latencies are not the consumers' figures
            return [*producers(sent, [n]), *consumers(meter, n)]

        await phase("mixed", mixed, n)
        while batch := await q.dequeue(max_messages=1000):  # none expected; be sure
            await q.complete_batch(batch)
        first = await q.compact()
        second = await q.compact()  # collects what the first pass relocated, if anything
        storage = Storage(
            reopen_seconds=round(reopen, 3),
            reopen_rss_mib=round(reopen_rss, 1),
            objects_after_one_gc=first.objects,
            bytes_after_one_gc=first.bytes,
            objects_after_two_gc=second.objects,
            bytes_after_two_gc=second.bytes,
        )
        return results, storage
    finally:
        await q.close()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def as_dicts(results: list[PhaseResult]) -> list[dict[str, Any]]:
    return [asdict(r) for r in results]
