"""Message ids: each names where its message was enqueued, so finding a message needs no map
of every id.

An id is the queue's own id (8 hexadecimal digits, chosen when the queue was created: see
``ops.Open``), then the log object that enqueued the message and the message's place among
those that object enqueued (12 and 8 digits): 28 digits, which sort in enqueue order within a
queue. Users treat ids as opaque strings. Queues written before ids named places (format 1)
hold 32-digit ids of another shape, which name nothing.

A receipt (what a dequeue hands out with each message) is ``<message id>~<lease token>``:
:func:`receipt` makes one, :func:`split_receipt` reads one back.
"""

from __future__ import annotations

import secrets
from array import array
from collections.abc import Iterator, Sequence
from typing import overload

QUEUE_DIGITS, SEQ_DIGITS, PLACE_DIGITS = 8, 12, 8
LENGTH = QUEUE_DIGITS + SEQ_DIGITS + PLACE_DIGITS
_HEX = frozenset("0123456789abcdef")
#: between a receipt's message id and its lease token
RECEIPT_MARK = "~"


def new_queue() -> str:
    """A fresh queue id."""
    return secrets.token_hex(QUEUE_DIGITS // 2)


def make(queue: str, seq: int, place: int) -> str:
    """The id of the ``place``-th message (from 0) enqueued by log object ``seq`` of
    ``queue``."""
    return f"{queue}{seq:012x}{place:08x}"


def make_many(queue: str, seq: int, first: int, count: int) -> list[str]:
    """The ids of ``count`` messages from place ``first`` of log object ``seq``."""
    return list(Ids(queue, seq, range(first, first + count)))


class Ids(Sequence[str]):
    """The ids of messages one log object enqueued, by their places in it: a sequence that
    holds 8 bytes per message (none for a stretch of places) and makes each id when asked, so a
    bulk commit of millions of messages does not answer with millions of strings at once."""

    __slots__ = ("_format", "_places")

    def __init__(self, queue: str, seq: int, places: range | array[int]) -> None:
        self._format = f"{queue}{seq:012x}%08x"
        self._places = places

    def __len__(self) -> int:
        return len(self._places)

    def span(self) -> tuple[str, range] | None:
        """What every id here begins with and the range of places that ends them (the last
        ``PLACE_DIGITS`` hexadecimal digits), for ids of consecutive places; else None."""
        places = self._places
        if isinstance(places, range) and places.step == 1:
            return self._format.removesuffix("%08x"), places
        return None

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return list(map(self._format.__mod__, self._places[index]))
        return self._format % self._places[index]

    def __iter__(self) -> Iterator[str]:
        return map(self._format.__mod__, self._places)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Ids):
            return self._format == other._format and self._places == other._places
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(self) == len(other) and all(map(str.__eq__, self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which are not hashable

    def __repr__(self) -> str:
        shown = ", ".join(map(repr, self[:3])) + (", ..." if len(self) > 3 else "")
        return f"Ids([{shown}], {len(self)} ids)"


def split(mid: str) -> tuple[int, int]:
    """The log object and place an id made by ``make`` names (unchecked: see ``where``)."""
    return int(mid[QUEUE_DIGITS : QUEUE_DIGITS + SEQ_DIGITS], 16), int(mid[-PLACE_DIGITS:], 16)


def enqueued_by(mid: str) -> int:
    """The log object that enqueued message ``mid``; 0 for an id of format 1, which names
    none (such messages were enqueued before any id named a log object)."""
    if len(mid) != LENGTH or not _HEX.issuperset(mid):
        return 0
    return split(mid)[0]


def where(mid: str, queue: str) -> tuple[int, int] | None:
    """The log object and place of ``queue`` an id names, or None for an id that names none
    there (another queue's, an older format's, or not an id at all)."""
    if len(mid) != LENGTH or not mid.startswith(queue) or not _HEX.issuperset(mid):
        return None
    return split(mid)


def receipt(mid: str, token: str) -> str:
    """The receipt of message ``mid`` under the lease ``token``."""
    return mid + RECEIPT_MARK + token


def split_receipt(receipt: str) -> tuple[str, str]:
    """A receipt's message id and lease token (the token empty if it names none)."""
    mid, _, token = receipt.partition(RECEIPT_MARK)
    return mid, token
