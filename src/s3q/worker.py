"""Workers: run a handler over a queue's messages with concurrency, retries and clean shutdown.

A :class:`Worker` leases messages in batches, keeps a bounded buffer of them, hands each to the
handler (``concurrency`` at once), acknowledges successes in batches, fails the messages whose
handler raised (so the queue's retry with backoff, then dead-lettering, applies), and extends
the leases of messages still waiting or running so a slow handler keeps its message.
See docs/workers.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import logging
import math
import os
import queue as stdqueue
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from .api import AsyncQueue, Queue, open_async
from .broker.wire import is_broker_url
from .config import MAX_WAIT, split_options
from .engine import MAX_DEQUEUE
from .errors import InvalidArgument, QueueClosed, ReceiptExpired
from .message import Message
from .metrics import WorkerMetrics, serve_metrics
from .store import default_store, queue_url
from .surface import AsyncQueueSurface

__all__ = [
    "Completed",
    "Dead",
    "Event",
    "HandlerError",
    "HandlerImportError",
    "HandlerNotCallable",
    "HandlerNotFound",
    "HandlerOptions",
    "InvalidHandlerPath",
    "Retry",
    "Worker",
    "WorkerStarted",
    "WorkerStopped",
    "WorkerStopping",
    "handler",
    "handler_options",
    "load_handler",
    "run_worker",
]

logger = logging.getLogger("s3q.worker")

Handler: TypeAlias = Callable[[Message], Any]
if TYPE_CHECKING:
    from .client import AsyncRemoteQueue

H = TypeVar("H", bound=Callable[..., Any])

ADAPTIVE_PREFETCH_MAX = 1000  # the most an adaptive buffer holds
ACK_BATCH = 500  # acknowledgements that are flushed without waiting for ack_interval
REMOTE_VISIBILITY = 30.0  # seconds of lease through a broker, unless visibility_timeout is given


# --------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class WorkerStarted:
    """The worker is fetching messages."""

    queue: str
    concurrency: int
    prefetch: int | None  # None: adaptive
    visibility_timeout: float


@dataclass(frozen=True, slots=True)
class Completed:
    """A handler returned and the message's completion is durable."""

    id: str
    duration: float  # seconds the handler ran
    attempts: int  # deliveries, this one included
    result: Any  # what the handler returned
    message: Message = field(repr=False)


@dataclass(frozen=True, slots=True)
class Retry:
    """A handler raised; the message will be delivered again after a backoff."""

    id: str
    error: str
    attempts: int
    duration: float
    next_visible_at: float | None  # unix seconds when it is retried
    message: Message = field(repr=False)


@dataclass(frozen=True, slots=True)
class Dead:
    """A handler raised on the message's last attempt: it is now a dead letter."""

    id: str
    error: str
    attempts: int
    duration: float
    message: Message = field(repr=False)


@dataclass(frozen=True, slots=True)
class WorkerStopping:
    """A stop began: no more fetching; running handlers have ``grace`` seconds."""

    queue: str
    grace: float
    reason: str | None  # the error that stopped the worker, None on a stop request


@dataclass(frozen=True, slots=True)
class WorkerStopped:
    """The worker has stopped: acknowledgements flushed, unprocessed leases given back."""

    queue: str
    completed: int
    retried: int
    dead: int
    released: int  # leases given back unprocessed (prefetched, or handlers past the grace)
    error: str | None  # what stopped the worker, if it was not a stop request


Event: TypeAlias = WorkerStarted | Completed | Retry | Dead | WorkerStopping | WorkerStopped
EventHook: TypeAlias = Callable[[Event], object]


# --------------------------------------------------------------------------- errors


class HandlerError(InvalidArgument):
    """A handler named ``module:function`` cannot be loaded."""


class InvalidHandlerPath(HandlerError):
    """The handler path is not of the form ``package.module:function``."""


class HandlerImportError(HandlerError):
    """The handler's module is missing or raised while being imported."""


class HandlerNotFound(HandlerError):
    """The handler's module has no such attribute."""


class HandlerNotCallable(HandlerError):
    """The handler path names something that is not callable."""


# --------------------------------------------------------------------------- the decorator


@dataclass(frozen=True, slots=True)
class HandlerOptions:
    """What ``@s3q.worker.handler(...)`` recorded on a function."""

    queue: str  # a queue name under the default store, or a queue URL
    concurrency: int | None = None
    prefetch: int | None = None
    visibility_timeout: float | None = None
    grace: float | None = None
    options: Mapping[str, Any] = field(default_factory=dict)  # keywords of s3q.open


_MARK = "__s3q_handler__"


def handler(
    queue: str,
    *,
    concurrency: int | None = None,
    prefetch: int | None = None,
    visibility_timeout: float | None = None,
    grace: float | None = None,
    **options: Any,
) -> Callable[[H], H]:
    """Mark a function as the handler of ``queue`` (a name under the default store, or a URL).

    The function is returned unchanged; ``s3q worker module:function`` reads the options.
    Extra keywords are options of :func:`s3q.open` (``max_attempts=5``, ...).
    """
    if not isinstance(queue, str) or not queue:
        raise InvalidArgument(f"queue must be a non-empty string, got {queue!r}")
    _check_settings(
        1 if concurrency is None else concurrency,
        prefetch,
        visibility_timeout,
        0.0,
        0.0 if grace is None else grace,
        1.0,
    )
    split_options(options)  # an unknown or bad option fails here, not when the worker starts
    marked = HandlerOptions(queue, concurrency, prefetch, visibility_timeout, grace, options)

    def mark(fn: H) -> H:
        if not callable(fn):
            raise InvalidArgument(f"@handler decorates a callable, not {type(fn).__name__}")
        setattr(fn, _MARK, marked)
        return fn

    return mark


def handler_options(fn: object) -> HandlerOptions | None:
    """The options ``@handler`` recorded on ``fn``, if any."""
    marked = getattr(fn, _MARK, None)
    return marked if isinstance(marked, HandlerOptions) else None


# --------------------------------------------------------------------------- the worker


class _Held:
    """A lease this worker holds: the message and when the lease ends (monotonic clock)."""

    __slots__ = ("deadline", "msg")

    def __init__(self, msg: Message, deadline: float) -> None:
        self.msg = msg
        self.deadline = deadline


class _Threads:
    """Daemon threads for sync handlers: one that never returns cannot block the exit."""

    def __init__(self, size: int) -> None:
        self._jobs: stdqueue.SimpleQueue[tuple[Handler, Message, Future[Any]] | None] = (
            stdqueue.SimpleQueue()
        )
        self._size = size
        for i in range(size):
            threading.Thread(target=self._work, name=f"s3q-worker-{i}", daemon=True).start()

    def submit(self, fn: Handler, msg: Message) -> Future[Any]:
        fut: Future[Any] = Future()
        self._jobs.put((fn, msg, fut))
        return fut

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, msg, fut = job
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(msg))
            except BaseException as exc:
                fut.set_exception(exc)

    def shutdown(self) -> None:
        """Let idle threads exit; busy ones exit when their handler returns."""
        for _ in range(self._size):
            self._jobs.put(None)


def _is_async(fn: object) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - an object with an async __call__
    )


def _check_settings(
    concurrency: int,
    prefetch: int | None,
    visibility_timeout: float | None,
    ack_interval: float,
    grace: float,
    poll_wait: float,
) -> None:
    def seconds(name: str, value: object, positive: bool) -> None:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
            or (positive and value == 0)
        ):
            bound = "> 0" if positive else ">= 0"
            raise InvalidArgument(
                f"{name} must be a finite number of seconds {bound}, got {value!r}"
            )

    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise InvalidArgument(f"concurrency must be a positive integer, got {concurrency!r}")
    if prefetch is not None and (
        isinstance(prefetch, bool)
        or not isinstance(prefetch, int)
        or not 1 <= prefetch <= MAX_DEQUEUE
    ):
        raise InvalidArgument(
            f"prefetch must be None or an integer in 1..{MAX_DEQUEUE}, got {prefetch!r}"
        )
    if visibility_timeout is not None:
        seconds("visibility_timeout", visibility_timeout, True)
    seconds("ack_interval", ack_interval, False)
    seconds("grace", grace, False)
    seconds("poll_wait", poll_wait, True)
    if poll_wait > MAX_WAIT:
        raise InvalidArgument(f"poll_wait must be at most {MAX_WAIT:g} seconds, got {poll_wait!r}")


class Worker:
    """Runs ``handler`` on each message of ``queue``; :meth:`serve` or :meth:`run` it.

    ``queue``: an :class:`~s3q.AsyncQueue`, an :class:`~s3q.Queue` (the worker runs on that
    queue's event-loop thread), a broker's :class:`~s3q.client.AsyncRemoteQueue`, or a URL:
    a store's (opened with ``options`` and closed by the worker) or a broker's
    ``http(s)://host:port/NAME`` (its bearer token: ``options={"token": ...}`` or
    ``$S3Q_TOKEN``). Through a broker the lease defaults to 30 s unless
    ``visibility_timeout`` is given.
    ``handler(message)``: sync (run on ``concurrency`` threads) or async (``concurrency``
    awaited at once). Returning completes the message; raising fails it with
    ``"ExcType: text"``, so the queue retries it with backoff and then dead-letters it.
    ``prefetch``: the most messages leased but not yet started; None adapts it between
    ``2 * concurrency`` and 1000 to keep the handlers busy. ``visibility_timeout``: the lease
    taken and renewed (default: the queue's). ``ack_interval``: how long completions gather
    before one batch acknowledges them. ``grace``: seconds running handlers get after a stop.
    ``on_event``: called with each :data:`Event` (an awaitable result is awaited in the
    background); a hook that raises is logged. ``poll_wait``: the longest one dequeue waits
    for a message, which bounds how long an idle worker takes to stop.
    """

    def __init__(
        self,
        queue: AsyncQueue | Queue | AsyncRemoteQueue | str,
        handler: Handler,
        *,
        concurrency: int = 8,
        prefetch: int | None = None,
        visibility_timeout: float | None = None,
        ack_interval: float = 0.005,
        grace: float = 30.0,
        on_event: EventHook | None = None,
        metrics: WorkerMetrics | None = None,
        options: Mapping[str, Any] | None = None,
        poll_wait: float = 1.0,
    ) -> None:
        if not isinstance(queue, AsyncQueue | Queue | str) and not _is_remote(queue):
            raise InvalidArgument(
                "queue must be an s3q.AsyncQueue, an s3q.Queue, an s3q.client.AsyncRemoteQueue "
                f"or a URL, not {type(queue).__name__}"
            )
        if not callable(handler):
            raise InvalidArgument(f"handler must be callable, not {type(handler).__name__}")
        if on_event is not None and not callable(on_event):
            raise InvalidArgument(f"on_event must be callable, not {type(on_event).__name__}")
        if metrics is not None and not isinstance(metrics, WorkerMetrics):
            raise InvalidArgument(f"metrics must be a WorkerMetrics, not {type(metrics).__name__}")
        if options and not isinstance(queue, str):
            raise InvalidArgument("options apply only when the worker opens the queue from a URL")
        _check_settings(concurrency, prefetch, visibility_timeout, ack_interval, grace, poll_wait)
        if isinstance(queue, str) and is_broker_url(queue):
            unknown = set(options or {}) - {"token"}
            if unknown:
                raise InvalidArgument(
                    f"through a broker the only option is token, not {', '.join(sorted(unknown))}"
                )
        elif isinstance(queue, str):
            split_options(options or {})
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.prefetch = prefetch
        self.visibility_timeout = visibility_timeout
        self.ack_interval = float(ack_interval)
        self.grace = float(grace)
        self.on_event = on_event
        self.metrics = metrics
        self.poll_wait = float(poll_wait)
        self._options = dict(options or {})
        self._is_async = _is_async(handler)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._early_stop: float | None = None  # a stop() before serving began: its grace
        self._started = False

    # -- public control ---------------------------------------------------------------------

    def stop(self, grace: float | None = None) -> None:
        """Stop gracefully; any thread, any time. ``grace`` shortens the configured grace
        (``stop(grace=0)``: give running handlers' messages back now)."""
        if grace is not None:
            _check_settings(1, None, None, 0.0, grace, 1.0)
        with self._lock:
            loop = self._loop
            if loop is None:
                self._early_stop = self.grace if grace is None else grace
                return
        with contextlib.suppress(RuntimeError):  # the loop has closed: nothing left to stop
            loop.call_soon_threadsafe(self._request_stop, grace)

    async def serve(self) -> None:
        """Process messages until :meth:`stop`; then shut down gracefully and return.

        Raises what made the worker stop if that was not a stop request (say ``WriterFenced``).
        """
        with self._lock:
            if self._started:
                raise RuntimeError("a Worker serves once; create another one")
            self._started = True
        queue = self.queue
        if isinstance(queue, Queue):
            runner = queue._runner
            if runner is None:
                raise QueueClosed(f"queue {queue.url} is closed")
            if asyncio.get_running_loop() is runner.loop:
                await self._serve(queue._aq)
            else:
                fut = asyncio.run_coroutine_threadsafe(self._serve(queue._aq), runner.loop)
                await asyncio.wrap_future(fut)
        elif not isinstance(queue, str):
            await self._serve(queue)  # an AsyncQueue, or a broker's AsyncRemoteQueue
        elif is_broker_url(queue):
            from .client import TOKEN_ENV, connect_async, split_queue_url

            broker, name = split_queue_url(queue)
            token = self._options.get("token") or os.environ.get(TOKEN_ENV)
            async with connect_async(broker, token=token) as client:
                await self._serve(client.queue(name))
        else:
            aq = await open_async(queue, **self._options)
            try:
                await self._serve(aq)
            finally:
                await aq.close()

    def run(self) -> None:
        """Serve until :meth:`stop`, or SIGTERM or SIGINT when called in the main thread.

        A first signal stops gracefully; a second one gives running handlers' messages back
        without waiting out the grace.
        """
        queue = self.queue
        if isinstance(queue, AsyncQueue) or _is_remote(queue):
            raise InvalidArgument(
                "run() needs a queue URL or an s3q.Queue; with an async queue, await serve()"
            )
        asyncio.run(self._serve_with_signals())

    async def _serve_with_signals(self) -> None:
        """``serve`` with SIGTERM and SIGINT handled through the loop's wakeup fd, which wakes
        it whichever thread the signal lands on (a handler's, say)."""
        if threading.current_thread() is not threading.main_thread():
            await self.serve()
            return
        loop = asyncio.get_running_loop()
        received = 0

        def on_signal(sig: signal.Signals) -> None:
            nonlocal received
            received += 1
            if received == 1:
                logger.info("%s: stopping, running handlers get %.1f s", sig.name, self.grace)
                self.stop()
            else:
                logger.warning("%s again: giving running handlers' messages back", sig.name)
                self.stop(grace=0)

        sigs = (signal.SIGTERM, signal.SIGINT)
        previous = {sig: signal.getsignal(sig) for sig in sigs}
        for sig in sigs:
            loop.add_signal_handler(sig, on_signal, sig)
        try:
            await self.serve()
        finally:
            for sig, old in previous.items():
                loop.remove_signal_handler(sig)
                if old is not None:
                    signal.signal(sig, old)

    # -- the serving loop -------------------------------------------------------------------

    async def _serve(self, aq: AsyncQueueSurface) -> None:
        with self._lock:
            self._loop = asyncio.get_running_loop()
            early = self._early_stop
        self._aq = aq
        config = aq.config if isinstance(aq, AsyncQueue) else None
        default_vt = REMOTE_VISIBILITY if config is None else config.visibility_timeout
        self._vt = default_vt if self.visibility_timeout is None else float(self.visibility_timeout)
        self._max_attempts = None if config is None else config.max_attempts
        low = 2 * self.concurrency
        self._window = self.prefetch or low
        self._window_range = (
            (self.prefetch, self.prefetch)
            if self.prefetch
            else (low, max(low, ADAPTIVE_PREFETCH_MAX))
        )
        self._held: dict[str, _Held] = {}  # by receipt: buffered, running, or awaiting its ack
        self._buffer: asyncio.Queue[Message | None] = asyncio.Queue()
        self._space = asyncio.Event()  # the buffer fell to its low-water mark
        self._busy = 0  # handlers running
        self._acks: list[tuple[Message, float, Any]] = []
        self._ack_pending = asyncio.Event()
        self._ack_now = asyncio.Event()
        self._acks_closing = False
        self._stopping = False
        self._stop_requested = asyncio.Event()
        self._hurry = asyncio.Event()
        self._deadline = math.inf  # when running handlers are abandoned (monotonic)
        self._error: BaseException | None = None
        self._hooks: set[asyncio.Future[Any]] = set()
        self._counts = {"completed": 0, "retried": 0, "dead": 0, "released": 0}
        self._threads = None if self._is_async else _Threads(self.concurrency)

        fetcher = asyncio.create_task(self._fetch_loop(), name="s3q-worker-fetch")
        consumers = [
            asyncio.create_task(self._consume(), name=f"s3q-worker-{i}")
            for i in range(self.concurrency)
        ]
        acker = asyncio.create_task(self._ack_loop(), name="s3q-worker-ack")
        keeper = asyncio.create_task(self._keep_leases(), name="s3q-worker-leases")
        self._emit(WorkerStarted(aq.url, self.concurrency, self.prefetch, self._vt))
        if early is not None:
            self._request_stop(early)
        cancelled = False
        try:
            await self._stop_requested.wait()
        except asyncio.CancelledError:
            cancelled = True
            self._request_stop(0.0)
        await self._shutdown(fetcher, consumers, acker, keeper)
        if cancelled:
            raise asyncio.CancelledError
        if self._error is not None:
            raise self._error

    def _request_stop(self, grace: float | None) -> None:
        limit = time.monotonic() + (self.grace if grace is None else grace)
        if limit < self._deadline:
            self._deadline = limit
            self._hurry.set()
        self._stop_requested.set()

    def _fatal(self, exc: BaseException) -> None:
        """Something the worker cannot go on after (the queue closed, the writer fenced)."""
        if self._error is None:
            self._error = exc
            logger.error("worker on %s stopping: %s: %s", self._aq.url, type(exc).__name__, exc)
        self._request_stop(None)

    async def _shutdown(
        self,
        fetcher: asyncio.Task[None],
        consumers: list[asyncio.Task[None]],
        acker: asyncio.Task[None],
        keeper: asyncio.Task[None],
    ) -> None:
        self._stopping = True
        grace = max(0.0, self._deadline - time.monotonic())
        self._emit(WorkerStopping(self._aq.url, grace, self._describe_error()))
        self._space.set()  # wakes the fetcher, which returns (after a dequeue in flight)
        buffered: list[Message] = []
        while not self._buffer.empty():
            msg = self._buffer.get_nowait()
            if msg is not None:
                buffered.append(msg)
        for _ in consumers:
            self._buffer.put_nowait(None)
        await self._release(buffered)
        running: set[asyncio.Task[Any]] = set(consumers)
        while running:
            left = self._deadline - time.monotonic()
            if left <= 0:
                break
            self._hurry.clear()
            hurry: asyncio.Task[Any] = asyncio.create_task(self._hurry.wait())
            _, running = await asyncio.wait(
                {*running, hurry}, timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
            hurry.cancel()
            running.discard(hurry)
        for task in running:
            task.cancel()  # abandoned handlers: their messages are given back below
        await asyncio.gather(fetcher, *consumers, return_exceptions=True)
        self._acks_closing = True
        self._ack_pending.set()
        self._ack_now.set()
        await asyncio.gather(acker, return_exceptions=True)
        keeper.cancel()
        await asyncio.gather(keeper, return_exceptions=True)
        if running:
            logger.warning(
                "%d handler(s) still running after the grace: their messages are given back",
                len(running),
            )
        await self._release([held.msg for held in self._held.values()], started=True)
        if self._threads is not None:
            self._threads.shutdown()
        c = self._counts
        error = self._describe_error()
        self._emit(
            WorkerStopped(
                self._aq.url, c["completed"], c["retried"], c["dead"], c["released"], error
            )
        )
        if self._hooks:
            await asyncio.wait(set(self._hooks), timeout=max(self._deadline - time.monotonic(), 1))

    def _describe_error(self) -> str | None:
        return None if self._error is None else f"{type(self._error).__name__}: {self._error}"

    async def _release(self, msgs: list[Message], started: bool = False) -> None:
        """Give leases back at once: the messages are deliverable again. Unstarted ones go back
        uncounted (``release``); ones whose handler ran out of grace count the attempt
        (``extend(msg, 0)``)."""
        if not msgs:
            return
        for msg in msgs:
            self._held.pop(msg.receipt or "", None)  # before giving back: the keeper skips it
        give_back = (lambda m: self._aq.extend(m, 0)) if started else self._aq.release
        results = await asyncio.gather(*(give_back(msg) for msg in msgs), return_exceptions=True)
        given = 0
        for msg, res in zip(msgs, results, strict=True):
            if isinstance(res, BaseException):
                logger.warning("could not give message %s back: %s", msg.id, res)
            else:
                given += 1
        self._counts["released"] += given
        if self.metrics is not None:
            self.metrics.released.inc(given)
        logger.info("gave back %d unprocessed lease(s)", given)

    # -- fetching ---------------------------------------------------------------------------

    async def _fetch_loop(self) -> None:
        aq, buffer, vt = self._aq, self._buffer, self._vt
        while not self._stopping:
            if buffer.qsize() > self._window // 2:
                self._space.clear()
                await self._space.wait()
                continue
            want = self._window - buffer.qsize()
            started = time.monotonic()
            try:
                msgs = await aq.dequeue(want, vt, self.poll_wait)
            except Exception as exc:
                self._fatal(exc)
                return
            if not msgs:
                continue
            deadline = started + vt
            held = self._held
            for msg in msgs:
                held[msg.receipt or ""] = _Held(msg, deadline)
            if self.metrics is not None:
                self.metrics.fetched.inc(len(msgs))
            if self._stopping:
                await self._release(msgs)
                return
            starved = buffer.empty() and self._busy < self.concurrency
            for msg in msgs:
                buffer.put_nowait(msg)
            self._adapt(starved and len(msgs) == want, buffer.qsize())

    def _adapt(self, starved: bool, buffered: int) -> None:
        """Grow the buffer while handlers starve for messages; shrink it while it stays full."""
        low, high = self._window_range
        if starved:
            self._window = min(high, self._window * 2)
        elif buffered >= self._window // 4:
            self._window = max(low, self._window // 2)

    # -- running handlers -------------------------------------------------------------------

    async def _consume(self) -> None:
        buffer, space, fn, metrics = self._buffer, self._space, self.handler, self.metrics
        threads = self._threads
        while True:
            msg = await buffer.get()
            if msg is None:
                return
            if buffer.qsize() <= self._window // 2:
                space.set()
            if msg.receipt not in self._held:
                continue  # given back meanwhile
            self._busy += 1
            if metrics is not None:
                metrics.in_flight.inc()
            started = time.perf_counter()
            try:
                if threads is None:
                    result = await fn(msg)
                else:
                    result = await asyncio.wrap_future(threads.submit(fn, msg))
                    if inspect.isawaitable(result):
                        result = await result
            except Exception as exc:
                duration = time.perf_counter() - started
                self._ended(duration)
                await self._fail(msg, exc, duration)
            except asyncio.CancelledError:
                self._ended(time.perf_counter() - started)
                raise
            except BaseException as exc:  # SystemExit, KeyboardInterrupt: stop the worker
                self._ended(time.perf_counter() - started)
                self._fatal(exc)
                return
            else:
                duration = time.perf_counter() - started
                self._ended(duration)
                self._acks.append((msg, duration, result))
                self._ack_pending.set()
                if len(self._acks) >= ACK_BATCH:
                    self._ack_now.set()

    def _ended(self, duration: float) -> None:
        self._busy -= 1
        if self.metrics is not None:
            self.metrics.in_flight.dec()
            self.metrics.duration.observe(duration)

    async def _fail(self, msg: Message, exc: Exception, duration: float) -> None:
        error = f"{type(exc).__name__}: {exc}"
        self._held.pop(msg.receipt or "", None)
        try:
            retry_at = await self._aq.fail(msg, error)
        except ReceiptExpired as lost:
            logger.warning("lease of message %s was lost before its failure: %s", msg.id, lost)
            return
        except Exception as fatal:
            self._fatal(fatal)
            return
        dead = retry_at is None
        of = "" if self._max_attempts is None else f" of {self._max_attempts}"
        logger.log(
            logging.ERROR if dead else logging.WARNING,
            "handler failed on message %s (attempt %d%s)%s: %s",
            msg.id,
            msg.attempts,
            of,
            ", dead-lettered" if dead else "",
            error,
            exc_info=exc,
        )
        if dead:
            self._counts["dead"] += 1
            if self.metrics is not None:
                self.metrics.dead.inc()
            if self.on_event is not None:
                self._emit(Dead(msg.id, error, msg.attempts, duration, msg))
        else:
            self._counts["retried"] += 1
            if self.metrics is not None:
                self.metrics.retried.inc()
            if self.on_event is not None:
                assert retry_at is not None
                self._emit(Retry(msg.id, error, msg.attempts, duration, retry_at, msg))

    # -- acknowledging ----------------------------------------------------------------------

    async def _ack_loop(self) -> None:
        while True:
            if not self._acks:
                if self._acks_closing:
                    return
                self._ack_pending.clear()
                await self._ack_pending.wait()
                continue
            if len(self._acks) < ACK_BATCH and not self._acks_closing and self.ack_interval:
                self._ack_now.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.ack_interval):
                        await self._ack_now.wait()
            batch, self._acks = self._acks, []
            await self._flush(batch)

    async def _flush(self, batch: list[tuple[Message, float, Any]]) -> None:
        held = self._held
        for msg, _, _ in batch:
            held.pop(msg.receipt or "", None)
        msgs = [msg for msg, _, _ in batch]
        try:
            await self._aq.complete_batch(msgs)
            done = batch
        except ReceiptExpired:
            # All or none: find the stale ones, complete the rest in one more commit.
            results = await asyncio.gather(
                *(self._aq.complete(msg) for msg in msgs), return_exceptions=True
            )
            done = []
            for item, res in zip(batch, results, strict=True):
                if res is None:
                    done.append(item)
                elif isinstance(res, ReceiptExpired):
                    logger.warning(
                        "lease of message %s was lost before its completion; "
                        "it may be processed again: %s",
                        item[0].id,
                        res,
                    )
                else:
                    self._fatal(res)
        except Exception as exc:
            self._fatal(exc)
            return
        self._counts["completed"] += len(done)
        if self.metrics is not None:
            self.metrics.completed.inc(len(done))
        if self.on_event is not None:
            for msg, duration, result in done:
                self._emit(Completed(msg.id, duration, msg.attempts, result, msg))

    # -- leases -----------------------------------------------------------------------------

    async def _keep_leases(self) -> None:
        """Every third of the lease, renew the leases that are a third old or more."""
        vt = self._vt
        tick = vt / 3
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            due = [held for held in self._held.values() if held.deadline - now < vt - tick]
            if due:
                await asyncio.gather(*(self._extend(held) for held in due))

    async def _extend(self, held: _Held) -> None:
        receipt = held.msg.receipt or ""
        if self._held.get(receipt) is not held:
            return  # acknowledged or given back since; checked in the step that extends
        started = time.monotonic()
        try:
            await self._aq.extend(held.msg, self._vt)
        except ReceiptExpired as exc:
            if self._held.get(receipt) is held:  # not acknowledged meanwhile: really lost
                del self._held[receipt]
                logger.warning("lease of message %s was lost: %s", held.msg.id, exc)
            return
        except Exception as exc:
            self._fatal(exc)
            return
        held.deadline = started + self._vt
        if self.metrics is not None:
            self.metrics.extended.inc()

    # -- events -----------------------------------------------------------------------------

    def _emit(self, event: Event) -> None:
        hook = self.on_event
        if hook is None:
            return
        try:
            result = hook(event)
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                self._hooks.add(task)
                task.add_done_callback(self._hook_done)
        except Exception:
            logger.exception("on_event hook raised on %s", type(event).__name__)

    def _hook_done(self, task: asyncio.Future[Any]) -> None:
        self._hooks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("on_event hook raised", exc_info=task.exception())

    def __repr__(self) -> str:
        queue = self.queue if isinstance(self.queue, str) else self.queue.url
        return f"<s3q.worker.Worker {queue} concurrency={self.concurrency}>"


def _is_remote(queue: object) -> bool:
    """Whether ``queue`` is a broker's queue (the client module is loaded if it is one)."""
    client = sys.modules.get("s3q.client")
    return client is not None and isinstance(queue, client.AsyncRemoteQueue)


# --------------------------------------------------------------------------- running by path


def load_handler(target: str) -> Handler:
    """The callable ``package.module:function`` (or ``module:Class.method``) names."""
    if not isinstance(target, str):
        raise InvalidHandlerPath(f"a handler path is a string, not {type(target).__name__}")
    module_name, colon, attr = target.partition(":")
    if (
        not colon
        or not all(part.isidentifier() for part in module_name.split("."))
        or not all(part.isidentifier() for part in attr.split("."))
    ):
        raise InvalidHandlerPath(
            f"handler path must look like 'package.module:function', got {target!r}"
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise HandlerImportError(f"no module named {exc.name!r} (handler {target!r})") from exc
        raise HandlerImportError(f"importing {module_name!r} failed: {_one_line(exc)}") from exc
    except Exception as exc:
        raise HandlerImportError(f"importing {module_name!r} failed: {_one_line(exc)}") from exc
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise HandlerNotFound(f"module {module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise HandlerNotCallable(f"{target!r} is a {type(obj).__name__}, not a callable")
    return obj


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text.splitlines()[0] if text.strip() else type(exc).__name__


def run_worker(
    target: str,
    *,
    queue_url: str | None = None,
    store: str | None = None,
    concurrency: int | None = None,
    prefetch: int | None = None,
    visibility_timeout: float | None = None,
    grace: float | None = None,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    on_event: EventHook | None = None,
    options: Mapping[str, Any] | None = None,
) -> None:
    """Import ``target`` (``package.module:function``) and run it as a worker until signalled.

    The queue is ``queue_url``, else the name given to ``@handler`` under ``store`` or the
    default store (``$S3Q_STORE``, else ``./s3q-data``). Arguments left None take the
    decorator's values, then the :class:`Worker` defaults. ``metrics_port`` serves Prometheus
    metrics there. The current directory is importable, as when running ``python -m``.
    """
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    fn = load_handler(target)
    marked = handler_options(fn) or HandlerOptions("")
    url = queue_url or (_queue_url(marked.queue, store) if marked.queue else None)
    if url is None:
        raise InvalidArgument(
            f"handler {target!r} names no queue: pass a queue URL or decorate it with "
            "@s3q.worker.handler('queue-name')"
        )
    workers = _first(concurrency, marked.concurrency)
    seconds = _first(grace, marked.grace)
    metrics = WorkerMetrics() if metrics_port is not None else None
    worker = Worker(
        url,
        fn,
        concurrency=8 if workers is None else workers,
        prefetch=_first(prefetch, marked.prefetch),
        visibility_timeout=_first(visibility_timeout, marked.visibility_timeout),
        grace=30.0 if seconds is None else seconds,
        on_event=on_event,
        metrics=metrics,
        options={**marked.options, **(options or {})},
    )
    server = None
    if metrics is not None and metrics_port is not None:
        server = serve_metrics(metrics.registry, metrics_port, metrics_host)
        logger.info("metrics at %s", server.url)
    try:
        worker.run()
    finally:
        if server is not None:
            server.close()


T = TypeVar("T")


def _first(*values: T | None) -> T | None:
    """The first value that is not None."""
    return next((v for v in values if v is not None), None)


def _queue_url(name: str, store: str | None) -> str:
    """A queue name under ``store`` (or the default store); a URL or absolute path stays."""
    if "://" in name or os.path.isabs(name):
        return name
    return queue_url(store or default_store(), name)
