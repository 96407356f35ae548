"""Receipt handles: an s3q receipt wrapped with its queue's name, its message's id and the
time of the receive.

The queue name lets a handle of another queue be refused; the id lets a repeated DeleteMessage
of a message already deleted succeed, as SQS's does (a retry after a lost answer); the time
bounds ChangeMessageVisibility to 12 hours from the receive, as on SQS.
"""

from __future__ import annotations

import base64
import binascii
from typing import NamedTuple

import msgspec

from ...message import Message
from .protocol import SqsError


def _invalid(handle: str) -> SqsError:
    return SqsError(
        "ReceiptHandleIsInvalid",
        f'The input receipt handle "{handle}" is not a valid receipt handle.',
    )


class Handle(NamedTuple):
    """What a receipt handle holds besides its queue's name."""

    mid: str
    receipt: str
    received_at: float | None  # None: a handle of a build that did not record it


def encode(queue: str, message: Message, received_at: float) -> str:
    assert message.receipt is not None
    data = msgspec.msgpack.encode((queue, message.id, message.receipt, received_at))
    return base64.urlsafe_b64encode(data).decode()


def decode(queue: str, handle: str) -> Handle:
    """What a handle given to queue ``queue`` holds; ReceiptHandleIsInvalid if it is
    malformed or belongs to another queue."""
    try:
        data = base64.urlsafe_b64decode(handle.encode())
        try:
            name, mid, receipt, at = msgspec.msgpack.decode(data, type=tuple[str, str, str, float])
            received_at: float | None = at
        except msgspec.ValidationError:  # a handle of a build that did not record the time
            name, mid, receipt = msgspec.msgpack.decode(data, type=tuple[str, str, str])
            received_at = None
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise _invalid(handle) from None
    if name != queue or not receipt:
        raise _invalid(handle)
    return Handle(mid, receipt, received_at)
