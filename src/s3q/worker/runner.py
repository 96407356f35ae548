"""The :class:`Worker`: its settings, starting it on a queue, stopping it (signals included)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from .. import tracing
from ..api import AsyncQueue, Queue, open_async
from ..config import PERSISTED, split_options
from ..errors import InvalidArgument, QueueClosed
from ..surface import AsyncQueueSurface
from ..wire.codec import is_broker_url
from .events import EventHook
from .handlers import Handler
from .metrics import WorkerMetrics
from .session import REMOTE_VISIBILITY, Session
from .settings import check_settings

if TYPE_CHECKING:
    from ..client import AsyncRemoteQueue

__all__ = ["Worker"]

logger = logging.getLogger("s3q.worker")


class Worker:
    """Runs ``handler`` on each message of ``queue``; :meth:`serve` or :meth:`run` it.

    ``queue``: an :class:`~s3q.AsyncQueue`, an :class:`~s3q.Queue` (the worker runs on that
    queue's event-loop thread), a broker's :class:`~s3q.client.AsyncRemoteQueue`, or a URL:
    a store's (opened with ``options`` and closed by the worker) or a broker's
    ``http(s)://host:port/NAME`` (its bearer token: ``options={"token": ...}`` or
    ``$S3Q_TOKEN``; the queue settings among ``options`` are configured on the broker's queue
    when serving starts). Through a broker the lease defaults to 30 s unless
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
    for a message, which bounds how long an idle worker takes to stop. ``push``: through a
    broker, have the messages pushed on a subscription (``s3q.worker.push``) when the broker
    offers one and no tracer provider is configured (a traced worker polls, so that each call
    is a request the broker serves in the handler's trace); False: poll with dequeues.
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
        push: bool = True,
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
        check_settings(concurrency, prefetch, visibility_timeout, ack_interval, grace, poll_wait)
        if isinstance(queue, str) and is_broker_url(queue):
            _broker_settings(options or {})
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
        self.push = bool(push)
        self._options = dict(options or {})
        self._lock = threading.Lock()
        self._session: Session | None = None  # the serving, once it began
        self._early_stop: float | None = None  # a stop() before serving began: its grace
        self._started = False

    # -- public control ---------------------------------------------------------------------

    def stop(self, grace: float | None = None) -> None:
        """Stop gracefully; any thread, any time. ``grace`` shortens the configured grace
        (``stop(grace=0)``: give running handlers' messages back now)."""
        if grace is not None:
            check_settings(1, None, None, 0.0, grace, 1.0)
        with self._lock:
            session = self._session
            if session is None:
                self._early_stop = self.grace if grace is None else grace
                return
        with contextlib.suppress(RuntimeError):  # the loop has closed: nothing left to stop
            session.loop.call_soon_threadsafe(session.stop.request, grace)

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
            loop = queue.loop
            if loop is None:
                raise QueueClosed(f"queue {queue.url} is closed")
            if asyncio.get_running_loop() is loop:
                await self._serve(queue.async_queue)
            else:
                fut = asyncio.run_coroutine_threadsafe(self._serve(queue.async_queue), loop)
                await asyncio.wrap_future(fut)
        elif not isinstance(queue, str):
            await self._serve(queue)  # an AsyncQueue, or a broker's AsyncRemoteQueue
        elif is_broker_url(queue):
            from ..client import TOKEN_ENV, connect_async, split_queue_url

            broker, name = split_queue_url(queue)
            token = self._options.get("token") or os.environ.get(TOKEN_ENV)
            async with connect_async(broker, token=token) as client:
                remote = client.queue(name)
                settings = _broker_settings(self._options)
                if settings:  # saved with the queue, as an open that gives them saves them
                    await remote.configure(**settings)
                await self._serve(remote)
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

    async def _serve(self, aq: AsyncQueueSurface) -> None:
        pushed = None
        # (a traced worker polls: each of its calls is a request the broker serves as a child
        # of the handler's span, which a subscription's frames are not)
        if self.push and _is_remote(aq) and tracing.tracer() is None:
            from .push import subscribed

            vt = REMOTE_VISIBILITY if self.visibility_timeout is None else self.visibility_timeout
            window = self.prefetch or 2 * self.concurrency
            pushed = await subscribed(aq, vt, window, self.concurrency)  # type: ignore[arg-type]
        session = Session(self, aq if pushed is None else cast(AsyncQueueSurface, pushed))
        with self._lock:
            self._session = session
            early = self._early_stop
        try:
            await session.serve(early)
        finally:
            if pushed is not None:
                await pushed.close()

    def __repr__(self) -> str:
        queue = self.queue if isinstance(self.queue, str) else self.queue.url
        return f"<s3q.worker.Worker {queue} concurrency={self.concurrency}>"


def _is_remote(queue: object) -> bool:
    """Whether ``queue`` is a broker's queue (the client module is loaded if it is one)."""
    client = sys.modules.get("s3q.client")
    return client is not None and isinstance(queue, client.AsyncRemoteQueue)


def _broker_settings(options: Mapping[str, Any]) -> dict[str, Any]:
    """The queue settings among the ``options`` of a worker on a broker's queue, checked: the
    worker gives them to the broker's queue with ``configure``. Besides them, only ``token``;
    InvalidArgument for the options of the broker's writer or store, which are not a worker's
    to give."""
    other = set(options) - set(PERSISTED) - {"token"}
    if other:
        named = ", ".join(sorted(other))
        verb = "belongs" if len(other) == 1 else "belong"
        raise InvalidArgument(
            "through a broker a worker takes token and the queue's settings (max_attempts, "
            "retry_delay, ...: s3q.config.PERSISTED), which it configures on the broker's "
            f"queue; {named} {verb} to the broker's writer or store: give it to s3q serve "
            "(or s3q.broker.serve(options=...))"
        )
    settings = {k: v for k, v in options.items() if k != "token"}
    split_options(settings)  # a bad value fails here, not on the broker
    return settings
