"""Receipt handles: an s3q receipt wrapped with its queue's name and its message's id.

The queue name lets a handle of another queue be refused; the id lets a repeated DeleteMessage
of a message already deleted succeed, as SQS's does (a retry after a lost answer).
"""

from __future__ import annotations

import base64
import binascii

import msgspec

from ...message import Message
from .protocol import SqsError


def _invalid(handle: str) -> SqsError:
    return SqsError("ReceiptHandleIsInvalid", f"The input receipt handle {handle!r} is not valid.")


def encode(queue: str, message: Message) -> str:
    assert message.receipt is not None
    data = msgspec.msgpack.encode((queue, message.id, message.receipt))
    return base64.urlsafe_b64encode(data).decode()


def decode(queue: str, handle: str) -> tuple[str, str]:
    """The message id and s3q receipt of a handle given to queue ``queue``;
    ReceiptHandleIsInvalid if it is malformed or belongs to another queue."""
    try:
        name, mid, receipt = msgspec.msgpack.decode(
            base64.urlsafe_b64decode(handle.encode()), type=tuple[str, str, str]
        )
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise _invalid(handle) from None
    if name != queue or not receipt:
        raise _invalid(handle)
    return mid, receipt
