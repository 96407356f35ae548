"""Subscriptions: consumers the broker pushes messages to, over a WebSocket of their own.

A subscription is a loop of the same dequeues a consumer would send, run by the broker while
the consumer holds fewer than its ``prefetch`` unsettled, so leases, visibility timeouts,
fairness and groups hold exactly as for a dequeue; settles (complete, fail, release, extend)
come back on the channel and share the writer's commits with everything else. When the
channel closes (the consumer left, its connection broke, or its pings went unanswered) the
leases it still held are given back at once. The frames are :mod:`s3q.wire.subscriptions`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import msgspec
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from .. import validate
from ..api import AsyncQueue
from ..errors import InvalidArgument, S3QError, StoreError, WriterFenced
from ..partitions.queue import PartitionedQueue
from ..wire import pages
from ..wire import subscriptions as frames
from ..wire.codec import API_PREFIX, SERVED_NAME, QueueNotFound, error_body, status_of
from . import redact
from .access import Access
from .arguments import Limits
from .forward import ForwardedQueue
from .metrics import BrokerMetrics
from .principals import RECEIVE
from .registry import QueueRegistry

__all__ = ["PATH", "POLL", "route"]

log = logging.getLogger("s3q.broker")

PATH = API_PREFIX + "/queues/{name}/subscribe"
POLL = 1.0  # seconds one push waits for messages before it looks again
MAX_SETTLING = 64  # settles in flight on one channel before the broker reads no more frames
PAUSE = 0.5  # seconds before a push is tried again after a store's fault

Queue = AsyncQueue | ForwardedQueue | PartitionedQueue


def route(
    registry: QueueRegistry, metrics: BrokerMetrics, access: Access, limits: Limits
) -> WebSocketRoute:
    """The subscription endpoint, ``GET /v1/queues/{name}/subscribe`` as a WebSocket. Its
    caller must be granted ``receive`` on the queue at the opening, and still be at each push
    (a reload of the principals that takes the grant away ends the channel)."""

    async def subscribe(ws: WebSocket) -> None:
        name = ws.path_params["name"]
        await ws.accept()  # (a refusal is a frame, so that the consumer learns why)
        try:
            # before anything the consumer sends is read
            caller = access.identify(ws, "subscribe", name)
            access.check(caller, RECEIVE, name, "subscribe")
            if not SERVED_NAME.match(name):
                raise InvalidArgument(f"invalid queue name {name!r}")
            opened = await _opening(ws, limits)
            await ws.send_bytes(frames.encode(frames.Opened()))
        except S3QError as exc:
            await _refuse(ws, exc)
            return
        except WebSocketDisconnect:
            return
        access.done(caller, RECEIVE, "subscribe", name, "ok")
        caller.acting(RECEIVE)  # (the push loop's forwarded calls name the caller)

        def still() -> None:
            access.check(access.current(caller), RECEIVE, name, "subscribe")

        await Subscription(ws, registry, metrics, name, opened, limits.batch, still).run()

    return WebSocketRoute(PATH, subscribe)


async def _opening(ws: WebSocket, limits: Limits) -> frames.Open:
    """The consumer's first frame, which must come within the body timeout and open."""
    try:
        data = await asyncio.wait_for(_frame(ws), limits.body_timeout)
    except TimeoutError:
        raise InvalidArgument(f"no opening frame within {limits.body_timeout:g} s") from None
    opened = _decoded(data)
    if not isinstance(opened, frames.Open):
        raise InvalidArgument("the first frame of a subscription must open it")
    validate.count("prefetch", opened.prefetch, 1, 100 * limits.batch)
    validate.count("per_group", opened.per_group, 1, limits.batch)
    if opened.visibility_timeout is not None:
        validate.visibility("visibility_timeout", opened.visibility_timeout)
    return opened


async def _frame(ws: WebSocket) -> bytes:
    """The next binary frame; WebSocketDisconnect when the channel closed."""
    message = await ws.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000))
    data = message.get("bytes")
    if data is None:
        raise InvalidArgument("subscription frames are binary (msgpack), not text")
    return bytes(data)


def _decoded(data: bytes) -> frames.ClientFrame:
    try:
        return frames.decode_client(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InvalidArgument(f"not a subscription frame: {exc}") from None


async def _refuse(ws: WebSocket, exc: S3QError) -> None:
    """Tell the consumer why, then close the channel."""
    with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):  # (gone already)
        await ws.send_bytes(frames.encode(frames.Refused(error_body(exc), status_of(exc))))
        await ws.close(frames.CLOSE_REFUSED)


class Subscription:
    """One consumer's channel on queue ``name``: a push loop beside a loop reading its frames."""

    def __init__(
        self,
        ws: WebSocket,
        registry: QueueRegistry,
        metrics: BrokerMetrics,
        name: str,
        opened: frames.Open,
        max_batch: int,
        still: Callable[[], None] = lambda: None,
    ) -> None:
        self._ws, self._registry, self._metrics, self._name = ws, registry, metrics, name
        self._still = still  # raises if the consumer may no longer receive from the queue
        self._prefetch = opened.prefetch
        self._vt = opened.visibility_timeout
        self._per_group = opened.per_group
        self._max_batch = max_batch
        self._held: set[str] = set()  # receipts pushed and not settled
        self._room = asyncio.Event()  # the consumer holds fewer than its prefetch
        self._settling: set[asyncio.Task[None]] = set()
        self._roomy = asyncio.Event()  # fewer than MAX_SETTLING settles in flight
        self._roomy.set()
        self._closed = False
        self._polling = False  # the pusher's dequeue may wait (else completions ride its next)
        self._riding: list[frames.Settle] = []  # completions for the pusher's next dequeue

    async def run(self) -> None:
        """Serve the channel until it closes, then give back the leases it still holds."""
        pusher = asyncio.create_task(self._push(), name=f"s3q-subscription-{self._name}")
        self._metrics.subscribed += 1
        try:
            await self._listen()
        except S3QError as exc:
            await _refuse(self._ws, exc)
        except WebSocketDisconnect:
            pass
        finally:
            self._closed = True
            self._room.set()
            for frame in self._riding:  # (sent before the close: done, not given back)
                self._spawn(frame)
            self._riding = []
            if self._settling:
                await asyncio.gather(*self._settling, return_exceptions=True)
            await asyncio.gather(pusher, return_exceptions=True)
            await self._give_back()
            self._metrics.subscribed -= 1

    async def _listen(self) -> None:
        while True:
            await self._roomy.wait()
            frame = _decoded(await _frame(self._ws))
            if isinstance(frame, frames.Prefetch):
                validate.count("prefetch", frame.prefetch, 1, 100 * self._max_batch)
                self._prefetch = frame.prefetch
                self._room.set()
            elif isinstance(frame, frames.Settle):
                self._check(frame)
                if frame.op == "complete" and not self._polling:
                    self._riding.append(frame)  # (one commit with the dequeue it makes room for)
                    self._room.set()
                else:
                    self._spawn(frame)
            else:
                raise InvalidArgument("a subscription is opened once")

    def _spawn(self, frame: frames.Settle) -> None:
        """Settle ``frame`` in a task of its own."""
        task = asyncio.create_task(self._settle(frame))
        self._settling.add(task)
        task.add_done_callback(self._settled)
        if len(self._settling) >= MAX_SETTLING:
            self._roomy.clear()

    def _check(self, frame: frames.Settle) -> None:
        count = len(frame.receipts)
        if frame.op in ("fail", "extend") and count != 1:
            raise InvalidArgument(f"{frame.op} settles one receipt, got {count}")
        if count > self._max_batch:
            raise InvalidArgument(f"receipts: at most {self._max_batch} in one settle")
        if frame.op == "extend" and frame.seconds is None:
            raise InvalidArgument("extend needs seconds")

    def _settled(self, task: asyncio.Task[None]) -> None:
        self._settling.discard(task)
        if len(self._settling) < MAX_SETTLING:
            self._roomy.set()

    # -- pushing ---------------------------------------------------------------------------------

    async def _push(self) -> None:
        while not self._closed:
            room = min(self._prefetch - len(self._held), self._max_batch)
            if self._riding:
                riding, self._riding = self._riding, []
                if not await self._ride(riding, room):
                    return
                continue
            if room <= 0:
                self._room.clear()
                await self._room.wait()
                continue
            try:
                self._polling = True
                answer = await self._poll(room)
            except WriterFenced:
                await self._registry.evict_stopped(self._name)
                continue
            except (StoreError, QueueNotFound) as exc:
                log.debug("a push to a subscriber of %r waits: %s", self._name, exc)
                await self._registry.pause(PAUSE)
                continue
            except S3QError as exc:
                await _refuse(self._ws, exc)
                return
            finally:
                self._polling = False
            if answer is not None and not await self._deliver(*answer):
                return

    async def _poll(self, room: int) -> tuple[Queue, pages.Pages] | None:
        """Lease up to ``room`` messages, waiting up to POLL for them; None if none came."""
        started = time.perf_counter()
        queue, found = await self._lease(room, POLL)
        if not found.messages and not found.pages:
            return None
        self._metrics.observe(self._name, "push", "ok", time.perf_counter() - started)
        return queue, found

    async def _lease(
        self, room: int, wait: float, complete: list[str] | None = None
    ) -> tuple[Queue, pages.Pages]:
        """The dequeue a consumer would send for ``room`` messages (``complete``: settled in
        its commit), while the consumer may still receive from the queue."""
        self._still()
        queue = await self._registry.get(self._name, create=False)
        found = await queue.dequeue_pages(
            room, self._vt, wait, per_group=self._per_group, complete=complete or ()
        )
        return queue, found

    async def _ride(self, riding: list[frames.Settle], room: int) -> bool:
        """Complete ``riding`` in the commit of the dequeue that fills the room they leave (so
        a consumer at its prefetch costs one commit a round, not two), and push what it
        leased; False if the channel closed. If the dequeue refuses them (a receipt stale: it
        did nothing), each frame is settled on its own, as without riding."""
        receipts = [r for frame in riding for r in frame.receipts]
        room = min(room + sum(r in self._held for r in set(receipts)), self._max_batch)
        started = time.perf_counter()
        try:
            if room <= 0:  # (the prefetch was lowered meanwhile: nothing to lease with them)
                raise InvalidArgument("no room")
            queue, found = await self._lease(room, 0.0, receipts)
        except S3QError:
            for frame in riding:
                self._spawn(frame)
            return True
        self._held.difference_update(receipts)
        seconds = time.perf_counter() - started
        for frame in riding:
            self._metrics.observe(self._name, "complete", "ok", seconds)
            with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
                await self._ws.send_bytes(frames.encode(frames.Settled(frame.seq)))
        if not found.messages and not found.pages:
            return True
        self._metrics.observe(self._name, "push", "ok", seconds)
        return await self._deliver(queue, found)

    async def _deliver(self, queue: Queue, found: pages.Pages) -> bool:
        """Push what was leased; False (and each lease given back) if the channel closed."""
        receipts = pages.receipts(found)
        if not self._closed:
            self._held.update(receipts)
            try:
                await self._ws.send_bytes(frames.encode(frames.Pushed(found.messages, found.pages)))
                return True
            except (WebSocketDisconnect, RuntimeError, OSError):
                self._held.difference_update(receipts)
        await _quietly(queue.release(receipts), self._name)
        return False

    async def _give_back(self) -> None:
        held, self._held = list(self._held), set()
        for i in range(0, len(held), self._max_batch):
            part = held[i : i + self._max_batch]
            try:
                queue = await self._registry.get(self._name, create=False)
                await queue.release(part)
            except S3QError:  # some lease ended or was settled meanwhile: each on its own
                for receipt in part:
                    await _quietly(self._release_one(receipt), self._name)

    async def _release_one(self, receipt: str) -> None:
        await (await self._registry.get(self._name, create=False)).release([receipt])

    # -- settling --------------------------------------------------------------------------------

    async def _settle(self, frame: frames.Settle) -> None:
        started = time.perf_counter()
        errors: dict[int, dict[str, Any]] = {}
        retry_at = None
        try:
            retry_at = await self._apply(frame, frame.receipts)
        except S3QError as exc:
            if len(frame.receipts) == 1:
                errors[0] = self._error(exc)
            else:  # which of them: each on its own
                for i, receipt in enumerate(frame.receipts):
                    try:
                        await self._apply(frame, [receipt])
                    except S3QError as one:
                        errors[i] = self._error(one)
        if frame.op != "extend":
            self._held.difference_update(frame.receipts)
            self._room.set()
        outcome = "ok" if not errors else next(iter(errors.values()))["error"]
        self._metrics.observe(self._name, frame.op, outcome, time.perf_counter() - started)
        answer = frames.Settled(frame.seq, errors, retry_at)
        with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
            await self._ws.send_bytes(frames.encode(answer))  # (gone: it stays settled)

    async def _apply(self, frame: frames.Settle, receipts: list[str]) -> float | None:
        """``frame``'s settle of ``receipts``, sent once more to a new leader if fenced."""
        for last in (False, True):
            queue = await self._registry.get(self._name, create=False)
            try:
                return await _settle(queue, frame, receipts)
            except WriterFenced:
                await self._registry.evict_stopped(self._name)
                if last:
                    raise
        raise AssertionError("unreachable")

    def _error(self, exc: S3QError) -> dict[str, Any]:
        return error_body(exc, redact.message(exc, self._name, self._registry.store))


async def _settle(queue: Queue, frame: frames.Settle, receipts: list[str]) -> float | None:
    if frame.op == "complete":
        await queue.complete_batch(receipts)
    elif frame.op == "release":
        await queue.release(receipts)
    elif frame.op == "fail":
        return await queue.fail(receipts[0], frame.error)
    else:
        assert frame.seconds is not None
        await queue.extend(receipts[0], frame.seconds, revive=frame.revive)
    return None


async def _quietly(release: Any, name: str) -> None:
    """Give leases back; one that cannot be runs out at its visibility timeout instead."""
    try:
        await release
    except S3QError as exc:
        log.debug("a lease of a subscriber of %r runs out instead: %s", name, exc)
