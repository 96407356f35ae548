"""Dead letters moved: into a queue's dead-letter queue, as its RedrivePolicy asks, and out of
it again by message-move tasks, as SQS's StartMessageMoveTask, CancelMessageMoveTask and
ListMessageMoveTasks do.

Into (:class:`Redrives`): lazily, on ReceiveMessage and GetQueueAttributes of either queue, up
to a thousand at a time, each marked with the DeadLetterQueueSourceArn of the queue it died in
and enqueued with a dedup id derived from its id, so a move retried after a crash enqueues
nothing twice (within the dead-letter queue's dedup window).

Out of (:class:`MoveTasks`): a task runs in the broker that started it, one per source queue
at a time: it takes up to ten messages at a time from the dead-letter queue (a lease, so a
broker that dies mid-move leaves them to come back), enqueues each into its destination (the
queue named, or the queue it died in, from its ``DeadLetterQueueSourceArn``) and completes it.
The enqueue carries a dedup id derived from the message's id, so a batch moved again after a
crash is not enqueued twice (within the destination's dedup window). It stops once it moved as
many messages as the queue held when it started, or when the queue has none left. Tasks are
remembered by the broker that ran them (the ten newest per source queue), not in the store.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ...config import Setting
from ...errors import S3QError
from ...message import Message
from ...surface import AsyncQueueSurface
from .. import peerauth
from . import messages, queues
from .catalog import Catalog
from .protocol import SqsError, invalid, within

log = logging.getLogger("s3q.broker.sqs")

AnyQueue = AsyncQueueSurface
BATCH = 10
HOLD = 60.0  # seconds a message being moved stays leased in the source
KEPT = 10  # tasks listed per source queue
MAX_RATE = 500  # MaxNumberOfMessagesPerSecond, as SQS
MAX_MOVE = 1000  # dead letters moved to a dead-letter queue at a time
SOURCE_ATTRIBUTE = messages.SYSTEM + "DeadLetterQueueSourceArn"


@dataclass
class Redrives:
    """Dead letters moved into their dead-letter queues, as each queue's RedrivePolicy asks:
    lazily, on ReceiveMessage and GetQueueAttributes of either queue."""

    catalog: Catalog
    queue: Callable[[str], Awaitable[AnyQueue]]  # a queue by name
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)  # by source queue

    async def redrive(self, name: str, settings: dict[str, Setting]) -> None:
        """Move dead letters into their dead-letter queues: those of ``name`` if it has a
        RedrivePolicy, and those of the queues whose dead-letter queue it is."""
        await self.catalog.entries()
        moves = [(source, name) for source in self.catalog.sources(name)]
        target = queues.dead_letter_target(name, settings)
        if target is not None:
            moves.append((name, target))
        for source, into in moves:
            await self.move(source, into)

    async def move(self, source: str, target: str) -> None:
        """Move the dead letters of ``source`` into ``target``; a failure is logged, and they
        wait in ``source``. The broker moves them (as the redrive policy an admin set asks),
        not the caller whose call set it going: no grant of the caller's is asked for."""
        try:
            with peerauth.as_broker():
                await self._move_now(source, target)
        except S3QError as exc:  # e.g. too large for the target: they wait in the source
            log.warning("moving dead letters from %s to %s failed: %s", source, target, exc)

    async def _move_now(self, source: str, target: str) -> None:
        async with self._locks.setdefault(source, asyncio.Lock()):
            if await self.catalog.get(target) is None or await self.catalog.get(source) is None:
                return
            queue = await self.queue(source)
            dead = await queue.dead_letters(MAX_MOVE)
            if not dead:
                return
            origin = messages.system_value(queues.arn(source))
            items = [
                {
                    "payload": m.payload,
                    "priority": m.priority,
                    "group": m.group,
                    "tenant": m.tenant,
                    # a move retried after a crash enqueues nothing twice (within 5 minutes)
                    "dedup_id": f"dlq:{source}:{m.id}",
                    "attributes": {**m.attributes, SOURCE_ATTRIBUTE: origin},
                }
                for m in dead
            ]
            await (await self.queue(target)).enqueue_batch(items)
            await queue.discard([m.id for m in dead])
            log.info("moved %d dead letter(s) from %s to %s", len(dead), source, target)


class Failed(Exception):
    """A task cannot go on: its ``FailureReason``."""


@dataclass
class MoveTask:
    """One message-move task and its progress."""

    source: str
    destination: str | None
    rate: int | None
    to_move: int
    task_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    started_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    status: str = "RUNNING"
    moved: int = 0
    failure: str | None = None
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    runner: asyncio.Task[None] | None = None

    @property
    def handle(self) -> str:
        text = msgspec.json.encode({"taskId": self.task_id, "sourceArn": queues.arn(self.source)})
        return base64.b64encode(text).decode()

    def listed(self) -> dict[str, Any]:
        """The task as ListMessageMoveTasks shows it."""
        entry: dict[str, Any] = {
            "SourceArn": queues.arn(self.source),
            "Status": self.status,
            "StartedTimestamp": self.started_ms,
            "ApproximateNumberOfMessagesMoved": self.moved,
            "ApproximateNumberOfMessagesToMove": self.to_move,
        }
        if self.status == "RUNNING":
            entry["TaskHandle"] = self.handle
        if self.destination is not None:
            entry["DestinationArn"] = queues.arn(self.destination)
        if self.rate is not None:
            entry["MaxNumberOfMessagesPerSecond"] = self.rate
        if self.failure is not None:
            entry["FailureReason"] = self.failure
        return entry


def not_found(parameter: str) -> SqsError:
    return SqsError(
        "ResourceNotFoundException",
        f"The resource that you specified for the {parameter} parameter doesn't exist.",
        404,
    )


@dataclass
class MoveTasks:
    """The message-move tasks of one broker."""

    queue: Callable[[str], Awaitable[AnyQueue]]  # a queue by name
    exists: Callable[[str], Awaitable[bool]]
    is_dead_letter_queue: Callable[[str], Awaitable[bool]]
    _tasks: dict[str, list[MoveTask]] = field(default_factory=dict)  # by source, newest first

    async def start(self, source_arn: str, destination_arn: str | None, rate: int | None) -> str:
        source = _queue_of(source_arn, "SourceArn")
        if not await self.exists(source):
            raise not_found("SourceArn")
        if not await self.is_dead_letter_queue(source):
            raise invalid("Source queue must be configured as a Dead Letter Queue.")
        destination = None
        if destination_arn is not None:
            destination = _queue_of(destination_arn, "DestinationArn")
            if not await self.exists(destination):
                raise not_found("DestinationArn")
        if rate is not None:
            within("MaxNumberOfMessagesPerSecond", rate, 1, MAX_RATE, 1)
        listed = self._tasks.setdefault(source, [])
        if any(t.status in ("RUNNING", "CANCELLING") for t in listed):
            raise invalid(
                "There is already a task running. Only one active task is allowed for a source "
                "queue arn at a given time."
            )
        stats = await (await self.queue(source)).stats()
        task = MoveTask(source, destination, rate, stats.pending + stats.retry)
        listed.insert(0, task)
        del listed[KEPT:]
        task.runner = asyncio.create_task(self._run(task), name=f"s3q-move-{source}")
        return task.handle

    async def cancel(self, handle: str) -> int:
        task = self._named(handle)
        if task.status != "RUNNING":
            raise invalid("Only active tasks can be cancelled.")
        task.status = "CANCELLING"
        task.cancelled.set()
        if task.runner is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(task.runner)
        return task.moved

    async def listed(self, source_arn: str, limit: int | None) -> list[dict[str, Any]]:
        source = _queue_of(source_arn, "SourceArn")
        if not await self.exists(source):
            raise not_found("SourceArn")
        count = within("MaxResults", limit, 1, KEPT, 1)
        return [t.listed() for t in self._tasks.get(source, [])[:count]]

    def source_of(self, handle: str) -> str | None:
        """The source queue a task handle names (None: it names none; :meth:`cancel` says
        what is wrong with it)."""
        try:
            text = base64.b64decode(handle, validate=True)
            named = msgspec.json.decode(text, type=dict[str, str])
            return queues.name_of_arn(named["sourceArn"])
        except (binascii.Error, ValueError, KeyError, msgspec.DecodeError, SqsError):
            return None

    def _named(self, handle: str) -> MoveTask:
        try:
            text = base64.b64decode(handle, validate=True)
            named = msgspec.json.decode(text, type=dict[str, str])
            task_id, source_arn = named["taskId"], named["sourceArn"]
        except (binascii.Error, ValueError, KeyError, msgspec.DecodeError):
            raise invalid("Value for parameter TaskHandle is invalid.") from None
        try:
            source = queues.name_of_arn(source_arn)
        except SqsError:
            raise not_found("SourceArn") from None
        for task in self._tasks.get(source, []):
            if task.task_id == task_id:
                return task
        if source not in self._tasks:
            raise not_found("SourceArn")
        raise SqsError("ResourceNotFoundException", "Task does not exist.", 404)

    # -- running -----------------------------------------------------------------------------

    async def _run(self, task: MoveTask) -> None:
        # the broker moves them, its caller's grant (admin of the queues) checked at the start
        peerauth.ACTING.set(None)
        started = time.monotonic()
        try:
            source = await self.queue(task.source)
            while task.moved < task.to_move and not task.cancelled.is_set():
                count = min(BATCH, task.to_move - task.moved, task.rate or BATCH)
                batch = await source.dequeue(count, HOLD, 0.0)
                if not batch:
                    break
                try:
                    await self._move(task, batch)
                except BaseException:
                    with contextlib.suppress(S3QError):
                        await source.release(batch)
                    raise
                await source.complete_batch(batch)
                task.moved += len(batch)
                if task.rate is not None:  # pace: rate messages a second, at most
                    due = started + task.moved / task.rate - time.monotonic()
                    if due > 0:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(task.cancelled.wait(), due)
            task.status = "CANCELLED" if task.cancelled.is_set() else "COMPLETED"
        except Failed as exc:
            task.status, task.failure = "FAILED", str(exc)
        except S3QError as exc:
            log.warning("message-move task from %s failed: %s", task.source, exc)
            task.status, task.failure = "FAILED", "AWS.SimpleQueueService.InternalError"
        log.info("message-move task from %s: %s, %d moved", task.source, task.status, task.moved)

    async def _move(self, task: MoveTask, batch: list[Message]) -> None:
        by_target: dict[str, list[dict[str, Any]]] = {}
        for m in batch:
            target = task.destination or _origin(m)
            attributes = {k: v for k, v in m.attributes.items() if k != SOURCE_ATTRIBUTE}
            by_target.setdefault(target, []).append(
                {
                    "payload": m.payload,
                    "priority": m.priority,
                    "group": m.group,
                    "tenant": m.tenant,
                    "dedup_id": f"move:{task.source}:{m.id}",  # moved again: enqueued once
                    "attributes": attributes,
                }
            )
        for target, items in by_target.items():
            if not await self.exists(target):
                raise Failed("AWS.SimpleQueueService.NonExistentQueue")
            await (await self.queue(target)).enqueue_batch(items)


def _queue_of(arn: str, parameter: str) -> str:
    try:
        return queues.name_of_arn(arn)
    except SqsError:
        raise invalid(f"Value {arn} for parameter {parameter} is invalid.") from None


def _origin(message: Message) -> str:
    """The queue a dead letter died in (its DeadLetterQueueSourceArn)."""
    arn = messages.system_attribute(message, "DeadLetterQueueSourceArn")
    if arn is None:
        raise Failed("The message has no DeadLetterQueueSourceArn: give a DestinationArn.")
    try:
        return queues.name_of_arn(arn)
    except SqsError:
        raise Failed(f"The message's DeadLetterQueueSourceArn {arn} names no queue.") from None
