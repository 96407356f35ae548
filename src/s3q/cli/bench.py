"""``s3q bench``: throughput, latency and cost per message of one queue, phase by phase.

Phases: ``enqueue`` (producers enqueue N messages, in batches of ``batch``),
``dequeue+complete`` (consumers lease and acknowledge them, each batch with the call that takes
the next), ``mixed`` (producers and consumers together, N more), and with a ``rate``, ``paced
enqueue`` (single enqueues sent on a fixed schedule, latency taken from each one's scheduled
time, so a stall is not hidden by the senders waiting it out).

The queue (``queue``, in ``store``) is embedded in the benchmark's process, or served by a
broker (``server``): one started on the store in a child process, or one already running at a
URL. The report is a table for people (:func:`print_report`) or a JSON document
(:func:`summary`).
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from ..api import open_async
from ..message import Message
from ..prices import S3
from ..store import queue_url
from ..surface import AsyncQueueSurface

if TYPE_CHECKING:
    pass


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
    #: the requests of a million messages at S3's list prices (``s3q.prices.S3``)
    dollars_per_million: float
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
    store: str | None  # the store the queue lives in; None: a temporary directory
    messages: int
    size: int
    batch: int
    producers: int
    consumers: int
    server: str | None = None  # "start": a broker in a child process; else a broker's URL
    rate: float | None = None  # paced single enqueues per second, in total
    queue: str = "bench"  # the queue's name in the store (or on the broker)


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
    q: AsyncQueueSurface, meter: _Meter, quota: list[int], batch: int, payload: bytes
) -> None:
    while quota[0] > 0:
        n = min(batch, quota[0])
        quota[0] -= n
        if n == 1:
            await meter.timed(q.enqueue(payload), 1)
        else:
            await meter.timed(q.enqueue_batch([payload] * n), n)


async def _paced(q: AsyncQueueSurface, meter: _Meter, times: list[float], payload: bytes) -> None:
    """Single enqueues, each sent at its time (loop clock); latency counted from that time."""
    loop = asyncio.get_running_loop()
    for due in times:
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        await q.enqueue(payload)
        meter.latencies.append(loop.time() - due)
        meter.done += 1


async def _consume(q: AsyncQueueSurface, meter: _Meter, target: int, batch: int) -> None:
    """Lease batches, completing each with the call that takes the next (``dequeue``'s
    ``complete``: one call and one commit per batch). A batch counts once its completion is
    durable; its latency runs from the call that leased it to the answer of the one that
    completed it."""
    held: list[Message] = []
    held_since = 0.0
    while meter.done < target:
        started = time.perf_counter()
        msgs = await q.dequeue(max_messages=batch, wait=0.0 if held else 0.05, complete=held)
        if held:
            meter.latencies.append(time.perf_counter() - held_since)
            meter.done += len(held)
        held, held_since = msgs, started
    if held:  # (none: every message is counted, and only once its completion is durable)
        await q.complete_batch(held)


# Completed ids are not kept and garbage has no grace: the figures show storage at rest.
def _options(config: BenchConfig) -> dict[str, Any]:
    return dict(
        max_message_size=max(config.size, 1),
        visibility_timeout=300.0,
        completed_retention=0.0,
        gc_grace=0.0,
    )


class _Embedded:
    """The queue in this process."""

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        self.url, self.options = url, options
        self.queue: AsyncQueueSurface
        self.pid: int | None = None  # the process that serves the queue, if not this one

    async def open(self) -> None:
        self.queue = await open_async(self.url, **self.options)

    def for_task(self) -> AsyncQueueSurface:
        """The queue as one producer or consumer task sees it."""
        return self.queue

    async def reopen(self) -> float | None:
        """Close and open again; the seconds the open took."""
        await self.queue.close()
        started = time.perf_counter()
        await self.open()
        return time.perf_counter() - started

    async def close(self) -> None:
        await self.queue.close()


class _Served(_Embedded):
    """The queue behind a broker: one at ``url``, or one started here on ``store`` (url None)."""

    def __init__(self, url: str | None, store: str, name: str, options: dict[str, Any]) -> None:
        super().__init__(store, options)
        self.broker, self.name = url, name
        self._child: subprocess.Popen[bytes] | None = None
        self._clients: list[Any] = []

    async def open(self) -> None:

        if self.broker is None:
            self.broker = await asyncio.to_thread(self._start)
        self.queue = self.for_task()

    def for_task(self) -> AsyncQueueSurface:
        """A client of its own: each task is one client of the broker, as in production."""
        from ..client import connect_async

        assert self.broker is not None
        client = connect_async(self.broker)
        self._clients.append(client)
        return client.queue(self.name)

    def _start(self) -> str:
        from ..broker import spawn

        self._child, url = spawn(self.url, options=self.options)
        self.pid = self._child.pid
        return url

    async def reopen(self) -> float | None:
        return None  # the broker keeps the queue open

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self._clients))
        if self._child is not None:
            self._child.terminate()
            await asyncio.to_thread(self._child.wait, 30)


def _peak_rss_of(pid: int | None) -> float:
    """Peak RSS of process ``pid`` (this one if None), MiB."""
    if pid is None:
        return _peak_rss_mib()
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def run(
    config: BenchConfig, progress: Callable[[str, int, int], None]
) -> tuple[list[PhaseResult], Storage | None]:
    """Run every phase; ``progress(phase, done, total)`` is called a few times a second.
    Storage figures (reopen, objects at rest) only for an embedded queue."""
    tmp = None
    store = config.store
    if store is None and config.server in (None, "start"):
        tmp = tempfile.mkdtemp(prefix="s3q-bench-")
        store = f"file://{tmp}"
    options = _options(config)
    target: _Embedded
    if config.server is None:
        assert store is not None
        target = _Embedded(queue_url(store, config.queue), options)
    else:
        broker = None if config.server == "start" else config.server
        target = _Served(broker, store or "", config.queue, options)
    await target.open()
    try:
        return await _phases(config, target, progress)
    finally:
        await target.close()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


async def _phases(
    config: BenchConfig, target: _Embedded, progress: Callable[[str, int, int], None]
) -> tuple[list[PhaseResult], Storage | None]:
    """Every phase in turn on ``target``'s queue, emptied first; then, for an embedded queue,
    the storage figures (the reopen is timed between the enqueue and the dequeue phases)."""
    await target.queue.configure()  # a broker makes the queue (a purge alone would be a 404)
    await target.queue.purge()
    work = _Workload(config, target)

    async def phase(name: str, does: Callable[[_Meter], list[Awaitable[Any]]]) -> PhaseResult:
        return await _measure(target, config.size, name, does, config.messages, progress)

    results = [await phase("enqueue", work.enqueue)]
    reopen = await target.reopen()
    reopen_rss = _peak_rss_mib()
    results.append(await phase("dequeue+complete", work.dequeue))
    results.append(await phase("mixed", work.mixed))
    if config.rate:
        results.append(await phase(f"paced enqueue {config.rate:g}/s", work.paced))
    q = target.queue
    while batch := await q.dequeue(max_messages=1000):  # leftovers of the paced phase
        await q.complete_batch(batch)
    if reopen is None:
        return results, None
    return results, await _storage(q, reopen, reopen_rss)


class _Workload:
    """What each phase runs: its producer and consumer tasks on ``target``'s queue (each task
    with a queue of its own, :meth:`_Embedded.for_task`), ``config.messages`` each."""

    def __init__(self, config: BenchConfig, target: _Embedded) -> None:
        self.config, self.target = config, target
        self.payload = b"x" * config.size

    def _queues(self, count: int) -> list[AsyncQueueSurface]:
        return [self.target.for_task() for _ in range(count)]

    def enqueue(self, meter: _Meter) -> list[Awaitable[Any]]:
        """The producers, enqueueing the messages between them in batches."""
        quota = [self.config.messages]  # shared: each producer takes a batch of it at a time
        return [
            _produce(q, meter, quota, self.config.batch, self.payload)
            for q in self._queues(self.config.producers)
        ]

    def dequeue(self, meter: _Meter) -> list[Awaitable[Any]]:
        """The consumers, leasing and completing the messages between them."""
        count, batch = self.config.messages, self.config.batch
        return [_consume(q, meter, count, batch) for q in self._queues(self.config.consumers)]

    def mixed(self, meter: _Meter) -> list[Awaitable[Any]]:
        """Producers and consumers together; only the consumers' figures are measured."""
        sent = _Meter()  # producers' latencies are not the consumers' figures
        return [*self.enqueue(sent), *self.dequeue(meter)]

    def paced(self, meter: _Meter) -> list[Awaitable[Any]]:
        """The producers, sending single enqueues at ``config.rate`` a second between them."""
        rate, producers = self.config.rate, self.config.producers
        assert rate, "a paced phase needs a rate"
        start = asyncio.get_running_loop().time() + 0.1
        times = [start + i / rate for i in range(self.config.messages)]
        return [
            _paced(q, meter, times[i::producers], self.payload)
            for i, q in enumerate(self._queues(producers))
        ]


async def _measure(
    target: _Embedded,
    size: int,
    name: str,
    work: Callable[[_Meter], list[Awaitable[Any]]],
    total: int,
    progress: Callable[[str, int, int], None],
) -> PhaseResult:
    """Phase ``name``: the tasks of ``work`` run to their end (``progress`` told a few times a
    second), and its figures reckoned from the queue's stats before and after (messages of
    ``size`` bytes)."""
    q = target.queue
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
    puts, gets = after.store_puts - before.store_puts, after.store_gets - before.store_gets
    return PhaseResult(
        phase=name,
        messages=meter.done,
        seconds=round(seconds, 4),
        msg_per_s=round(meter.done / seconds, 1),
        mib_per_s=round(meter.done * size / seconds / 2**20, 2),
        latency_ms={k: round(v, 3) for k, v in _percentiles(meter.latencies).items()},
        puts_per_msg=round(puts / count, 6),
        gets_per_msg=round(gets / count, 6),
        dollars_per_million=round(S3.dollars(puts, gets) / count * 1e6, 4),
        bytes_written_per_msg=round(
            (after.store_bytes_written - before.store_bytes_written) / count, 1
        ),
        commits=after.commits - before.commits,
        peak_rss_mib=round(_peak_rss_of(target.pid), 1),
    )


async def _storage(q: AsyncQueueSurface, reopen: float, reopen_rss: float) -> Storage:
    """The storage figures of queue ``q`` at rest, after one garbage collection and after two
    (``reopen``/``reopen_rss``: what its reopen took)."""
    first = await q.compact()
    second = await q.compact()  # collects what the first pass relocated, if anything
    return Storage(
        reopen_seconds=round(reopen, 3),
        reopen_rss_mib=round(reopen_rss, 1),
        objects_after_one_gc=first.objects,
        bytes_after_one_gc=first.bytes,
        objects_after_two_gc=second.objects,
        bytes_after_two_gc=second.bytes,
    )


def as_dicts(results: list[PhaseResult]) -> list[dict[str, Any]]:
    """The phases' figures as plain dicts."""
    return [asdict(r) for r in results]


def summary(
    config: BenchConfig, results: list[PhaseResult], storage: Storage | None, command: str
) -> dict[str, Any]:
    """The report of ``s3q bench --json``: the command, its config, each phase, storage."""
    return {
        "command": command,
        "config": vars(config),
        "phases": as_dicts(results),
        "storage": None if storage is None else vars(storage),
    }


def results_table(config: BenchConfig, results: list[PhaseResult]) -> Table:
    """The phases' figures, one row each."""
    where = "" if config.server is None else " through a broker"
    table = Table(
        title=f"s3q bench{where}: {config.messages:,} x {config.size} B, batch {config.batch}, "
        f"{config.producers} producers, {config.consumers} consumers"
    )
    for col in (
        "phase",
        "msg/s",
        "MiB/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "max ms",
        "PUT/msg",
        "GET/msg",
        "$/M msgs (S3)",
        "B written/msg",
        "commits",
        "peak RSS MiB",
    ):
        table.add_column(col, justify="left" if col == "phase" else "right")
    for r in results:
        lat = r.latency_ms
        table.add_row(
            r.phase,
            f"{r.msg_per_s:,.0f}",
            f"{r.mib_per_s:,.1f}",
            f"{lat['p50']:.2f}",
            f"{lat['p95']:.2f}",
            f"{lat['p99']:.2f}",
            f"{lat['max']:.2f}",
            f"{r.puts_per_msg:.4f}",
            f"{r.gets_per_msg:.4f}",
            f"{r.dollars_per_million:,.3f}",
            f"{r.bytes_written_per_msg:,.0f}",
            f"{r.commits:,}",
            f"{r.peak_rss_mib:,.0f}",
        )
    return table


def storage_line(messages: int, storage: Storage) -> str:
    """The reopen and storage-at-rest figures in one sentence."""
    return (
        f"reopen with {messages:,} pending: {storage.reopen_seconds:.2f} s "
        f"(peak RSS {storage.reopen_rss_mib:,.0f} MiB); after all completed and one GC pass: "
        f"{storage.objects_after_one_gc} objects, {storage.bytes_after_one_gc / 2**20:.2f} MiB; "
        f"after two: {storage.objects_after_two_gc} objects, "
        f"{storage.bytes_after_two_gc / 2**20:.2f} MiB"
    )


def print_report(
    console: Console,
    config: BenchConfig,
    results: list[PhaseResult],
    storage: Storage | None,
    command: str,
) -> None:
    """The report for people: the table, the storage figures, the command that ran."""
    console.print(results_table(config, results))
    if storage is not None:
        console.print(storage_line(config.messages, storage))
    console.print(f"command: {command}")
