"""The native API's route table: kept once, used both to serve and to write the OpenAPI document.

Every route under ``/v1`` takes its arguments from the path, the query string and a msgpack
(or JSON) map body, as declared here by :class:`Param`; undeclared or missing arguments and
arguments of the wrong JSON type are refused with 400 before the queue is touched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from .. import validate
from ..api import AsyncQueue
from ..errors import InvalidArgument
from ..log.staging import StagedObject
from ..partitions.queue import PartitionedQueue
from ..wire import pages
from ..wire.answers import heard, spread
from ..wire.codec import SERVED_NAME_PATTERN, QueueNotFound
from .forward import ForwardedQueue
from .registry import QueueRegistry


async def _staying() -> bool:
    return False


def _everyone(name: str) -> bool:
    return True


@dataclass
class Call:
    """One request to a route: its checked arguments and where to find its queue.
    ``forwarded``: another broker sent it (believing this one leads the queue); ``gone``:
    whether its client has left by now (a long poll gives back what it leased then);
    ``sees``: whether its caller may read a queue (a listing of queues shows only those)."""

    registry: QueueRegistry
    name: str | None
    args: dict[str, Any]
    forwarded: bool = False
    gone: Callable[[], Awaitable[bool]] = _staying
    sees: Callable[[str], bool] = _everyone

    async def queue(
        self, *, create: bool = False
    ) -> AsyncQueue | ForwardedQueue | PartitionedQueue:
        """The call's queue; QueueNotFound if the store does not hold it, unless ``create``
        (a call that adds messages or settings makes the queue). Its writer is noted for the
        answer's ``s3q-writer`` header (a forwarded queue's, by its leader's answer)."""
        assert self.name is not None
        queue = await self.registry.get(self.name, forwarded=self.forwarded, create=create)
        heard(queue.writer if isinstance(queue, AsyncQueue) else None)
        if isinstance(queue, PartitionedQueue):
            spread(len(queue.partitions))  # (the client spreads its calls over the brokers)
        elif isinstance(queue, AsyncQueue) and queue.config.partitions > 1:
            spread(queue.config.partitions)  # (a partition 0 not served whole yet)
        return queue


Handler = Callable[[Call], Awaitable[Any]]


@dataclass(frozen=True)
class Param:
    name: str
    where: Literal["path", "query", "body"]
    schema: dict[str, Any]
    required: bool = False
    description: str = ""


@dataclass(frozen=True)
class Endpoint:
    method: Literal["GET", "POST"]
    path: str  # under /v1
    operation: str
    summary: str
    handler: Handler
    params: tuple[Param, ...] = ()
    response: dict[str, Any] | None = None  # schema of the 200 answer


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(**props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props)}


STR = {"type": "string"}
INT = {"type": "integer"}
BOOL = {"type": "boolean"}
NUM = {"type": "number"}
STR_OR_NULL = {"type": ["string", "null"]}
STRS = {"type": "array", "items": STR}
PAYLOAD = {"type": "string", "format": "binary", "description": "msgpack bin: raw bytes"}
DURABILITY = {"enum": ["durable", "buffered", None]}
TENANT_DOC = "who the message is for: a noisy tenant's messages wait behind the others'"
DURABILITY_DOC = (
    'answered once durable ("durable") or once batched ("buffered"); default the queue\'s'
)
ITEM = {
    "oneOf": [
        PAYLOAD,
        {
            "type": "object",
            "properties": {
                "payload": PAYLOAD,
                "priority": INT,
                "delay": NUM,
                "dedup_id": STR_OR_NULL,
                "group": STR_OR_NULL,
                "attributes": {"type": ["object", "null"], "additionalProperties": STR},
                "tenant": STR_OR_NULL,
            },
            "required": ["payload"],
        },
    ]
}
MESSAGES = obj(messages={"type": "array", "items": ref("Message")})
#: a dequeue asked for pages: its stretches as Pages (s3q.wire.pages), each going at its ``at``
PAGED = {
    **MESSAGES,
    "properties": {
        **MESSAGES["properties"],
        "pages": {"type": "array", "items": ref("Page")},
    },
}
EMPTY: dict[str, Any] = {"type": "object"}

NAME = Param("name", "path", {"type": "string", "pattern": SERVED_NAME_PATTERN}, True)


def body(name: str, schema: dict[str, Any], required: bool = False, doc: str = "") -> Param:
    return Param(name, "body", schema, required, doc)


# ----------------------------------------------------------------------------- handlers


async def list_queues(call: Call) -> Any:
    return {"queues": [n for n in call.registry.names() if call.sees(n)]}


async def cluster(call: Call) -> Any:
    return {"broker": call.registry.address, "brokers": call.registry.brokers()}


async def enqueue(call: Call) -> Any:
    return {"id": await (await call.queue(create=True)).enqueue(**call.args)}


async def enqueue_batch(call: Call) -> Any:
    queue = await call.queue(create=True)
    return {
        "ids": await queue.enqueue_batch(call.args["items"], durability=call.args.get("durability"))
    }


async def enqueue_staged(call: Call) -> Any:
    try:
        objects = msgspec.convert(call.args["objects"], list[StagedObject])
    except msgspec.ValidationError as exc:
        raise InvalidArgument(f"objects: {exc}") from None
    made = await (await call.queue(create=True)).enqueue_staged(objects, call.args.get("token"))
    return {"ids": None if made is None else list(made)}


async def dequeue(call: Call) -> Any:
    try:
        queue = await call.queue()
    except QueueNotFound:
        # a consumer may start before its producers: it waits as on an empty queue, and no
        # queue is made for it
        await call.registry.pause(validate.wait(call.args.get("wait", 0.0)))
        return {"messages": []}
    paged = call.args.pop("pages", False)
    if not isinstance(paged, bool):
        raise InvalidArgument(f"pages must be true or false, got {paged!r}")
    if paged and isinstance(queue, AsyncQueue | PartitionedQueue):  # (led elsewhere: messages)
        answer = await queue.dequeue_pages(**call.args)
        if (answer.messages or answer.pages) and await call.gone():
            await queue.release(pages.merged(answer))
            return {"messages": []}
        return answer
    messages = await queue.dequeue(**call.args)
    if messages and await call.gone():
        # A long poll whose client left: give its leases back instead of stranding them.
        await queue.release(messages)
        return {"messages": []}
    return {"messages": messages}


async def complete(call: Call) -> Any:
    await (await call.queue()).complete_batch(call.args["receipts"])
    return {}


async def fail(call: Call) -> Any:
    retry_at = await (await call.queue()).fail(call.args["receipt"], call.args.get("error"))
    return {"retry_at": retry_at}


async def extend(call: Call) -> Any:
    queue = await call.queue()
    await queue.extend(
        call.args["receipt"], call.args["seconds"], revive=call.args.get("revive", False)
    )
    return {}


async def release(call: Call) -> Any:
    await (await call.queue()).release(call.args["receipts"])
    return {}


async def status(call: Call) -> Any:
    found = await (await call.queue()).status(call.args["id"])
    return {"id": call.args["id"], "status": found.value}


async def stats(call: Call) -> Any:
    return await (await call.queue()).stats()


async def peek(call: Call) -> Any:
    return {"messages": await (await call.queue()).peek(**call.args)}


async def dead_letters(call: Call) -> Any:
    return {"messages": await (await call.queue()).dead_letters(**call.args)}


async def redrive(call: Call) -> Any:
    return {"moved": await (await call.queue()).redrive(**call.args)}


async def discard(call: Call) -> Any:
    return {"removed": await (await call.queue()).discard(call.args["ids"])}


async def configure(call: Call) -> Any:
    settings = call.args.get("settings") or {}
    if not isinstance(settings, dict):
        raise InvalidArgument("settings must be a map of setting names to values")
    return {"settings": await (await call.queue(create=True)).configure(**settings)}


async def cleanup(call: Call) -> Any:
    return {"removed": await (await call.queue()).cleanup()}


async def purge(call: Call) -> Any:
    return {"removed": await (await call.queue()).purge()}


async def compact(call: Call) -> Any:
    return await (await call.queue()).compact()


Q = "/queues/{name}"
ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        "GET",
        "/queues",
        "listQueues",
        "The queues this broker has open (those the caller may read)",
        list_queues,
        (),
        obj(queues=STRS),
    ),
    Endpoint(
        "GET",
        "/cluster",
        "cluster",
        "This broker's URL and those of the brokers of its cluster (itself and its peers): "
        "a client given one broker turns to the others when it cannot answer",
        cluster,
        (),
        obj(broker=STR_OR_NULL, brokers=STRS),
    ),
    Endpoint(
        "POST",
        f"{Q}/enqueue",
        "enqueue",
        "Add one message; its id once durable",
        enqueue,
        (
            NAME,
            body("payload", PAYLOAD, True),
            body("priority", INT, doc="0..255, higher first"),
            body("delay", NUM, doc="seconds before it is visible"),
            body("dedup_id", STR_OR_NULL),
            body("group", STR_OR_NULL),
            body("attributes", {"type": ["object", "null"], "additionalProperties": STR}),
            body("durability", DURABILITY, doc=DURABILITY_DOC),
            body("tenant", STR_OR_NULL, doc=TENANT_DOC),
        ),
        obj(id=STR),
    ),
    Endpoint(
        "POST",
        f"{Q}/enqueue-batch",
        "enqueueBatch",
        "Add many messages in one commit",
        enqueue_batch,
        (
            NAME,
            body("items", {"type": "array", "items": ITEM}, True),
            body("durability", DURABILITY, doc=DURABILITY_DOC),
        ),
        obj(ids=STRS),
    ),
    Endpoint(
        "POST",
        f"{Q}/enqueue-staged",
        "enqueueStaged",
        "Commit staged payload objects (bulk loads) in one log object, all or none",
        enqueue_staged,
        (
            NAME,
            body("objects", {"type": "array", "items": {"type": "object"}}, True),
            body("token", STR_OR_NULL),
        ),
        obj(ids={"type": ["array", "null"], "items": STR}),
    ),
    Endpoint(
        "POST",
        f"{Q}/dequeue",
        "dequeue",
        "Lease up to max_messages; long-polls up to wait s",
        dequeue,
        (
            NAME,
            body("max_messages", INT),
            body("visibility_timeout", {"type": ["number", "null"]}),
            body("wait", NUM, doc="seconds to wait for the first message"),
            body("per_group", INT, doc="a group's messages delivered together, in order (1-10)"),
            body("complete", STRS, doc="receipts to acknowledge first, in the same commit"),
            body(
                "pages",
                BOOL,
                doc=(
                    "answer stretches of consecutive messages as pages (s3q.wire.pages), "
                    "not one by one"
                ),
            ),
        ),
        PAGED,
    ),
    Endpoint(
        "POST",
        f"{Q}/complete",
        "complete",
        "Acknowledge delivered messages (all or none)",
        complete,
        (NAME, body("receipts", STRS, True)),
        EMPTY,
    ),
    Endpoint(
        "POST",
        f"{Q}/fail",
        "fail",
        "Give a message back: retried with backoff, or dead",
        fail,
        (NAME, body("receipt", STR, True), body("error", STR_OR_NULL)),
        obj(
            retry_at={
                "type": ["number", "null"],
                "description": "unix time of the retry; null: dead",
            }
        ),
    ),
    Endpoint(
        "POST",
        f"{Q}/extend",
        "extend",
        "Make a lease end `seconds` from now",
        extend,
        (
            NAME,
            body("receipt", STR, True),
            body("seconds", NUM, True),
            body(
                "revive",
                {"type": "boolean"},
                doc="also a lease that has run out, if nobody was delivered the message since",
            ),
        ),
        EMPTY,
    ),
    Endpoint(
        "POST",
        f"{Q}/release",
        "release",
        "Give messages back unprocessed, uncounted",
        release,
        (NAME, body("receipts", STRS, True)),
        EMPTY,
    ),
    Endpoint(
        "GET",
        f"{Q}/messages/{{id}}/status",
        "status",
        "Where a message stands",
        status,
        (NAME, Param("id", "path", STR, True)),
        obj(
            id=STR,
            status={"enum": ["pending", "delayed", "processing", "retry", "completed", "dead"]},
        ),
    ),
    Endpoint(
        "GET",
        f"{Q}/stats",
        "stats",
        "Counts by status and commit figures",
        stats,
        (NAME,),
        ref("QueueStats"),
    ),
    Endpoint(
        "GET",
        f"{Q}/peek",
        "peek",
        "The next messages a dequeue would deliver",
        peek,
        (NAME, Param("limit", "query", INT)),
        MESSAGES,
    ),
    Endpoint(
        "GET",
        f"{Q}/dead-letters",
        "deadLetters",
        "Dead messages, oldest first",
        dead_letters,
        (NAME, Param("limit", "query", INT)),
        MESSAGES,
    ),
    Endpoint(
        "POST",
        f"{Q}/redrive",
        "redrive",
        "Dead messages (all, or those named) back to pending",
        redrive,
        (NAME, body("ids", {"type": ["array", "null"], "items": STR})),
        obj(moved=INT),
    ),
    Endpoint(
        "POST",
        f"{Q}/discard",
        "discard",
        "Remove dead letters for good",
        discard,
        (NAME, body("ids", STRS, True)),
        obj(removed=INT),
    ),
    Endpoint(
        "POST",
        f"{Q}/configure",
        "configure",
        "Change saved queue settings; the settings in force",
        configure,
        (NAME, body("settings", {"type": "object"}, doc="max_attempts, attributes, …")),
        obj(settings={"type": "object"}),
    ),
    Endpoint(
        "POST",
        f"{Q}/cleanup",
        "cleanup",
        "Forget completed messages past their retention",
        cleanup,
        (NAME,),
        obj(removed=INT),
    ),
    Endpoint(
        "POST",
        f"{Q}/purge",
        "purge",
        "Remove every message not completed",
        purge,
        (NAME,),
        obj(removed=INT),
    ),
    Endpoint(
        "POST",
        f"{Q}/compact",
        "compact",
        "Checkpoint and collect garbage now",
        compact,
        (NAME,),
        ref("CompactionReport"),
    ),
)
