"""A soak: brokers over S3 through the fault proxy, a steady mixed load for a long time, leaders
killed and stalled now and then; every call recorded, the brokers and the store sampled.

:func:`run_soak` starts ``plan.brokers`` brokers (:class:`~fault_harness.cluster.Brokers`), each
reaching the S3 server through its own :class:`~s3q.faults.proxy.FaultProxy`, and three queues:

- ``native``: batch producers (``enqueue_batch``; some messages delayed, some in groups, each of
  a tenant) and batch consumers (``dequeue`` then ``complete_batch``), through s3q's client
  given every broker;
- ``sqs.fifo``: single-message SQS clients through boto3 (send with a dedup id and a group,
  receive, delete), each given one broker and moving to the next when it cannot reach it or
  it answers that it cannot serve;
- ``jobs``: a producer of single messages and a :class:`~s3q.worker.Worker` whose handler fails
  some once (retried) and some always (dead letters).

About every ``plan.disrupt_every`` seconds the broker leading one of the queues (in turn) is
killed (SIGKILL, started again on its port once another broker serves the queue) or stalled
(SIGSTOP for ``lease_ttl`` + 2 s, then SIGCONT), kills and stalls alternating. Every
``plan.sample_every`` seconds each broker's RSS and open descriptors are read from /proc, and
the store's objects and bytes, each queue's log objects not yet checkpointed and those a
checkpoint made garbage but collection has not deleted yet, and each queue's backlog. At the end
the queues are read back and each one's history is checked (:func:`s3q.faults.checker.check`).
:mod:`fault_harness.series` turns a :class:`SoakRun` into figures over time and the targets.

The brokers name the writer that answered each native call (``s3q-writer``,
:mod:`s3q.wire.answers`), but the soak does not record it yet (the fault run of
:mod:`.cluster` does), so the fenced-ack check has nothing to go on here; a fenced writer's
acknowledgement would show as a lost or resurrected message, or a double lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import random
import signal
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

from fault_harness.cluster import Brokers, leader
from fault_harness.workload import KNOWN_FAILURES, read_back
from s3q.client import AsyncRemoteQueue, answers, connect_async
from s3q.client.requests import cluster
from s3q.client.stalls import PROBE_EVERY, STALL_TIMEOUT, BrokerStalled
from s3q.errors import S3QError
from s3q.faults.checker import Call, History, Outcome, Violation, check, first_answers
from s3q.faults.proxy import FaultProxy
from s3q.faults.schedule import REALISTIC, FaultProfile
from s3q.message import Message
from s3q.store import Store, open_store, queue_url
from s3q.worker import Completed, Dead, Event, Worker

T = TypeVar("T")

NATIVE, SQS, JOBS = "native", "sqs.fifo", "jobs"
SQS_WAIT = 1  # seconds an SQS receive waits for a message
QUEUES = (NATIVE, SQS, JOBS)


@dataclass
class SoakPlan:
    """What a soak runs, for how long, and the settings of its brokers' queues."""

    seconds: float = 3600.0
    seed: int = 1
    profile: FaultProfile = REALISTIC
    brokers: int = 3
    producers: int = 2
    consumers: int = 2
    batch: int = 20
    rate: float = 200.0  # native messages enqueued a second, all producers together
    sqs_clients: int = 2
    sqs_rate: float = 4.0  # messages each SQS client sends a second (and receives, deletes)
    job_rate: float = 10.0  # messages enqueued for the worker a second
    worker_concurrency: int = 4
    delayed: float = 0.1  # share of native messages delayed by up to delay_max
    delay_max: float = 5.0
    grouped: float = 0.1  # share of native messages in one of ``groups`` groups
    groups: int = 8
    tenants: int = 4
    disrupt_every: float = 300.0  # 0: no kills or stalls
    sample_every: float = 60.0
    lease_ttl: float = 4.0
    visibility_timeout: float = 10.0
    store_timeout: float = 1.0
    commit_timeout: float = 5.0
    gc_grace: float = 300.0
    checkpoint_interval: float = 60.0
    #: seconds each queue remembers completed messages (their memory grows until it passes)
    completed_retention: float = 3600.0
    drain: float = 10.0  # seconds consumers go on after the producers stop

    def broker_options(self) -> dict[str, Any]:
        return {
            "lease_ttl": self.lease_ttl,
            "visibility_timeout": self.visibility_timeout,
            "store_timeout": self.store_timeout,
            "commit_timeout": self.commit_timeout,
            "gc_grace": self.gc_grace,
            "checkpoint_interval": self.checkpoint_interval,
            "completed_retention": self.completed_retention,
            "max_attempts": 3,
            "retry_delay": 0.2,
            "retry_delay_max": 1.0,
        }


class Sample(NamedTuple):
    """One call as a client made it: its queue, kind, when sent and answered (monotonic), the
    error's name (None: ok), how many messages it moved when ok, and the error's text (its
    start: what a timeline prints)."""

    queue: str
    kind: str
    invoked: float
    returned: float
    error: str | None
    messages: int
    detail: str = ""


DETAIL = 160  # characters of an error's text a sample keeps

#: kinds whose samples count messages finished (completed, deleted, done by the worker)
FINISHING = frozenset({"complete_batch", "sqs_delete", "worker_done"})
#: kinds whose samples count messages enqueued
#: kinds recorded only to count messages (no latency of their own)
UNTIMED = frozenset({"worker_done"})


@dataclass
class Disruption:
    """A leader killed or stalled: when (monotonic), and which queues it led then."""

    kind: str  # "kill" or "stall"
    broker: str
    queues: list[str]
    started: float
    ended: float = 0.0  # killed: started again; stalled: woken
    #: queue -> (the broker that led it next, when its lease first named that broker); the
    #: broker is None if none had by ``started`` + 4 ttl
    takers: dict[str, tuple[str | None, float]] = field(default_factory=dict)


@dataclass
class Point:
    """What was read at one sampling instant (``at``: seconds into the run)."""

    at: float
    rss: dict[str, int | None]  # broker URL -> bytes (None: not running)
    fds: dict[str, int | None]
    store_rss: int | None  # the S3 server's process
    objects: int
    bytes: int
    unchecked: dict[str, int]  # queue -> log objects after its newest checkpoint
    garbage: dict[str, int]  # queue -> log objects before its newest checkpoint, not deleted
    checkpoint: dict[str, int]  # queue -> its newest checkpoint's sequence number
    backlog: dict[str, int]  # queue -> messages not finished (pending, delayed, leased, retry)
    #: queue -> its objects and their bytes (log, checkpoints, leases, settings: all of it)
    queue_usage: dict[str, tuple[int, int]]
    dead: dict[str, int]
    upstream_p50: float | None  # the S3 server's own time per request since the last point
    upstream_p99: float | None
    leaders: dict[str, str | None] = field(default_factory=dict)  # queue -> its lease's broker


@dataclass
class SoakRun:
    """Everything a soak recorded (times monotonic, ``started`` the run's start)."""

    plan: SoakPlan
    started: float
    seconds: float
    samples: list[Sample]
    points: list[Point]
    disruptions: list[Disruption]
    partitions: list[tuple[float, float]]
    histories: dict[str, History]
    violations: dict[str, list[Violation]]
    injected: dict[str, int]
    worker_stops: list[str] = field(default_factory=list)  # what ended the worker early
    dead_letters: int = 0
    sample_failures: list[str] = field(default_factory=list)
    #: broker URL -> the partitions of its store (its proxy's), (start, end) monotonic
    partitions_of: dict[str, list[tuple[float, float]]] = field(default_factory=dict)


@dataclass
class Made(Generic[T]):
    """One call of s3q's client as the soak saw it: its outcome, error, result, times, and the
    writer that answered (the broker's ``s3q-writer``, if it named one)."""

    outcome: Outcome
    error: str | None
    result: T | None
    invoked: float
    returned: float
    writer: str | None


class _Recorder:
    """Samples and one history per queue; callable from the event loop and from threads."""

    def __init__(self, plan: SoakPlan) -> None:
        self.samples: list[Sample] = []
        self.histories = {
            q: History(plan.visibility_timeout, plan.completed_retention) for q in QUEUES
        }

    async def call(
        self, queue: str, kind: str, act: Callable[[], Awaitable[T]], messages: int = 1
    ) -> Made[T]:
        """Make one call of s3q's client and sample it."""
        invoked = time.monotonic()
        result: T | None = None
        outcome: Outcome = "ok"
        error, detail = None, ""
        with answers() as seen:
            try:
                result = await act()
            except KNOWN_FAILURES as exc:
                outcome, error, detail = "fail", type(exc).__name__, str(exc)[:DETAIL]
            except S3QError as exc:
                outcome, error, detail = "unknown", type(exc).__name__, str(exc)[:DETAIL]
        returned = time.monotonic()
        moved = messages if outcome == "ok" else 0
        if kind == "dequeue" and isinstance(result, list):
            moved = len(result)
        self.samples.append(Sample(queue, kind, invoked, returned, error, moved, detail))
        return Made(outcome, error, result, invoked, returned, seen.writer)

    def delivered(
        self,
        queue: str,
        process: str,
        invoked: float,
        returned: float,
        ids: list[str],
        receipts: list[str],
        dedups: list[str | None],
        writer: str | None = None,
    ) -> None:
        """A dequeue by ``process`` delivered ``ids``, with these receipts and dedup ids
        (``writer``: the one that answered, if known)."""
        self.histories[queue].calls.append(
            Call(
                process,
                "dequeue",
                invoked,
                returned,
                "ok",
                ids=ids,
                receipts=receipts,
                dedups=dedups,
                writer=writer,
            )
        )


def _enqueued(
    process: str,
    invoked: float,
    returned: float,
    outcome: Outcome,
    wall: float,
    dedup: str,
    mid: str | None,
    error: str | None,
    writer: str | None = None,
) -> Call:
    """The history's record of one message enqueued (``mid``: the id answered, if any;
    ``writer``: the one that answered, if known)."""
    return Call(
        process,
        "enqueue",
        invoked,
        returned,
        outcome,
        wall=wall,
        dedup=dedup,
        ids=[mid] if mid else [],
        error=error,
        writer=writer,
    )


def _completed(
    process: str,
    invoked: float,
    returned: float,
    outcome: Outcome,
    ids: list[str],
    receipts: list[str],
    error: str | None,
    writer: str | None = None,
) -> Call:
    """The history's record of messages completed (deleted), each by its receipt
    (``writer``: the one that answered, if known)."""
    return Call(
        process,
        "complete",
        invoked,
        returned,
        outcome,
        ids=ids,
        receipts=receipts,
        error=error,
        writer=writer,
    )


async def run_soak(
    plan: SoakPlan,
    upstream: str,
    bucket: str,
    options: dict[str, Any],
    store_pid: int | None = None,
) -> SoakRun:
    """Soak ``plan.brokers`` brokers over a fresh root in ``bucket`` of the S3 server at
    ``upstream`` (``options``: how to reach it directly; ``store_pid``: its process, whose RSS
    is sampled too), then read the queues back and check their histories."""
    root = f"s3://{bucket}/soak-{uuid.uuid4().hex[:8]}"
    proxies = [
        FaultProxy(upstream, plan.profile, plan.seed * 1000 + i, 2 * plan.store_timeout)
        for i in range(plan.brokers)
    ]
    rec = _Recorder(plan)
    raw = {q: open_store(queue_url(root, q), options) for q in QUEUES}
    whole = open_store(root, options)
    disruptions: list[Disruption] = []
    points: list[Point] = []
    worker_stops: list[str] = []
    sample_failures: list[str] = []
    dead = [0]
    with contextlib.ExitStack() as stack:
        for proxy in proxies:
            stack.enter_context(proxy)
        brokers = stack.enter_context(Brokers(root, proxies, {**options, **plan.broker_options()}))
        client = connect_async(brokers.urls, timeout=plan.commit_timeout + 5)
        try:
            sqs_url = await asyncio.to_thread(_create_sqs_queue, brokers.urls[0], plan)
            started = time.monotonic()
            stop_producers, stop_consumers, stop_sampling = (asyncio.Event() for _ in range(3))
            threads_stop = threading.Event()
            producers = [
                asyncio.ensure_future(
                    _produce(f"p{i}", client.queue(NATIVE), rec, plan, i, stop_producers)
                )
                for i in range(plan.producers)
            ] + [
                asyncio.ensure_future(_produce_jobs(client.queue(JOBS), rec, plan, stop_producers))
            ]
            consumers = [
                asyncio.ensure_future(
                    _consume(f"c{i}", client.queue(NATIVE), rec, plan, stop_consumers)
                )
                for i in range(plan.consumers)
            ] + [
                asyncio.ensure_future(
                    _work(client.queue(JOBS), rec, plan, stop_consumers, worker_stops, dead)
                )
            ]
            sqs = [
                asyncio.ensure_future(
                    asyncio.to_thread(
                        _sqs_client, i, brokers.urls, sqs_url, rec, plan, threads_stop
                    )
                )
                for i in range(plan.sqs_clients)
            ]
            sampler = asyncio.ensure_future(
                _sample_every(
                    plan,
                    started,
                    brokers,
                    proxies,
                    whole,
                    raw,
                    client,
                    store_pid,
                    points,
                    sample_failures,
                    stop_sampling,
                )
            )
            nemesis = asyncio.ensure_future(
                _disrupt(plan, brokers, raw, disruptions, stop_producers)
            )
            # the nemesis ends once no disruption fits before the end: the run does not
            await _paced(stop_producers, started + plan.seconds)
            stop_producers.set()
            threads_stop.set()
            await asyncio.gather(nemesis, *producers, *sqs)
            await asyncio.wait(consumers, timeout=plan.drain)
            stop_consumers.set()
            await asyncio.gather(*consumers)
            seconds = time.monotonic() - started
            stop_sampling.set()
            await sampler
        finally:
            await client.close()
        for proxy in proxies:
            proxy.schedule.enabled = False
        partitions_of = {
            url: list(brokers.proxy_of(url).schedule.partitions.spans) for url in brokers.urls
        }
    # the brokers closed their queues on SIGTERM: read what they left
    violations: dict[str, list[Violation]] = {}
    for name, store in raw.items():
        history = rec.histories[name]
        history.final = await read_back(store)
        # each writer's open, as the answers that named it show (the SQS endpoint's and the
        # worker's name none): the fenced-ack check runs over the native calls
        history.opens = first_answers(history.calls)
        violations[name] = check(history)
    injected: dict[str, int] = {}
    for proxy in proxies:
        for kind, count in proxy.schedule.injected.items():
            injected[kind] = injected.get(kind, 0) + count
    return SoakRun(
        plan,
        started,
        seconds,
        rec.samples,
        points,
        disruptions,
        sorted(span for p in proxies for span in p.schedule.partitions.spans),
        rec.histories,
        violations,
        injected,
        worker_stops,
        dead[0],
        sample_failures,
        partitions_of,
    )


async def _paced(stop: asyncio.Event, due: float) -> float:
    """Wait until monotonic time ``due`` or ``stop``; the next due time is the caller's."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), max(0.0, due - time.monotonic()))
    return due


async def _produce(
    process: str,
    queue: AsyncRemoteQueue,
    rec: _Recorder,
    plan: SoakPlan,
    index: int,
    stop: asyncio.Event,
) -> None:
    """Batches at a steady pace; a batch not acknowledged is sent again with its dedup ids."""
    rng = random.Random(f"{plan.seed}-{process}")
    history = rec.histories[NATIVE]
    interval = plan.batch * plan.producers / plan.rate
    due = time.monotonic() + interval * index / plan.producers
    n = 0
    while not stop.is_set():
        due = await _paced(stop, due) + interval
        items = []
        for k in range(n, n + plan.batch):
            item: dict[str, Any] = {
                "payload": b"%s-%d " % (process.encode(), k) + b"x" * 200,
                "dedup_id": f"{process}-{k}",
                "tenant": f"t{k % plan.tenants}",
            }
            if rng.random() < plan.delayed:
                item["delay"] = round(rng.uniform(0.1, plan.delay_max), 2)
            if rng.random() < plan.grouped:
                item["group"] = f"g{rng.randrange(plan.groups)}"
            items.append(item)
        n += plan.batch
        while True:
            made = await rec.call(
                NATIVE, "enqueue_batch", functools.partial(queue.enqueue_batch, items), len(items)
            )
            wall = time.time() - (time.monotonic() - made.invoked)
            for i, item in enumerate(items):
                history.calls.append(
                    _enqueued(
                        process,
                        made.invoked,
                        made.returned,
                        made.outcome,
                        wall,
                        item["dedup_id"],
                        made.result[i] if made.result else None,
                        made.error,
                        made.writer,
                    )
                )
            if made.outcome == "ok" or stop.is_set():
                break


async def _consume(
    process: str, queue: AsyncRemoteQueue, rec: _Recorder, plan: SoakPlan, stop: asyncio.Event
) -> None:
    history = rec.histories[NATIVE]
    while not stop.is_set():
        made = await rec.call(
            NATIVE, "dequeue", lambda: queue.dequeue(max_messages=plan.batch, wait=1.0), 0
        )
        got = made.result
        if made.outcome != "ok" or not got:
            continue
        ids, receipts = [m.id for m in got], [m.receipt or "" for m in got]
        dedups = [m.dedup_id for m in got]
        rec.delivered(
            NATIVE, process, made.invoked, made.returned, ids, receipts, dedups, made.writer
        )
        done = await rec.call(
            NATIVE, "complete_batch", functools.partial(queue.complete_batch, got), len(got)
        )
        history.calls.append(
            _completed(
                process,
                done.invoked,
                done.returned,
                done.outcome,
                ids,
                receipts,
                done.error,
                done.writer,
            )
        )


async def _produce_jobs(
    queue: AsyncRemoteQueue, rec: _Recorder, plan: SoakPlan, stop: asyncio.Event
) -> None:
    """Single enqueues for the worker: most succeed, some fail once, some always (dead)."""
    rng = random.Random(f"{plan.seed}-jobs")
    history = rec.histories[JOBS]
    due = time.monotonic()
    n = 0
    while not stop.is_set():
        due = await _paced(stop, due) + 1 / plan.job_rate
        fate = rng.choices([b"ok", b"retry", b"dead"], [0.85, 0.1, 0.05])[0]
        dedup = f"j-{n}"
        n += 1
        while True:
            wall = time.time()
            made = await rec.call(
                JOBS, "enqueue", functools.partial(queue.enqueue, fate, dedup_id=dedup)
            )
            history.calls.append(
                _enqueued(
                    "jobs",
                    made.invoked,
                    made.returned,
                    made.outcome,
                    wall,
                    dedup,
                    made.result,
                    made.error,
                    made.writer,
                )
            )
            if made.outcome == "ok" or stop.is_set():
                break


async def _work(
    queue: AsyncRemoteQueue,
    rec: _Recorder,
    plan: SoakPlan,
    stop: asyncio.Event,
    stops: list[str],
    dead: list[int],
) -> None:
    """A worker over ``jobs`` whose handler fails some messages once (retried) and some always
    (dead letters), serving until ``stop``; what else ends it is put in ``stops``. A handler's
    return is recorded as a completion of unknown outcome (its acknowledgement is batched, and
    may never land), the worker's ``Completed`` event, which comes once it is durable, as one
    that is done, sent when the handler returned (the writer stamps the completion later, and
    the checker's count of completions still within ``completed_retention`` goes by when a
    completion was sent: the event's own arrival is later than the stamp)."""
    history = rec.histories[JOBS]
    returned: dict[str, float] = {}  # message id -> when its handler last returned

    async def handle(message: Message) -> None:
        if message.payload == b"dead" or (message.payload == b"retry" and message.attempts <= 1):
            raise RuntimeError(f"the soak fails this one ({message.payload!r})")
        now = returned[message.id] = time.monotonic()
        history.calls.append(Call("worker", "complete", now, now, "unknown", ids=[message.id]))

    def on_event(event: Event) -> None:
        now = time.monotonic()
        if isinstance(event, Completed):
            sent = returned.pop(event.id, now)
            history.calls.append(Call("worker", "complete", sent, now, "ok", ids=[event.id]))
            rec.samples.append(Sample(JOBS, "worker_done", now, now, None, 1))
        elif isinstance(event, Dead):
            dead[0] += 1

    worker = Worker(
        queue,
        handle,
        concurrency=plan.worker_concurrency,
        visibility_timeout=plan.visibility_timeout,
        grace=plan.commit_timeout,
        on_event=on_event,
    )
    serving = asyncio.ensure_future(worker.serve())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait([serving, stopping], return_when=asyncio.FIRST_COMPLETED)
    if stop.is_set():
        worker.stop()
    else:
        stopping.cancel()
    try:
        await serving
    except S3QError as exc:
        stops.append(f"{type(exc).__name__}: {exc}"[:200])


def _sqs(url: str, plan: SoakPlan) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "sqs",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="soak",
        aws_secret_access_key="soak",
        # One attempt: the caller moves to the next broker. (botocore's legacy mode counts
        # max_attempts as retries: a second attempt doubled the time spent on a stalled
        # broker.) A read timeout that outlasts a takeover: a broker whose leader is away holds
        # the call until the queue is taken over, then answers it; a stalled broker is told
        # by probes (``_sqs_call``), not by cutting such a call short.
        config=Config(
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=1,
            read_timeout=SQS_WAIT + 4 * plan.lease_ttl,
        ),
    )


def _answers(url: str) -> bool:
    """Whether the broker at ``url`` answers a probe within ``STALL_TIMEOUT``."""
    import urllib3

    try:
        urllib3.request("GET", url + cluster().path, timeout=STALL_TIMEOUT, retries=False)
    except urllib3.exceptions.HTTPError:
        return False
    return True


def _sqs_call(pool: ThreadPoolExecutor, url: str, act: Callable[[], T]) -> T:
    """``act()``, a call to the broker at ``url``, awaited while the broker answers probes
    (one every ``PROBE_EVERY`` seconds once the call has taken that long), as s3q's own
    client awaits its calls (:mod:`s3q.client.stalls`): BrokerStalled if one goes
    unanswered (the call, left in flight, may still be applied)."""
    future = pool.submit(act)
    while True:
        try:
            return future.result(timeout=PROBE_EVERY)
        except TimeoutError:
            if not _answers(url):
                raise BrokerStalled(
                    f"{url} did not answer a probe within {STALL_TIMEOUT} s"
                ) from None


def _create_sqs_queue(url: str, plan: SoakPlan) -> str:
    answer = _sqs(url, plan).create_queue(
        QueueName=SQS,
        Attributes={
            "FifoQueue": "true",
            "VisibilityTimeout": str(int(plan.visibility_timeout)),
        },
    )
    return str(answer["QueueUrl"])


def _sqs_answer(exc: Exception) -> dict[str, Any]:
    """The error answer an SQS client's exception carries (empty if it has none)."""
    response = getattr(exc, "response", None)
    return response if isinstance(response, dict) else {}


def _sqs_error(exc: Exception) -> str:
    return str(_sqs_answer(exc).get("Error", {}).get("Code", type(exc).__name__))


def _sqs_message(exc: Exception) -> str:
    """The text of an SQS client's error answer (the exception's, if it has none)."""
    return str(_sqs_answer(exc).get("Error", {}).get("Message") or exc)


def _sqs_status(exc: Exception) -> int:
    """The HTTP status of an SQS client's error answer (0 if it has none)."""
    return int(_sqs_answer(exc).get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def _sqs_client(
    index: int,
    urls: list[str],
    queue: str,
    rec: _Recorder,
    plan: SoakPlan,
    stop: threading.Event,
) -> None:
    """Send, receive, delete, one message at a time, through broker ``urls[index]`` until it
    answers a 5xx (its store cut off, say) or cannot be reached (refused, or silent to a probe
    while a call is in flight: killed, stalled): then the next. As a load balancer with
    health checks does, a broker that could not be reached is left out for a lease ttl while
    another is there."""
    from botocore.exceptions import BotoCoreError, ClientError

    history = rec.histories[SQS]
    process = f"s{index}"
    at = index
    clients: dict[str, Any] = {}
    resting: dict[str, float] = {}  # broker -> until when it is left out (monotonic)
    pool = ThreadPoolExecutor(4, thread_name_prefix=f"soak-{process}")  # (calls left in flight)

    def call(kind: str, **kw: Any) -> tuple[Outcome, str | None, Any, float, float, float]:
        nonlocal at
        now = time.monotonic()  # from `at` on, the first broker not left out (else `at`)
        at += next(
            (i for i in range(len(urls)) if resting.get(urls[(at + i) % len(urls)], 0) <= now), 0
        )
        url = urls[at % len(urls)]
        sqs = clients.get(url) or clients.setdefault(url, _sqs(url, plan))
        wall, invoked = time.time(), time.monotonic()
        result, error, detail = None, None, ""
        try:
            result = _sqs_call(
                pool, url, functools.partial(getattr(sqs, kind), QueueUrl=queue, **kw)
            )
        except ClientError as exc:
            error, detail = _sqs_error(exc), f"{url}: {_sqs_message(exc)}"[:DETAIL]
            if _sqs_status(exc) >= 500:
                at += 1  # that broker cannot serve now: the next one
        except (BotoCoreError, BrokerStalled) as exc:
            error, detail = _sqs_error(exc), f"{url}: {exc}"[:DETAIL]
            resting[url] = time.monotonic() + plan.lease_ttl
            at += 1  # that broker cannot be reached: the next one
        returned = time.monotonic()
        moved = 1 if error is None else 0
        if kind == "receive_message" and result is not None:
            moved = len(result.get("Messages", []))
        name = {"send_message": "sqs_send", "receive_message": "sqs_receive"}.get(
            kind, "sqs_delete"
        )
        rec.samples.append(Sample(SQS, name, invoked, returned, error, moved, detail))
        return ("ok" if error is None else "unknown"), error, result, wall, invoked, returned

    try:
        n = 0
        due = time.monotonic()
        while not stop.is_set():
            stop.wait(max(0.0, due - time.monotonic()))
            due += 1 / plan.sqs_rate
            dedup = f"{process}-{n}"
            n += 1
            while True:
                outcome, error, sent, wall, invoked, returned = call(
                    "send_message",
                    MessageBody=dedup,
                    MessageGroupId=f"g{n % plan.groups}",
                    MessageDeduplicationId=dedup,
                )
                mid = sent["MessageId"] if sent else None
                history.calls.append(
                    _enqueued(process, invoked, returned, outcome, wall, dedup, mid, error)
                )
                if outcome == "ok" or stop.is_set():
                    break
            outcome, _, got, _, invoked, returned = call(
                "receive_message",
                MaxNumberOfMessages=1,
                WaitTimeSeconds=SQS_WAIT,
                AttributeNames=["MessageDeduplicationId"],
            )
            for m in (got or {}).get("Messages", []):
                handle = m["ReceiptHandle"]
                dedup_id = m.get("Attributes", {}).get("MessageDeduplicationId")
                rec.delivered(
                    SQS, process, invoked, returned, [m["MessageId"]], [handle], [dedup_id]
                )
                outcome, error, _, _, invoked, returned = call(
                    "delete_message", ReceiptHandle=handle
                )
                history.calls.append(
                    _completed(
                        process, invoked, returned, outcome, [m["MessageId"]], [handle], error
                    )
                )
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


async def _disrupt(
    plan: SoakPlan,
    brokers: Brokers,
    raw: dict[str, Store],
    disruptions: list[Disruption],
    stop: asyncio.Event,
) -> None:
    """Until ``plan.seconds`` pass: every ``plan.disrupt_every`` seconds, kill or stall (in
    turn) the broker leading the next queue."""
    if not plan.disrupt_every:
        return
    end = time.monotonic() + plan.seconds
    turn = 0
    watchers: list[asyncio.Future[None]] = []
    while time.monotonic() + plan.disrupt_every < end - 2 * plan.lease_ttl:
        await _paced(stop, time.monotonic() + plan.disrupt_every)
        if stop.is_set():
            break
        target = QUEUES[turn % len(QUEUES)]
        kind = ("kill", "stall")[turn % 2]
        turn += 1
        leaders = {q: await leader(store) for q, store in raw.items()}
        url = leaders[target]
        if url not in brokers.children:
            continue
        led = [q for q, u in leaders.items() if u == url]
        disruption = Disruption(kind, url, led, time.monotonic())
        disruptions.append(disruption)
        watchers.append(asyncio.ensure_future(_watch_takers(plan, raw, disruption)))
        if kind == "kill":
            brokers.kill(url)
            # started again once another broker serves its queues
            await _paced(stop, disruption.started + plan.lease_ttl + 2)
            await asyncio.to_thread(brokers.restart, url)
        else:
            pid = brokers.children[url].pid
            os.kill(pid, signal.SIGSTOP)
            try:
                await _paced(stop, disruption.started + plan.lease_ttl + 2)
            finally:
                os.kill(pid, signal.SIGCONT)
        disruption.ended = time.monotonic()
    await asyncio.gather(*watchers)


async def _watch_takers(plan: SoakPlan, raw: dict[str, Store], d: Disruption) -> None:
    """Read the writer lease of each queue ``d``'s broker led until it names another broker
    (or ``4 * lease_ttl`` passed): ``d.takers``."""
    left = set(d.queues)
    give_up = d.started + 4 * plan.lease_ttl
    while left and time.monotonic() < give_up:
        for q in sorted(left):
            now = await leader(raw[q])
            if now is not None and now != d.broker:
                d.takers[q] = (now, time.monotonic())
                left.discard(q)
        await asyncio.sleep(0.05)  # polling the store: the lease has no event to await
    for q in left:
        d.takers[q] = (None, give_up)


def _proc(pid: int) -> tuple[int | None, int | None]:
    """A process's resident memory (bytes) and open descriptors, from /proc."""
    try:
        with open(f"/proc/{pid}/status") as status:
            rss = next(
                (int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:")),
                None,
            )
        return rss, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, ValueError):
        return None, None


async def _sample_every(
    plan: SoakPlan,
    started: float,
    brokers: Brokers,
    proxies: list[FaultProxy],
    whole: Store,
    raw: dict[str, Store],
    client: Any,
    store_pid: int | None,
    points: list[Point],
    failures: list[str],
    stop: asyncio.Event,
) -> None:
    due = started
    while not stop.is_set():
        due = await _paced(stop, due + plan.sample_every)
        try:
            points.append(
                await _point(
                    time.monotonic() - started, brokers, proxies, whole, raw, client, store_pid
                )
            )
        except Exception as exc:  # a point missed is reported, not fatal
            failures.append(f"{type(exc).__name__}: {exc}"[:200])


async def _point(
    at: float,
    brokers: Brokers,
    proxies: list[FaultProxy],
    whole: Store,
    raw: dict[str, Store],
    client: Any,
    store_pid: int | None,
) -> Point:
    from s3q.index import checkpoint
    from s3q.log import segment

    rss: dict[str, int | None] = {}
    fds: dict[str, int | None] = {}
    for url, child in brokers.children.items():
        rss[url], fds[url] = _proc(child.pid) if child.poll() is None else (None, None)
    objects, size = await whole.usage()
    unchecked, garbage, newest, backlog, dead, leaders = {}, {}, {}, {}, {}, {}
    usage: dict[str, tuple[int, int]] = {}
    for name, store in raw.items():
        leaders[name] = await leader(store)
        usage[name] = await store.usage()
        seqs = [s for k in await store.keys(segment.PREFIX) if (s := segment.seq_of(k)) is not None]
        ckpts = [
            s
            for k in await store.keys(checkpoint.PREFIX)
            if (s := checkpoint.seq_of(k)) is not None
        ]
        newest[name] = max(ckpts, default=-1)
        unchecked[name] = sum(1 for s in seqs if s > newest[name])
        garbage[name] = sum(1 for s in seqs if s < newest[name])
        with contextlib.suppress(S3QError, TimeoutError):  # its leader stalled, say
            stats = await asyncio.wait_for(client.queue(name).stats(), 5)
            backlog[name] = stats.pending + stats.delayed + stats.processing + stats.retry
            dead[name] = stats.dead
    upstream: list[float] = []
    for proxy in proxies:
        taken, proxy.upstream_seconds = proxy.upstream_seconds, []
        upstream += taken
    upstream.sort()
    return Point(
        at,
        rss,
        fds,
        _proc(store_pid)[0] if store_pid is not None else None,
        objects,
        size,
        unchecked,
        garbage,
        newest,
        backlog,
        usage,
        dead,
        upstream[len(upstream) // 2] if upstream else None,
        upstream[int(len(upstream) * 0.99)] if upstream else None,
        leaders,
    )
