"""kombu's messages as s3q messages, and back: the payload, the priority and the delay.

A kombu message (the dict a virtual channel hands its ``_put``: ``body``, ``content-type``,
``content-encoding``, ``headers``, ``properties``) travels as one JSON object, the payload of
one s3q message, its body kept as text when it is text (Celery's JSON) and in base64 only
when it is not. What s3q can do itself is taken out of it: the priority (kombu's
``properties.priority``: s3q's, higher first, 0 to 255) and the delay (Celery's ``eta``
header, which a ``countdown`` is sent as: the message is made visible then, instead of being
delivered at once and held by the worker until then). A message coming back gets its s3q
receipt as its kombu delivery tag, so an ack names its lease. No I/O here.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import hashlib
import re
import time
from typing import Any

import msgspec

__all__ = [
    "MAX_PRIORITY",
    "Outgoing",
    "decoded",
    "delay_of",
    "outgoing",
    "priority_of",
    "queue_name",
]

MAX_PRIORITY = 255  # s3q's priorities: 0 to 255, higher first (AMQP's order)
_NAME_LENGTH = 80  # s3q's longest queue name
_NOT_NAME = re.compile(r"[^A-Za-z0-9_-]")

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(dict[str, Any]).decode


class Outgoing(msgspec.Struct, frozen=True):
    """What an enqueue of one kombu message carries."""

    payload: bytes
    priority: int
    delay: float


def queue_name(name: str, prefix: str = "") -> str:
    """The s3q queue of kombu queue ``name``: ``prefix`` and the name, each character s3q does
    not take in a name (``A-Z a-z 0-9 _ -``) made ``-`` (``celery.pidbox`` is
    ``celery-pidbox``); a name longer than s3q's 80 characters is cut and ends with a hash of
    the whole, so two long names stay two queues."""
    full = _NOT_NAME.sub("-", prefix + name)
    if len(full) <= _NAME_LENGTH:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:16]
    return f"{full[: _NAME_LENGTH - 17]}-{digest}"


def priority_of(message: dict[str, Any]) -> int:
    """s3q's priority for a kombu message: its ``priority`` property within 0..255, higher
    first (as RabbitMQ's; not as kombu's Redis transport, where 0 comes first); 0 if none."""
    try:
        priority = int(message["properties"].get("priority") or 0)
    except (TypeError, ValueError, KeyError, AttributeError):
        return 0
    return max(0, min(priority, MAX_PRIORITY))


def delay_of(message: dict[str, Any], now: float | None = None) -> float:
    """Seconds until the message's ``eta`` (Celery's header for ``eta`` and ``countdown``,
    an ISO 8601 time; one without a zone is local time, as Python reads it); 0 if it has none,
    or it is past, or it cannot be read (Celery's worker then judges it, as on any broker)."""
    headers = message.get("headers") or {}
    eta = headers.get("eta") if isinstance(headers, dict) else None
    if not eta:
        return 0.0
    try:
        when = eta if isinstance(eta, datetime.datetime) else datetime.datetime.fromisoformat(eta)
        at = when.timestamp()
    except (TypeError, ValueError, OverflowError, OSError):
        return 0.0
    return max(0.0, at - (time.time() if now is None else now))


def outgoing(message: dict[str, Any], now: float | None = None) -> Outgoing:
    """The payload, priority and delay of an enqueue of kombu ``message``."""
    body = message.get("body")
    properties = message.setdefault("properties", {})
    if isinstance(body, bytes | bytearray | memoryview):
        raw = bytes(body)
        try:
            body = raw.decode()
            properties["body_encoding"] = None
        except UnicodeDecodeError:
            body = base64.b64encode(raw).decode()
            properties["body_encoding"] = "base64"
    message["body"] = body
    return Outgoing(_encode(message), priority_of(message), delay_of(message, now))


def decoded(payload: bytes, receipt: str, redelivered: bool) -> dict[str, Any]:
    """The kombu message an s3q message's payload holds, delivered with ``receipt`` as its
    delivery tag. ValueError if the payload is not one (an s3q message some other program
    enqueued)."""
    try:
        message = _decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"not a kombu message: {exc}") from None
    properties = message.get("properties")
    if not isinstance(properties, dict):
        raise ValueError("not a kombu message: no properties")
    if properties.get("body_encoding") == "base64":
        try:
            base64.b64decode(message.get("body") or "", validate=True)  # (as kombu will)
        except (binascii.Error, TypeError, ValueError) as exc:
            raise ValueError(f"not a kombu message: its base64 body: {exc}") from None
    properties["delivery_tag"] = receipt
    info = properties.get("delivery_info")
    if not isinstance(info, dict):
        info = properties["delivery_info"] = {}
    info["redelivered"] = redelivered
    return message
