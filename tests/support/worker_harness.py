"""Queues for the worker tests, and serving one until an event."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

from s3q.worker import Event, Worker


def memory_url() -> str:
    return f"memory://worker-{uuid.uuid4().hex}"


def serve_until(worker: Worker, done: Callable[[Event], bool]) -> None:
    """Serve with ``worker`` (its ``on_event`` set here) until an event satisfies ``done``
    (the hook runs on the worker's loop: the queue's own thread for a blocking queue)."""

    async def main() -> None:
        finished, loop = asyncio.Event(), asyncio.get_running_loop()
        worker.on_event = lambda event: (
            loop.call_soon_threadsafe(finished.set) if done(event) else None
        )
        task = asyncio.create_task(worker.serve())
        await asyncio.wait_for(finished.wait(), 15)
        worker.stop()
        await asyncio.wait_for(task, 15)

    asyncio.run(main())
