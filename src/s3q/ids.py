"""Message ids: each names where its message was enqueued, so finding a message needs no map
of every id.

An id is the log object that enqueued the message and the message's place among those that
object enqueued, as 20 hexadecimal digits (12 for the sequence number, 8 for the place): ids
sort in enqueue order. Users treat ids as opaque strings. Queues written before ids named
places (format 1) hold 32-digit ids of another shape, which name nothing.
"""

from __future__ import annotations

SEQ_DIGITS, PLACE_DIGITS = 12, 8
LENGTH = SEQ_DIGITS + PLACE_DIGITS
_HEX = frozenset("0123456789abcdef")


def make(seq: int, place: int) -> str:
    """The id of the ``place``-th message (from 0) enqueued by log object ``seq``."""
    return f"{seq:012x}{place:08x}"


def where(mid: str) -> tuple[int, int] | None:
    """The log object and place an id names, or None for an id that names none (an older
    format's id, or not an id at all)."""
    if len(mid) != LENGTH or not _HEX.issuperset(mid):
        return None
    return int(mid[:SEQ_DIGITS], 16), int(mid[SEQ_DIGITS:], 16)
