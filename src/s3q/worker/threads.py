"""The threads that run a worker's sync handlers."""

from __future__ import annotations

import contextvars
import queue as stdqueue
import threading
from concurrent.futures import Future
from typing import Any

from ..message import Message
from .handlers import Handler

__all__ = ["Threads"]


class Threads:
    """Daemon threads for sync handlers: one that never returns cannot block the exit."""

    def __init__(self, size: int) -> None:
        self._jobs: stdqueue.SimpleQueue[
            tuple[contextvars.Context, Handler, Message, Future[Any]] | None
        ] = stdqueue.SimpleQueue()
        self._size = size
        for i in range(size):
            threading.Thread(target=self._work, name=f"s3q-worker-{i}", daemon=True).start()

    def submit(self, fn: Handler, msg: Message) -> Future[Any]:
        """``fn(msg)`` on one of the threads, in a copy of the caller's context (its current
        span: see ``s3q.tracing``), as ``asyncio.to_thread`` does; its future."""
        fut: Future[Any] = Future()
        self._jobs.put((contextvars.copy_context(), fn, msg, fut))
        return fut

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            context, fn, msg, fut = job
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(context.run(fn, msg))
            except BaseException as exc:
                fut.set_exception(exc)

    def shutdown(self) -> None:
        """Let idle threads exit; busy ones exit when their handler returns."""
        for _ in range(self._size):
            self._jobs.put(None)
