"""One serving of a worker on an open queue: the tasks that fill the buffer, run handlers,
acknowledge and keep leases (each part owning its state), and the graceful shutdown."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from typing import Protocol

from .. import tracing
from ..api import AsyncQueue
from ..errors import ReceiptExpired
from ..message import Message
from ..surface import AsyncQueueSurface
from .acks import Acks
from .events import Dead, EventHook, Retry, WorkerStarted, WorkerStopped, WorkerStopping
from .handlers import Handler, is_async
from .hooks import Fanout, Hooks, OnEvent, Tally
from .leases import Leases
from .metrics import WorkerMetrics
from .prefetch import Prefetch
from .prometheus import MetricsHooks
from .retry import Backoff, rides_out
from .stop import Stop
from .threads import Threads

__all__ = ["REMOTE_VISIBILITY", "Session"]

logger = logging.getLogger("s3q.worker")

REMOTE_VISIBILITY = 30.0  # seconds of lease through a broker, unless visibility_timeout is given


class Settings(Protocol):
    """What a session takes of its :class:`~s3q.worker.Worker`: the handler and the settings
    (checked by the worker)."""

    handler: Handler
    concurrency: int
    prefetch: int | None
    visibility_timeout: float | None
    ack_interval: float
    grace: float
    on_event: EventHook | None
    metrics: WorkerMetrics | None
    poll_wait: float


class Session:
    """``worker`` serving ``aq`` once; made on the loop that runs it."""

    def __init__(self, worker: Settings, aq: AsyncQueueSurface) -> None:
        self.loop = asyncio.get_running_loop()
        self._worker = worker
        self._aq = aq
        config = aq.config if isinstance(aq, AsyncQueue) else None
        default_vt = REMOTE_VISIBILITY if config is None else config.visibility_timeout
        vt = default_vt if worker.visibility_timeout is None else float(worker.visibility_timeout)
        self._vt = vt
        self._max_attempts = None if config is None else config.max_attempts
        self._tally = Tally()
        self._on_event = None if worker.on_event is None else OnEvent(worker.on_event)
        subscribers: list[Hooks] = [self._tally]
        if worker.metrics is not None:
            subscribers.append(MetricsHooks(worker.metrics))
        if self._on_event is not None:
            subscribers.append(self._on_event)
        hooks = subscribers[0] if len(subscribers) == 1 else Fanout(subscribers)
        self._hooks = hooks
        self.stop = Stop(aq.url, worker.grace)
        self._remote = remote = not isinstance(aq, AsyncQueue)  # through a broker
        self._leases = Leases(aq, vt, hooks, self.stop, remote)
        self._acks = Acks(aq, worker.ack_interval, self._leases, hooks, self.stop, remote)
        self._prefetch = Prefetch(
            aq,
            self._leases,
            hooks,
            self.stop,
            self._acks,
            prefetch=worker.prefetch,
            concurrency=worker.concurrency,
            visibility_timeout=vt,
            poll_wait=worker.poll_wait,
            remote=remote,
        )
        self._threads = None if is_async(worker.handler) else Threads(worker.concurrency)
        self._traces = tracing.consumer(aq.url)

    async def serve(self, early_stop: float | None) -> None:
        """Run until a stop (``early_stop``: one requested before, with that grace), then shut
        down; raise what stopped the worker if that was not a stop request."""
        worker, stop = self._worker, self.stop
        fetcher = asyncio.create_task(self._prefetch.fill(), name="s3q-worker-fetch")
        consumers = [
            asyncio.create_task(self._consume(), name=f"s3q-worker-{i}")
            for i in range(worker.concurrency)
        ]
        acker = asyncio.create_task(self._acks.run(), name="s3q-worker-ack")
        keeper = asyncio.create_task(self._leases.keep(), name="s3q-worker-leases")
        self._hooks.lifecycle(
            WorkerStarted(self._aq.url, worker.concurrency, worker.prefetch, self._vt)
        )
        if early_stop is not None:
            stop.request(early_stop)
        cancelled = False
        try:
            await stop.requested.wait()
        except asyncio.CancelledError:
            cancelled = True
            stop.request(0.0)
        await self._shutdown(fetcher, consumers, acker, keeper)
        if cancelled:
            raise asyncio.CancelledError
        if stop.error is not None:
            raise stop.error

    async def _shutdown(
        self,
        fetcher: asyncio.Task[None],
        consumers: list[asyncio.Task[None]],
        acker: asyncio.Task[None],
        keeper: asyncio.Task[None],
    ) -> None:
        stop, url = self.stop, self._aq.url
        stop.stopping = True
        grace = max(0.0, stop.deadline - time.monotonic())
        self._hooks.lifecycle(WorkerStopping(url, grace, stop.reason))
        await self._leases.give_back(self._prefetch.close(len(consumers)))
        running = await stop.outlast(consumers)
        for task in running:
            task.cancel()  # abandoned handlers: their messages are given back below
        await asyncio.gather(fetcher, *consumers, return_exceptions=True)
        self._acks.close()
        await asyncio.gather(acker, return_exceptions=True)
        keeper.cancel()
        await asyncio.gather(keeper, return_exceptions=True)
        if running:
            logger.warning(
                "%d handler(s) still running after the grace: their messages are given back",
                len(running),
            )
        await self._leases.give_back(self._leases.messages(), started=True)
        if self._threads is not None:
            self._threads.shutdown()
        c = self._tally.counts
        self._hooks.lifecycle(
            WorkerStopped(url, c["completed"], c["retried"], c["dead"], c["released"], stop.reason)
        )
        if self._on_event is not None:
            await self._on_event.drain(max(stop.deadline - time.monotonic(), 1))

    async def _consume(self) -> None:
        prefetch, hooks, fn, threads, traces = (
            self._prefetch,
            self._hooks,
            self._worker.handler,
            self._threads,
            self._traces,
        )
        while (msg := await prefetch.take()) is not None:
            span = None if traces is None else traces.process(msg)  # current until closed
            hooks.handler_started()
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
                outcome = await self._fail(msg, exc, duration)
                if span is not None and outcome is not None:
                    span.ended(outcome, exc)
            except asyncio.CancelledError:
                self._ended(time.perf_counter() - started)
                raise
            except BaseException as exc:  # SystemExit, KeyboardInterrupt: stop the worker
                self._ended(time.perf_counter() - started)
                self.stop.fatal(exc)
                return
            else:
                duration = time.perf_counter() - started
                self._ended(duration)
                self._acks.add(msg, duration, result)
                if span is not None:
                    span.ended("completed")
            finally:
                if span is not None:
                    span.close()

    def _ended(self, duration: float) -> None:
        self._prefetch.done()
        self._hooks.handler_ended(duration)

    async def _fail(self, msg: Message, exc: Exception, duration: float) -> str | None:
        """Fail ``msg``: the outcome, ``retried`` or ``dead`` (None if the failure was lost)."""
        error = f"{type(exc).__name__}: {exc}"
        self._leases.drop((msg,))
        backoff = Backoff(f"failing message {msg.id}", self.stop.queue)
        while True:
            try:
                retry_at = await self._aq.fail(msg, error)
                break
            except ReceiptExpired as lost:
                # (after a try whose outcome was unknown, that try may have recorded it)
                logger.warning("lease of message %s was lost before its failure: %s", msg.id, lost)
                return None
            except Exception as failure:
                stop = self.stop
                if not rides_out(failure, self._remote):
                    stop.fatal(failure)
                    return None
                if stop.stopping and time.monotonic() >= stop.deadline:
                    logger.warning(
                        "the failure of message %s was not recorded before the grace ran "
                        "out: it will be delivered again once its lease ends",
                        msg.id,
                    )
                    return None
                await backoff.pause(failure, until=stop.deadline if stop.stopping else None)
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
        event: Retry | Dead
        if dead:
            event = Dead(msg.id, error, msg.attempts, duration, msg)
        else:
            event = Retry(msg.id, error, msg.attempts, duration, retry_at, msg)
        self._hooks.failed(event)
        return "dead" if dead else "retried"
