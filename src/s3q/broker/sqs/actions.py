"""The SQS actions, each on top of the queue registry and the public AsyncQueue methods.

Semantics (see docs/sqs.md): MessageGroupId is the s3q group on FIFO queues and the tenant on
standard ones (fair queues), a deduplication id
the s3q dedup id, ApproximateReceiveCount the attempts, SentTimestamp the enqueue time, and a
receipt handle wraps the s3q receipt. Dead letters of a queue with a RedrivePolicy are moved
to its dead-letter queue lazily: on ReceiveMessage and GetQueueAttributes of either queue.
Messages are translated in :mod:`.messages`, dead letters moved in :mod:`.moves`, deletes and
visibility changes made as SQS makes them in :mod:`.acks`; tags are kept in :mod:`.tags`,
permissions as statements of the queue's policy in :mod:`.permissions`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ...config import MAX_VISIBILITY
from ...errors import InvalidArgument, ReceiptExpired
from ...partitions import placement
from ...partitions.queue import PartitionedQueue
from ...surface import AsyncQueueSurface
from ...wire.codec import check_name
from ..forward import ForwardedQueue
from ..principals import ADMIN, READ, RECEIVE, SEND
from ..registry import QueueRegistry
from . import acks, handles, messages, permissions, queues, shapes, tags
from .catalog import Catalog, Entry
from .moves import MoveTasks, Redrives
from .protocol import SqsError, invalid, within

log = logging.getLogger("s3q.broker.sqs")

AnyQueue = AsyncQueueSurface  # a queue this broker leads, or one another broker does

MAX_BATCH = 10
MAX_BATCH_BYTES = 1024 * 1024
MAX_LIST = 1000
#: a receive with visibility timeout 0 leases for this long, and ends the lease once durable
#: (a lease shorter than its commit would lapse before the answer, and the message be left out)
ZERO_VISIBILITY_HOLD = 60.0
BATCH_ID = re.compile(r"[A-Za-z0-9_-]{1,80}")


def does_not_exist() -> SqsError:
    return SqsError("QueueDoesNotExist", "The specified queue does not exist.")


def _anyone(name: str) -> None:
    return None


def _everyone(name: str) -> bool:
    return True


@dataclass
class Call:
    """One SQS request: where it was sent (``scheme://host``, what queue URLs begin with),
    whether its client has gone by now, and the queue it named once known. ``guard``
    refuses (AccessDenied) a queue its caller may not act on as the action does, and is
    asked of each queue before it is read; ``sees``: whether its caller may read a queue
    (listings show only those); ``denied``: a guard refused it."""

    origin: str
    gone: Callable[[], Awaitable[bool]]
    queue: str | None = None
    guard: Callable[[str], None] = _anyone
    sees: Callable[[str], bool] = _everyone
    denied: bool = False


@dataclass
class Service:
    """Every SQS action over the queues of one broker."""

    registry: QueueRegistry
    catalog: Catalog
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    moves: MoveTasks = field(init=False)
    redrives: Redrives = field(init=False)

    def __post_init__(self) -> None:
        self.moves = MoveTasks(self.registry.get, self._exists, self._is_dead_letter_queue)
        self.redrives = Redrives(self.catalog, self.registry.get)

    async def _exists(self, name: str) -> bool:
        return await self.catalog.get(name) is not None

    async def _is_dead_letter_queue(self, name: str) -> bool:
        await self.catalog.entries(refresh=True)
        return bool(self.catalog.sources(name))

    def _lock(self, key: str) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    # -- queues by name and URL ----------------------------------------------------------------

    def url_of(self, call: Call, name: str) -> str:
        return f"{call.origin}/{queues.ACCOUNT}/{name}"

    async def _named(self, call: Call, name: str) -> tuple[str, AnyQueue]:
        try:
            check_name(name)
        except InvalidArgument:
            raise does_not_exist() from None
        call.queue = name
        call.guard(name)
        if await self.catalog.get(name) is None:
            raise does_not_exist()
        return name, await self.registry.get(name)

    async def _by_url(self, call: Call, url: str) -> tuple[str, AnyQueue]:
        return await self._named(call, url.rstrip("/").rsplit("/", 1)[-1])

    # -- queue actions ---------------------------------------------------------------------------

    async def create_queue(self, call: Call, req: shapes.CreateQueue) -> Any:
        name = req.QueueName
        queues.check_new_name(name, req.Attributes)
        call.queue = name
        call.guard(name)
        checked = queues.check(name, req.Attributes, creating=True)
        tagged: dict[str, str] = {}
        if req.tags:
            tags.add(name, tagged, req.tags)
        target = await self._check_target(name, checked)
        async with self._lock(name):
            entry = await self.catalog.get(name)
            existed = entry is not None or await self.registry.exists(name)
            queue = await self.registry.get(name)
            settings = await queue.configure()
            if existed:
                _same_attributes(name, settings, checked)
                if entry is None:  # made with the native API: adopted as it is
                    await _adopt(self.catalog, name, queue, settings)
                return {"QueueUrl": self.url_of(call, name)}
            stamp = str(int(time.time()))
            saved = {
                k: v
                for k, v in queues.saved_of(settings).items()
                if not k.startswith((queues.KEY, tags.TAG))
            }
            saved[queues.KEY + "CreatedTimestamp"] = saved[queues.KEY + "LastModifiedTimestamp"] = (
                stamp
            )
            saved.update(tagged)
            full = {
                "VisibilityTimeout": queues.DEFAULTS["VisibilityTimeout"],
                "MaximumMessageSize": queues.DEFAULTS["MaximumMessageSize"],
                "RedrivePolicy": "",
                **checked,
            }
            await queue.configure(**queues.settings_for(full, saved), dedup_window=300.0)
            await self.catalog.put(name, Entry(time.time(), target))
        return {"QueueUrl": self.url_of(call, name)}

    async def _check_target(self, name: str, checked: dict[str, str]) -> str | None:
        policy = queues.redrive_policy(checked.get("RedrivePolicy", ""))
        if policy is None:
            return None
        target = policy[0]
        if await self.catalog.get(target) is None:
            raise invalid(
                f"Value {checked['RedrivePolicy']} for parameter RedrivePolicy is invalid. "
                "Reason: Dead-letter target does not exist."
            )
        if queues.is_fifo(target) != queues.is_fifo(name) or target == name:
            raise invalid(
                f"Value {checked['RedrivePolicy']} for parameter RedrivePolicy is invalid. "
                "Reason: the dead-letter queue must be another queue of the same type."
            )
        return target

    async def get_queue_url(self, call: Call, req: shapes.ByName) -> Any:
        name, _ = await self._named(call, req.QueueName)
        return {"QueueUrl": self.url_of(call, name)}

    async def list_queues(self, call: Call, req: shapes.ListQueues) -> Any:
        prefix = req.QueueNamePrefix or ""
        names = [
            n
            for n in sorted(await self.catalog.entries(refresh=True))
            if n.startswith(prefix) and call.sees(n)
        ]
        return _page(
            names, req.MaxResults, req.NextToken, "QueueUrls", lambda n: self.url_of(call, n)
        )

    async def delete_queue(self, call: Call, req: shapes.ByUrl) -> Any:
        name, queue = await self._by_url(call, req.QueueUrl)
        if isinstance(queue, ForwardedQueue):
            raise SqsError(
                "UnsupportedOperation",
                f"queue {name} is led by the broker at {queue.leader}: send DeleteQueue there",
            )
        logs = [name]
        if isinstance(queue, PartitionedQueue):  # every partition must be led here
            away = [p.index for p in queue.partitions if p.led is None]
            if away:
                raise SqsError(
                    "UnsupportedOperation",
                    f"queue {name} has partitions led by other brokers ({away}): stop them, "
                    "or send DeleteQueue to the broker that leads them all",
                )
            logs = [placement.name_of(name, p.index) for p in queue.partitions]
        async with self._lock(name):
            await self.catalog.remove(name)
            for log in logs:
                await self.registry.close_queue(log)
            await self.catalog.delete_objects(name)
        return {}

    async def purge_queue(self, call: Call, req: shapes.ByUrl) -> Any:
        _, queue = await self._by_url(call, req.QueueUrl)
        await queue.purge()
        return {}

    async def get_queue_attributes(self, call: Call, req: shapes.GetQueueAttributes) -> Any:
        name, queue = await self._by_url(call, req.QueueUrl)
        wanted = set(req.AttributeNames)
        unknown = wanted - queues.ALL - {"All"}
        if unknown:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {sorted(unknown)[0]}.")
        if not wanted:
            return {}
        settings = await queue.configure()
        values = queues.current(name, settings)
        if "All" in wanted or wanted & queues.COUNTS:
            await self.redrives.redrive(name, settings)
            stats = await queue.stats()
            values["ApproximateNumberOfMessages"] = str(stats.pending)
            values["ApproximateNumberOfMessagesNotVisible"] = str(stats.processing)
            values["ApproximateNumberOfMessagesDelayed"] = str(stats.delayed + stats.retry)
        values["QueueArn"] = queues.arn(name)
        for which in ("CreatedTimestamp", "LastModifiedTimestamp"):
            stamp = queues.timestamp(settings, which)
            if stamp is not None:
                values[which] = stamp
        if "All" not in wanted:
            values = {k: v for k, v in values.items() if k in wanted}
        return {"Attributes": values} if values else {}

    async def set_queue_attributes(self, call: Call, req: shapes.SetQueueAttributes) -> Any:
        name, queue = await self._by_url(call, req.QueueUrl)
        checked = queues.check(name, req.Attributes, creating=False)
        target = await self._check_target(name, checked)
        async with self._lock(name):
            saved = queues.saved_of(await queue.configure())
            saved[queues.KEY + "LastModifiedTimestamp"] = str(int(time.time()))
            await queue.configure(**queues.settings_for(checked, saved))
            if "RedrivePolicy" in checked:
                entry = await self.catalog.get(name)
                created = entry.created if entry is not None else time.time()
                await self.catalog.put(name, Entry(created, target))
        return {}

    async def list_dead_letter_source_queues(self, call: Call, req: shapes.ListSources) -> Any:
        name, _ = await self._by_url(call, req.QueueUrl)
        await self.catalog.entries(refresh=True)
        sources = [n for n in self.catalog.sources(name) if call.sees(n)]
        return _page(
            sources, req.MaxResults, req.NextToken, "queueUrls", lambda n: self.url_of(call, n)
        )

    async def tag_queue(self, call: Call, req: shapes.TagQueue) -> Any:
        await self._resave(call, req.QueueUrl, lambda name, saved: tags.add(name, saved, req.Tags))
        return {}

    async def untag_queue(self, call: Call, req: shapes.UntagQueue) -> Any:
        await self._resave(call, req.QueueUrl, lambda _, saved: tags.remove(saved, req.TagKeys))
        return {}

    async def list_queue_tags(self, call: Call, req: shapes.ByUrl) -> Any:
        _, queue = await self._by_url(call, req.QueueUrl)
        found = tags.of(queues.saved_of(await queue.configure()))
        return {"Tags": found} if found else {}

    async def add_permission(self, call: Call, req: shapes.AddPermission) -> Any:
        def add(name: str, saved: dict[str, str]) -> None:
            permissions.add(name, saved, req.Label, req.AWSAccountIds, req.Actions)

        await self._resave(call, req.QueueUrl, add)
        return {}

    async def remove_permission(self, call: Call, req: shapes.RemovePermission) -> Any:
        await self._resave(
            call, req.QueueUrl, lambda name, saved: permissions.remove(name, saved, req.Label)
        )
        return {}

    async def _resave(
        self, call: Call, url: str, change: Callable[[str, dict[str, str]], None]
    ) -> None:
        """Change the saved attributes of the queue at ``url`` (``change`` raises to refuse:
        then nothing is written)."""
        name, queue = await self._by_url(call, url)
        async with self._lock(name):
            saved = queues.saved_of(await queue.configure())
            change(name, saved)
            await queue.configure(attributes=saved)

    # -- sending ---------------------------------------------------------------------------------

    async def send_message(self, call: Call, req: shapes.SendMessage) -> Any:
        name, queue = await self._by_url(call, req.QueueUrl)
        item, answer = messages.sent(name, await queue.configure(), req)
        [mid] = await queue.enqueue_batch([item])
        return {**answer, "MessageId": mid, **messages.sequence(name, mid)}

    async def send_message_batch(self, call: Call, req: shapes.SendMessageBatch) -> Any:
        name, queue = await self._by_url(call, req.QueueUrl)
        _check_batch("SendMessageBatch", req.Entries)
        size = sum(messages.size_of(e.MessageBody, e.MessageAttributes) for e in req.Entries)
        if size > MAX_BATCH_BYTES:
            raise SqsError(
                "BatchRequestTooLong",
                f"Batch requests cannot be longer than {MAX_BATCH_BYTES} bytes. You have sent "
                f"{size} bytes.",
            )
        settings = await queue.configure()
        failed: list[dict[str, Any]] = []
        ready: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        for entry in req.Entries:
            try:
                item, answer = messages.sent(name, settings, entry)
            except SqsError as exc:
                if exc.name == "MissingParameter" or exc.whole_request:
                    # as SQS: a FIFO entry without its group or dedup id fails the request
                    raise SqsError("InvalidParameterValue", str(exc)) from None
                failed.append(_failure(entry.Id, exc))
            else:
                ready.append((entry.Id, item, answer))
        ids = await queue.enqueue_batch([item for _, item, _ in ready]) if ready else []
        successful = [
            {"Id": eid, "MessageId": mid, **answer, **messages.sequence(name, mid)}
            for (eid, _, answer), mid in zip(ready, ids, strict=True)
        ]
        return {"Successful": successful, "Failed": failed}

    # -- receiving -------------------------------------------------------------------------------

    async def receive_message(self, call: Call, req: shapes.ReceiveMessage) -> Any:
        name, queue = await self._by_url(call, req.QueueUrl)
        count = within("MaxNumberOfMessages", req.MaxNumberOfMessages, 1, 10, 1)
        settings = await queue.configure()
        values = queues.current(name, settings)
        wait = within(
            "WaitTimeSeconds",
            req.WaitTimeSeconds,
            0,
            20,
            int(values.get("ReceiveMessageWaitTimeSeconds", "0")),
        )
        visibility: float | None = None
        if req.VisibilityTimeout is not None:
            seconds = within("VisibilityTimeout", req.VisibilityTimeout, 0, int(MAX_VISIBILITY), 0)
            visibility = float(seconds) or queues.MIN_VISIBILITY
        await self.redrives.redrive(name, settings)
        together = count if queues.is_fifo(name) else 1  # a FIFO group's messages, in order
        default = settings["visibility_timeout"]
        effective = (
            visibility if visibility is not None or not isinstance(default, float) else default
        )
        if effective is not None and effective <= queues.MIN_VISIBILITY:
            # VisibilityTimeout 0: lease long enough to be durable, then show the messages again
            found = await queue.dequeue(
                count, ZERO_VISIBILITY_HOLD, float(wait), per_group=together
            )
            await asyncio.gather(*(queue.extend(m, 0.0) for m in found))
        else:
            found = await queue.dequeue(count, visibility, float(wait), per_group=together)
        target = queues.dead_letter_target(name, settings)
        if target is not None:  # this receive may have made messages dead: move them now
            await self.redrives.move(name, target)
        if found and await call.gone():
            await queue.release(found)  # a long poll whose client left: give the leases back
            return {}
        system = set(req.AttributeNames) | set(req.MessageSystemAttributeNames)
        now = time.time()
        names = req.MessageAttributeNames
        received = [messages.received(name, m, now, system, names) for m in found]
        return {"Messages": received} if received else {}

    # -- acknowledging and leases ----------------------------------------------------------------

    async def delete_message(self, call: Call, req: shapes.DeleteMessage) -> Any:
        name, queue = await self._by_url(call, req.QueueUrl)
        mid, receipt, _ = handles.decode(name, req.ReceiptHandle)
        await acks.delete(queue, queues.is_fifo(name), req.ReceiptHandle, mid, receipt)
        return {}

    async def delete_message_batch(self, call: Call, req: shapes.DeleteMessageBatch) -> Any:
        name, queue = await self._by_url(call, req.QueueUrl)
        _check_batch("DeleteMessageBatch", req.Entries)
        fifo = queues.is_fifo(name)
        failed: list[dict[str, Any]] = []
        ready: list[tuple[str, str, str, str]] = []
        for entry in req.Entries:
            try:
                mid, receipt, _ = handles.decode(name, entry.ReceiptHandle)
                ready.append((entry.Id, entry.ReceiptHandle, mid, receipt))
            except SqsError as exc:
                failed.append(_failure(entry.Id, exc))
        if not fifo:
            try:  # one commit for the whole batch, the usual case
                await queue.complete_batch([receipt for *_, receipt in ready])
                return {"Successful": [{"Id": eid} for eid, *_ in ready], "Failed": failed}
            except ReceiptExpired:  # some are stale: each on its own (riding shared commits)
                pass
        results = await asyncio.gather(
            *(acks.delete(queue, fifo, handle, mid, receipt) for _, handle, mid, receipt in ready),
            return_exceptions=True,
        )
        done = []
        for (eid, *_), result in zip(ready, results, strict=True):
            if isinstance(result, SqsError):
                failed.append(_failure(eid, result))
            elif isinstance(result, BaseException):
                raise result from None
            else:
                done.append(eid)
        return {"Successful": [{"Id": eid} for eid in done], "Failed": failed}

    async def change_message_visibility(self, call: Call, req: shapes.ChangeVisibility) -> Any:
        name, queue = await self._by_url(call, req.QueueUrl)
        await acks.change_visibility(name, queue, req.ReceiptHandle, req.VisibilityTimeout)
        return {}

    async def change_message_visibility_batch(
        self, call: Call, req: shapes.ChangeVisibilityBatch
    ) -> Any:
        name, queue = await self._by_url(call, req.QueueUrl)
        _check_batch("ChangeMessageVisibilityBatch", req.Entries)

        async def change(entry: shapes.ChangeEntry) -> None:
            await acks.change_visibility(name, queue, entry.ReceiptHandle, entry.VisibilityTimeout)

        results = await asyncio.gather(*(change(e) for e in req.Entries), return_exceptions=True)
        successful, failed = [], []
        for entry, result in zip(req.Entries, results, strict=True):
            if isinstance(result, SqsError):
                failed.append(_failure(entry.Id, result))
            elif isinstance(result, BaseException):
                raise result
            else:
                successful.append({"Id": entry.Id})
        return {"Successful": successful, "Failed": failed}

    # -- message-move tasks ----------------------------------------------------------------------

    async def start_message_move_task(self, call: Call, req: shapes.StartMove) -> Any:
        _guard_arns(call, req.SourceArn, req.DestinationArn)
        handle = await self.moves.start(
            req.SourceArn, req.DestinationArn, req.MaxNumberOfMessagesPerSecond
        )
        return {"TaskHandle": handle}

    async def cancel_message_move_task(self, call: Call, req: shapes.CancelMove) -> Any:
        source = self.moves.source_of(req.TaskHandle)
        if source is not None:
            call.queue = source
            call.guard(source)
        return {"ApproximateNumberOfMessagesMoved": await self.moves.cancel(req.TaskHandle)}

    async def list_message_move_tasks(self, call: Call, req: shapes.ListMoves) -> Any:
        _guard_arns(call, req.SourceArn)
        return {"Results": await self.moves.listed(req.SourceArn, req.MaxResults)}


def _guard_arns(call: Call, *arns: str | None) -> None:
    """The call's guard asked of each queue these ARNs name (one that names none is the
    action's to refuse)."""
    for value in arns:
        if value is None:
            continue
        try:
            name = queues.name_of_arn(value)
        except SqsError:
            continue
        call.queue = call.queue or name
        call.guard(name)


def _check_batch(
    action: str, entries: Iterable[shapes.DeleteEntry | shapes.SendEntry | shapes.ChangeEntry]
) -> None:
    """SQS's checks of a batch request's entries (``action``'s), with its texts."""
    ids = [e.Id for e in entries]
    if not ids:
        raise SqsError(
            "EmptyBatchRequest",
            f"There should be at least one {action}RequestEntry in the request.",
        )
    if len(ids) > MAX_BATCH:
        raise SqsError(
            "TooManyEntriesInBatchRequest",
            f"Maximum number of entries per request are {MAX_BATCH}. You have sent {len(ids)}.",
        )
    for eid in ids:
        if not BATCH_ID.fullmatch(eid):
            raise SqsError(
                "InvalidBatchEntryId",
                "A batch entry id can only contain alphanumeric characters, hyphens and "
                "underscores. It can be at most 80 letters long.",
            )
    seen: set[str] = set()
    for eid in ids:
        if eid in seen:
            raise SqsError("BatchEntryIdsNotDistinct", f"Id {eid} repeated.")
        seen.add(eid)


async def _adopt(catalog: Catalog, name: str, queue: AnyQueue, settings: dict[str, Any]) -> None:
    """Name a queue made with the native API to the endpoint. Its settings stay as they are
    (its max_attempts, visibility timeout, message size, dedup window); only the timestamps
    GetQueueAttributes shows are added to its saved attributes."""
    saved = queues.saved_of(settings)
    stamp = str(int(time.time()))
    added = {
        queues.KEY + k: stamp
        for k in ("CreatedTimestamp", "LastModifiedTimestamp")
        if queues.KEY + k not in saved
    }
    if added:
        await queue.configure(attributes={**saved, **added})
    await catalog.put(name, Entry(time.time(), queues.dead_letter_target(name, settings)))


def _same_attributes(name: str, settings: dict[str, Any], checked: dict[str, str]) -> None:
    """QueueNameExists, as SQS answers, unless every attribute of a CreateQueue of an existing
    queue has the value the queue has."""
    now_values = queues.current(name, settings)
    for attribute, value in checked.items():
        unset = "false" if attribute == "FifoQueue" else ""
        if now_values.get(attribute, unset) != value:
            raise SqsError(
                "QueueNameExists",
                "A queue already exists with the same name and a different value "
                f"for attribute {attribute}",
            )


def _failure(eid: str, error: SqsError) -> dict[str, Any]:
    return {"Id": eid, "SenderFault": error.sender_fault, "Code": error.code, "Message": str(error)}


def _page(
    names: list[str],
    max_results: int | None,
    token: str | None,
    key: str,
    url: Callable[[str], str],
) -> dict[str, Any]:
    """One page of a listing: ``MaxResults`` (1-1000) names after ``NextToken``."""
    if token:
        try:
            after = base64.urlsafe_b64decode(token.encode()).decode()
        except (binascii.Error, ValueError):
            raise invalid("Invalid NextToken value.") from None
        names = [n for n in names if n > after]
    limit = within("MaxResults", max_results, 1, MAX_LIST, MAX_LIST)
    page = names[:limit]
    answer: dict[str, Any] = {key: [url(n) for n in page]} if page else {}
    if max_results is not None and len(names) > limit:
        answer["NextToken"] = base64.urlsafe_b64encode(page[-1].encode()).decode()
    return answer


Handler = Callable[[Service, Call, Any], Awaitable[Any]]

#: Action name -> (request shape, handler).
ACTIONS: dict[str, tuple[type[shapes.Shape], Handler]] = {
    "CreateQueue": (shapes.CreateQueue, Service.create_queue),
    "GetQueueUrl": (shapes.ByName, Service.get_queue_url),
    "ListQueues": (shapes.ListQueues, Service.list_queues),
    "DeleteQueue": (shapes.ByUrl, Service.delete_queue),
    "PurgeQueue": (shapes.ByUrl, Service.purge_queue),
    "GetQueueAttributes": (shapes.GetQueueAttributes, Service.get_queue_attributes),
    "SetQueueAttributes": (shapes.SetQueueAttributes, Service.set_queue_attributes),
    "ListDeadLetterSourceQueues": (shapes.ListSources, Service.list_dead_letter_source_queues),
    "TagQueue": (shapes.TagQueue, Service.tag_queue),
    "UntagQueue": (shapes.UntagQueue, Service.untag_queue),
    "ListQueueTags": (shapes.ByUrl, Service.list_queue_tags),
    "AddPermission": (shapes.AddPermission, Service.add_permission),
    "RemovePermission": (shapes.RemovePermission, Service.remove_permission),
    "SendMessage": (shapes.SendMessage, Service.send_message),
    "SendMessageBatch": (shapes.SendMessageBatch, Service.send_message_batch),
    "ReceiveMessage": (shapes.ReceiveMessage, Service.receive_message),
    "DeleteMessage": (shapes.DeleteMessage, Service.delete_message),
    "DeleteMessageBatch": (shapes.DeleteMessageBatch, Service.delete_message_batch),
    "ChangeMessageVisibility": (shapes.ChangeVisibility, Service.change_message_visibility),
    "ChangeMessageVisibilityBatch": (
        shapes.ChangeVisibilityBatch,
        Service.change_message_visibility_batch,
    ),
    "StartMessageMoveTask": (shapes.StartMove, Service.start_message_move_task),
    "CancelMessageMoveTask": (shapes.CancelMove, Service.cancel_message_move_task),
    "ListMessageMoveTasks": (shapes.ListMoves, Service.list_message_move_tasks),
}

#: The action class (s3q.broker.principals) an SQS action needs on each queue it names.
CLASS_OF: dict[str, str] = {
    **dict.fromkeys(("SendMessage", "SendMessageBatch"), SEND),
    **dict.fromkeys(
        (
            "ReceiveMessage",
            "DeleteMessage",
            "DeleteMessageBatch",
            "ChangeMessageVisibility",
            "ChangeMessageVisibilityBatch",
        ),
        RECEIVE,
    ),
    **dict.fromkeys(
        (
            "GetQueueUrl",
            "GetQueueAttributes",
            "ListQueues",
            "ListQueueTags",
            "ListDeadLetterSourceQueues",
            "ListMessageMoveTasks",
        ),
        READ,
    ),
    **dict.fromkeys(
        (
            "CreateQueue",
            "SetQueueAttributes",
            "PurgeQueue",
            "DeleteQueue",
            "TagQueue",
            "UntagQueue",
            "AddPermission",
            "RemovePermission",
            "StartMessageMoveTask",
            "CancelMessageMoveTask",
        ),
        ADMIN,
    ),
}

#: SQS actions this endpoint does not offer (UnsupportedOperation): none at present.
UNSUPPORTED: frozenset[str] = frozenset()
