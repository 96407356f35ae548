"""Checks of what callers pass in: each failure is a precise typed error, before any change."""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Mapping
from typing import Any

from .config import (
    BUFFERED,
    DURABLE,
    MAX_DELAY,
    MAX_SECONDS,
    MAX_VISIBILITY,
    MAX_WAIT,
    is_utf8,
)
from .errors import InvalidArgument, InvalidPriority, MessageTooLarge
from .log import staging
from .log.staging import StagedObject
from .message import Message

MAX_NAME = 128  # dedup ids, group and tenant names
MAX_ERROR = 8192  # characters of a failure's error text kept


class Item:
    """One message to enqueue, checked."""

    __slots__ = ("attributes", "dedup_id", "delay", "group", "payload", "priority", "tenant")

    def __init__(
        self,
        payload: bytes,
        priority: int,
        delay: float,
        dedup_id: str | None,
        group: str | None,
        attributes: dict[str, str] | None,
        tenant: str | None = None,
    ) -> None:
        self.payload = payload
        self.tenant = tenant
        self.priority = priority
        self.delay = delay
        self.dedup_id = dedup_id
        self.group = group
        self.attributes = attributes


def item(
    payload: object,
    priority: object = 0,
    delay: object = 0.0,
    dedup_id: object = None,
    group: object = None,
    attributes: object = None,
    tenant: object = None,
    *,
    max_size: int,
    max_delay: float = MAX_DELAY,
) -> Item:
    if isinstance(payload, bytes):
        data = payload
    elif isinstance(payload, bytearray | memoryview):
        data = bytes(payload)
    else:
        hint = " (encode it first, e.g. text.encode())" if isinstance(payload, str) else ""
        raise InvalidArgument(f"payload must be bytes, got {type(payload).__name__}{hint}")
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 255:
        raise InvalidPriority(f"priority must be an integer from 0 to 255, got {priority!r}")
    checked = attributes_of(attributes)
    size = len(data) + attributes_size(checked)
    if size > max_size:
        counted = " with its attributes" if checked else ""
        raise MessageTooLarge(
            f"payload of {size} bytes{counted} exceeds max_message_size ({max_size} bytes)"
        )
    return Item(
        data,
        priority,
        delay_of(delay, max_delay),
        name("dedup_id", dedup_id),
        name("group", group),
        checked,
        name("tenant", tenant),
    )


def attributes_size(attributes: Mapping[str, str] | None) -> int:
    """What a message's attributes count toward max_message_size: their names and values, in
    UTF-8 bytes."""
    if not attributes:
        return 0
    return sum(len(k.encode()) + len(v.encode()) for k, v in attributes.items())


def delay_of(value: object, max_delay: float) -> float:
    delay = seconds("delay", value)
    if delay > max_delay:
        raise InvalidArgument(
            f"delay must be at most the queue's max_delay ({max_delay:g} s), got {value!r}"
        )
    return delay


ITEM_KEYS = frozenset(("payload", "priority", "delay", "dedup_id", "group", "attributes", "tenant"))


def item_of(entry: object, max_size: int, max_delay: float = MAX_DELAY) -> Item:
    """An element of ``enqueue_batch``: a payload, or a mapping of ``enqueue``'s keywords."""
    if type(entry) is bytes and len(entry) <= max_size:  # the common case, checked cheaply
        return Item(entry, 0, 0.0, None, None, None)
    if isinstance(entry, Mapping):
        unknown = set(entry) - ITEM_KEYS
        if unknown:
            raise InvalidArgument(f"unknown key(s) in batch item: {', '.join(sorted(unknown))}")
        if "payload" not in entry:
            raise InvalidArgument("batch item has no 'payload'")
        return item(**entry, max_size=max_size, max_delay=max_delay)
    return item(entry, max_size=max_size, max_delay=max_delay)


def plain_payloads(entries: list[Any], max_size: int) -> bool:
    """Whether ``entries`` (of ``enqueue_batch``) are all payloads, of bytes within
    ``max_size``: checked at C speed, so a plain batch costs no object per message."""
    return (
        bool(entries) and set(map(type, entries)) == {bytes} and max(map(len, entries)) <= max_size
    )


def ids(value: object, what: str) -> list[str]:
    """A list of message ids given to ``what`` (a call's name)."""
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise InvalidArgument(f"{what} takes a list of ids, not a single string")
    checked = list(value)
    if not all(isinstance(i, str) for i in checked):
        raise InvalidArgument(f"{what} ids must be strings")
    return checked


def durability(value: object) -> str | None:
    """A call's ``durability``: None (the queue's setting), "durable" or "buffered"."""
    if value is None or (isinstance(value, str) and value in (DURABLE, BUFFERED)):
        return value
    raise InvalidArgument(f"durability must be {DURABLE!r}, {BUFFERED!r} or None, got {value!r}")


def flag(what: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{what} must be true or false, got {value!r}")
    return value


def seconds(what: str, value: object, high: float = MAX_SECONDS) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidArgument(f"{what} must be a finite number of seconds, got {value!r}")
    if not 0 <= value <= high:
        raise InvalidArgument(f"{what} must be from 0 to {high:g} seconds, got {value!r}")
    return float(value)


def wait(value: object) -> float:
    """A dequeue's long poll, at most MAX_WAIT seconds (as SQS's WaitTimeSeconds)."""
    return seconds("wait", value, MAX_WAIT)


def visibility(what: str, value: object) -> float:
    """A lease's length: more than 0, at most MAX_VISIBILITY (12 hours, as on SQS)."""
    return positive_seconds(what, value, MAX_VISIBILITY)


def name(what: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_NAME or not is_utf8(value):
        raise InvalidArgument(
            f"{what} must be a non-empty string of at most {MAX_NAME} characters of valid "
            f"Unicode, got {value!r}"
        )
    return value


def attributes_of(value: object) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"attributes must be a dict of str to str, got {value!r}")
    for k, v in value.items():
        if not isinstance(k, str) or not k or not isinstance(v, str):
            raise InvalidArgument(f"attributes must map non-empty str to str, got {k!r}: {v!r}")
        if not (is_utf8(k) and is_utf8(v)):
            raise InvalidArgument(f"attributes must be valid Unicode text, got {k!r}: {v!r}")
    return dict(value) if value else None


def error_text(error: object) -> str | None:
    if error is None:
        return None
    if not isinstance(error, str):
        raise InvalidArgument(f"error must be a string or None, got {type(error).__name__}")
    kept = error[:MAX_ERROR]
    # the log writes UTF-8: a lone surrogate (from a bad decode) is replaced, not refused
    return kept if is_utf8(kept) else kept.encode(errors="replace").decode()


def receipt_of(target: object) -> str:
    """The receipt of a delivered message, given the message or the receipt itself."""
    if isinstance(target, Message):
        if target.receipt is None:
            raise InvalidArgument(f"message {target.id} was not delivered by dequeue: no receipt")
        return target.receipt
    if isinstance(target, str) and target:
        return target
    raise InvalidArgument(f"expected a Message or a receipt string, got {target!r}")


def count(what: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgument(f"{what} must be an integer from {low} to {high}, got {value!r}")
    return value


def positive_seconds(what: str, value: Any, high: float = MAX_SECONDS) -> float:
    result = seconds(what, value, high)
    if result == 0:
        raise InvalidArgument(f"{what} must be > 0, got {value!r}")
    return result


def _places_fit(obj: StagedObject, max_size: int) -> bool:
    """Whether every row's payload lies inside ``obj`` and within ``max_size``."""
    offsets, sizes = obj.offsets, obj.sizes
    return (
        min(offsets) >= 0
        and min(sizes) >= 0
        and max(sizes) <= max_size
        and max(map(operator.add, offsets, sizes)) <= obj.size
    )


def staged(obj: StagedObject, max_size: int, max_delay: float = MAX_DELAY) -> None:
    """Check a staged object's description; errors name the offending row."""
    n = len(obj.offsets)
    if not obj.key.startswith(staging.PREFIX) or ".." in obj.key.split("/"):
        raise InvalidArgument(f"staged object key must start with {staging.PREFIX!r}: {obj.key!r}")
    for column in (
        "sizes",
        "priorities",
        "delays",
        "groups",
        "dedup_ids",
        "attributes",
        "tenants",
        "rows",
    ):
        values = getattr(obj, column)
        if values is not None and len(values) != n:
            raise InvalidArgument(
                f"staged object {obj.key}: {column} has {len(values)} entries, offsets {n}"
            )
    if n and not _places_fit(obj, max_size):  # checked at C speed; the loop names the row
        for i, (offset, size) in enumerate(zip(obj.offsets, obj.sizes, strict=True)):
            if size > max_size:
                raise MessageTooLarge(
                    f"{obj.row(i)}: payload of {size} bytes exceeds max_message_size "
                    f"({max_size} bytes)"
                )
            if offset < 0 or size < 0 or offset + size > obj.size:
                raise InvalidArgument(f"{obj.row(i)}: payload lies outside staged object {obj.key}")
    for i, priority in enumerate(obj.priorities or ()):
        if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 255:
            raise InvalidPriority(
                f"{obj.row(i)}: priority must be an integer from 0 to 255, got {priority!r}"
            )
    checks = (
        ("delays", lambda v: delay_of(v, max_delay)),
        ("groups", lambda v: name("group", v)),
        ("tenants", lambda v: name("tenant", v)),
        ("dedup_ids", lambda v: name("dedup_id", v)),
        ("attributes", attributes_of),
    )
    for column, check in checks:
        for i, value in enumerate(getattr(obj, column) or ()):
            try:
                check(value)
            except InvalidArgument as exc:
                raise type(exc)(f"{obj.row(i)}: {exc}") from None
    for i, attributes in enumerate(obj.attributes or ()):
        size = obj.sizes[i] + attributes_size(attributes)
        if size > max_size:
            raise MessageTooLarge(
                f"{obj.row(i)}: payload of {size} bytes with its attributes exceeds "
                f"max_message_size ({max_size} bytes)"
            )
