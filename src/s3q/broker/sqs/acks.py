"""What SQS does with a receipt handle of one message: DeleteMessage and
ChangeMessageVisibility, whose rules differ on standard and FIFO queues (the batch actions
run them on each entry)."""

from __future__ import annotations

import time

from ...config import MAX_VISIBILITY
from ...errors import MessageNotFound, ReceiptExpired
from ...message import MessageStatus
from ...surface import AsyncQueueSurface
from . import handles, queues
from .protocol import SqsError, invalid, within


async def delete(queue: AsyncQueueSurface, fifo: bool, handle: str, mid: str, receipt: str) -> None:
    """Delete as SQS does. A standard queue takes the handle of an earlier receive and
    answers as if it deleted (the message, received again since, is another consumer's:
    it is left alone, as Amazon documents that such a delete may not delete). A FIFO queue
    refuses a handle whose visibility timeout has run out."""
    if fifo:
        status = await _status(queue, mid)
        if status is MessageStatus.COMPLETED:
            return  # deleted already: a retry
        if status is not MessageStatus.PROCESSING:
            raise _expired(handle)
    try:
        await queue.complete(receipt)
    except ReceiptExpired:
        if fifo and await _status(queue, mid) is not MessageStatus.COMPLETED:
            raise _expired(handle) from None


async def change_visibility(name: str, queue: AsyncQueueSurface, handle: str, seconds: int) -> None:
    """Change a message's visibility as SQS does. On a standard queue, a lease that ran
    out takes effect again if nobody received the message since, and the handle of an
    earlier receive of a message received again answers 200 and changes nothing (the lease
    is another consumer's). A lease may not reach past 12 hours from its receive."""
    within("VisibilityTimeout", seconds, 0, int(MAX_VISIBILITY), 0)
    mid, receipt, received_at = handles.decode(name, handle)
    fifo = queues.is_fifo(name)
    if received_at is not None and time.time() + seconds > received_at + MAX_VISIBILITY:
        raise invalid(
            f"Value {seconds} for parameter VisibilityTimeout is invalid. Reason: Total "
            f"VisibilityTimeout for the message is beyond the limit [{int(MAX_VISIBILITY)} "
            "seconds]."
        )
    try:
        await queue.extend(receipt, float(seconds), revive=not fifo)
    except ReceiptExpired:
        if not fifo and await _status(queue, mid) is MessageStatus.PROCESSING:
            return  # received again since: another consumer's lease, left alone (as SQS)
        raise SqsError(
            "MessageNotInflight",
            f"Value {handle} for parameter ReceiptHandle is invalid. Reason: Message does not "
            "exist or is not available for visibility timeout change.",
        ) from None


async def _status(queue: AsyncQueueSurface, mid: str) -> MessageStatus | None:
    try:
        return await queue.status(mid)
    except MessageNotFound:
        return None


def _expired(handle: str) -> SqsError:
    return invalid(
        f"Value {handle} for parameter ReceiptHandle is invalid. Reason: The receipt handle has "
        "expired."
    )
