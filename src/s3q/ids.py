"""Message ids: each names where its message was enqueued, so finding a message needs no map
of every id.

An id is the queue's own id (8 hexadecimal digits, chosen when the queue was created: see
``ops.Open``), then the log object that enqueued the message and the message's place among
those that object enqueued (12 and 8 digits): 28 digits, which sort in enqueue order within a
queue. Users treat ids as opaque strings. Queues written before ids named places (format 1)
hold 32-digit ids of another shape, which name nothing.
"""

from __future__ import annotations

import secrets

QUEUE_DIGITS, SEQ_DIGITS, PLACE_DIGITS = 8, 12, 8
LENGTH = QUEUE_DIGITS + SEQ_DIGITS + PLACE_DIGITS
_HEX = frozenset("0123456789abcdef")


def new_queue() -> str:
    """A fresh queue id."""
    return secrets.token_hex(QUEUE_DIGITS // 2)


def make(queue: str, seq: int, place: int) -> str:
    """The id of the ``place``-th message (from 0) enqueued by log object ``seq`` of
    ``queue``."""
    return f"{queue}{seq:012x}{place:08x}"


def make_many(queue: str, seq: int, first: int, count: int) -> list[str]:
    """The ids of ``count`` messages from place ``first`` of log object ``seq``."""
    return list(map(f"{queue}{seq:012x}%08x".__mod__, range(first, first + count)))


def split(mid: str) -> tuple[int, int]:
    """The log object and place an id made by ``make`` names (unchecked: see ``where``)."""
    return int(mid[QUEUE_DIGITS : QUEUE_DIGITS + SEQ_DIGITS], 16), int(mid[-PLACE_DIGITS:], 16)


def where(mid: str, queue: str) -> tuple[int, int] | None:
    """The log object and place of ``queue`` an id names, or None for an id that names none
    there (another queue's, an older format's, or not an id at all)."""
    if len(mid) != LENGTH or not mid.startswith(queue) or not _HEX.issuperset(mid):
        return None
    return split(mid)
