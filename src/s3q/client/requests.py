"""The requests of a queue's methods, made once for the blocking and the async queue: each
method's arguments checked and put in the body of a :class:`~.calls.Call` of the native API."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

import msgspec

from .. import validate
from ..config import Setting
from ..errors import InvalidArgument, MessageNotFound
from ..log.staging import StagedObject
from ..message import CompactionReport, Message, MessageStatus, QueueStats
from ..surface import Target
from ..wire import pages
from ..wire.codec import API_PREFIX, check_name
from .calls import Call

WAIT_MARGIN = 10.0  # seconds added to a long poll's wait for the answer to arrive


class _Messages(msgspec.Struct):
    messages: list[Message]


class _Id(msgspec.Struct):
    id: str


class _Ids(msgspec.Struct):
    ids: list[str]


class _MaybeIds(msgspec.Struct):
    ids: list[str] | None


class _Status(msgspec.Struct):
    status: MessageStatus


class _Moved(msgspec.Struct):
    moved: int


class _Removed(msgspec.Struct):
    removed: int


class _Settings(msgspec.Struct):
    settings: dict[str, Setting]


class _Queues(msgspec.Struct):
    queues: list[str]


class _Empty(msgspec.Struct):
    pass


class _RetryAt(msgspec.Struct):
    retry_at: float | None = None


def list_queues() -> Call[list[str]]:
    """The request of the names of the queues a broker has open."""
    return Call("GET", f"{API_PREFIX}/queues", _Queues, lambda a: a.queues)


class _Cluster(msgspec.Struct):
    brokers: list[str]


def cluster() -> Call[list[str]]:
    """The request of the URLs of a broker's cluster (itself and its peers)."""
    return Call("GET", f"{API_PREFIX}/cluster", _Cluster, lambda a: a.brokers)


def queue_path(name: str) -> str:
    """Where queue ``name``'s calls go (below the broker's URL)."""
    return f"{API_PREFIX}/queues/{name}"


def _durability(durability: str | None) -> dict[str, str]:
    """The ``durability`` of an enqueue's body: none for the queue's (as older brokers know)."""
    checked = validate.durability(durability)
    return {} if checked is None else {"durability": checked}


class QueueRequests:
    """The requests of one queue's methods; shared by the blocking and the async queue."""

    def __init__(self, name: str) -> None:
        self.name = check_name(name)
        self.base = queue_path(self.name)
        #: dequeues ask for pages (``s3q.wire.pages``) until a broker from before them refuses one
        self.paged = True

    def enqueue(
        self,
        payload: bytes,
        priority: int,
        delay: float,
        dedup_id: str | None,
        group: str | None,
        attributes: dict[str, str] | None,
        durability: str | None = None,
        tenant: str | None = None,
    ) -> Call[str]:
        body: dict[str, Any] = {
            "payload": payload,
            "priority": priority,
            "delay": delay,
            "dedup_id": dedup_id,
            "group": group,
            "attributes": attributes,
            **_durability(durability),
        }
        if tenant is not None:  # only when given: a broker before tenants refuses no request
            body["tenant"] = tenant
        return Call("POST", f"{self.base}/enqueue", _Id, lambda a: a.id, body)

    def enqueue_batch(
        self, items: Iterable[bytes | dict[str, Any]], durability: str | None = None
    ) -> Call[list[str]]:
        if isinstance(items, bytes | str | dict):
            raise InvalidArgument("enqueue_batch takes a list of payloads or dicts")
        body = {"items": list(items), **_durability(durability)}
        return Call("POST", f"{self.base}/enqueue-batch", _Ids, lambda a: a.ids, body)

    def enqueue_staged(
        self, objects: Iterable[StagedObject], token: str | None
    ) -> Call[list[str] | None]:
        body = {"objects": list(objects), "token": token}
        return Call("POST", f"{self.base}/enqueue-staged", _MaybeIds, lambda a: a.ids, body)

    def dequeue(
        self,
        max_messages: int,
        visibility_timeout: float | None,
        wait: float,
        per_group: int,
        complete: Iterable[Target] = (),
    ) -> Call[list[Message]]:
        body: dict[str, Any] = {"max_messages": max_messages, "wait": wait}
        if visibility_timeout is not None:
            body["visibility_timeout"] = visibility_timeout
        if per_group != 1:  # only when asked: a broker before it refuses no request
            body["per_group"] = per_group
        receipts = [validate.receipt_of(t) for t in complete]
        if receipts:  # (as per_group)
            body["complete"] = receipts
        if self.paged:
            body["pages"] = True
        extra = wait + WAIT_MARGIN if isinstance(wait, int | float) else 0.0
        return Call(
            "POST",
            f"{self.base}/dequeue",
            pages.Pages,
            pages.merged,
            body,
            extra_timeout=max(0.0, extra),
        )

    def dequeue_pages(
        self,
        max_messages: int,
        visibility_timeout: float | None,
        wait: float,
        per_group: int,
        complete: Iterable[Target] = (),
    ) -> Call[pages.Pages]:
        """``dequeue``, its answer as it came: pages and messages (``s3q.wire.pages``)."""
        call = self.dequeue(max_messages, visibility_timeout, wait, per_group, complete)
        return Call(
            call.method, call.path, pages.Pages, None, call.body, call.params, call.extra_timeout
        )

    def complete(self, targets: Iterable[Target]) -> Call[None]:
        receipts = [validate.receipt_of(t) for t in targets]
        return Call("POST", f"{self.base}/complete", _Empty, lambda a: None, {"receipts": receipts})

    def fail(self, target: Target, error: str | None) -> Call[float | None]:
        body = {"receipt": validate.receipt_of(target), "error": error}
        return Call("POST", f"{self.base}/fail", _RetryAt, lambda a: a.retry_at, body)

    def release(self, targets: Target | Iterable[Target]) -> Call[None]:
        items = [targets] if isinstance(targets, Message | str) else list(targets)
        body = {"receipts": [validate.receipt_of(t) for t in items]}
        return Call("POST", f"{self.base}/release", _Empty, lambda a: None, body)

    def extend(self, target: Target, seconds: float, revive: bool) -> Call[None]:
        body: dict[str, Any] = {"receipt": validate.receipt_of(target), "seconds": seconds}
        if validate.flag("revive", revive):
            body["revive"] = True  # only when asked: a broker before it refuses no request
        return Call("POST", f"{self.base}/extend", _Empty, lambda a: None, body)

    def status(self, id: str) -> Call[MessageStatus]:
        if not isinstance(id, str):
            raise InvalidArgument(f"id must be a string, got {type(id).__name__}")
        if not id:
            raise MessageNotFound("message '' not found")
        path = f"{self.base}/messages/{quote(id, safe='')}/status"
        return Call("GET", path, _Status, lambda a: a.status)

    def stats(self) -> Call[QueueStats]:
        return Call("GET", f"{self.base}/stats", QueueStats)

    def peek(self, limit: int) -> Call[list[Message]]:
        validate.count("limit", limit, 1, 10**9)
        return Call(
            "GET", f"{self.base}/peek", _Messages, lambda a: a.messages, None, {"limit": limit}
        )

    def dead_letters(self, limit: int) -> Call[list[Message]]:
        validate.count("limit", limit, 1, 10**9)
        return Call(
            "GET",
            f"{self.base}/dead-letters",
            _Messages,
            lambda a: a.messages,
            None,
            {"limit": limit},
        )

    def redrive(self, ids: Iterable[str] | None) -> Call[int]:
        if isinstance(ids, str):
            raise InvalidArgument("redrive takes a list of ids, not a single string")
        body = {"ids": None if ids is None else list(ids)}
        return Call("POST", f"{self.base}/redrive", _Moved, lambda a: a.moved, body)

    def discard(self, ids: Iterable[str]) -> Call[int]:
        if isinstance(ids, str):
            raise InvalidArgument("discard takes a list of ids, not a single string")
        body = {"ids": list(ids)}
        return Call("POST", f"{self.base}/discard", _Removed, lambda a: a.removed, body)

    def configure(self, settings: dict[str, Any]) -> Call[dict[str, Setting]]:
        body = {"settings": settings}
        return Call("POST", f"{self.base}/configure", _Settings, lambda a: a.settings, body)

    def cleanup(self) -> Call[int]:
        return Call("POST", f"{self.base}/cleanup", _Removed, lambda a: a.removed, {})

    def purge(self) -> Call[int]:
        return Call("POST", f"{self.base}/purge", _Removed, lambda a: a.removed, {})

    def compact(self) -> Call[CompactionReport]:
        return Call("POST", f"{self.base}/compact", CompactionReport, None, {})
