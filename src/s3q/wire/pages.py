"""Leased stretches answered as pages: a broker's dequeue answer without an object per message.

A stretch (``s3q.index.stretches``) is consecutive members of a run, whose payloads lie side by side
in one object. A :class:`Page` carries the stretch as it is: where its members were enqueued
(their ids follow from it), its token (their receipts follow from it), what they share, their
sizes and their payloads as one block of bytes. The broker encodes a page by copying that block;
the client turns it into the same messages a dequeue would have answered (:func:`messages`),
the same ids, payloads, receipts and fields, in the same order (:func:`merged`).
"""

from __future__ import annotations

import sys
from array import array
from itertools import accumulate, pairwise, repeat
from typing import cast

import msgspec

from ..index.stretches import Stretch
from ..log import ids
from ..message import Message


class Page(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """The members of one leased stretch, as a dequeue answers them."""

    at: int  # where the first member goes among the answer's messages
    queue: str
    seq: int
    place: int
    count: int
    token: str
    priority: int
    enqueued_at: float
    first_delivered_at: float | None
    tenant: str | None
    sizes: bytes  # uint32 little-endian, one per member
    payloads: bytes  # the members' payloads, first to last, back to back
    dedup_ids: list[str | None] | None = None
    attributes: list[dict[str, str] | None] | None = None


class Pages(msgspec.Struct, frozen=True, gc=False):
    """A dequeue's answer: messages one by one, and pages of stretches among them."""

    messages: list[Message]
    pages: list[Page] = []


def page(stretch: Stretch, block: bytes | memoryview, at: int) -> Page:
    """``stretch`` (every member still leased in it) with its payloads ``block``, going at
    ``at``."""
    sizes = stretch.sizes()
    if sys.byteorder == "big":
        sizes = array("I", sizes)
        sizes.byteswap()
    return Page(
        at,
        stretch.queue,
        stretch.seq,
        stretch.place,
        stretch.count,
        stretch.token,
        stretch.priority,
        stretch.enqueued_at,
        stretch.at or None,
        stretch.tenant,
        sizes.tobytes(),
        cast(bytes, block),  # (a view of the cached object: encoded without a copy first)
        stretch.dedup_ids(),
        stretch.attributes(),
    )


def messages(page: Page) -> list[Message]:
    """The messages ``page`` stands for, first to last."""
    sizes: array[int] = array("I")
    sizes.frombytes(page.sizes)
    if sys.byteorder == "big":
        sizes.byteswap()
    if len(sizes) != page.count or sum(sizes) != len(page.payloads):
        raise ValueError(f"a page of {page.count} messages that does not add up")
    block, token = page.payloads, ids.RECEIPT_MARK + page.token
    if type(block) is not bytes:  # (a page made in this process holds a view of the cache)
        block = bytes(block)
    mids = ids.make_many(page.queue, page.seq, page.place, page.count)
    return members(
        mids,
        [mid + token for mid in mids],
        [block[a:b] for a, b in pairwise(accumulate(sizes, initial=0))],
        page.dedup_ids,
        page.attributes,
        (page.priority, page.enqueued_at, page.first_delivered_at, page.tenant),
    )


def members(
    mids: list[str],
    receipts: list[str],
    payloads: list[bytes],
    dedup_ids: list[str | None] | None,
    attributes: list[dict[str, str] | None] | None,
    shared: tuple[int, float, float | None, str | None],
    held: bytearray | None = None,
) -> list[Message]:
    """The messages of consecutive members of a run, leased together for the first time:
    ``shared`` is their priority, enqueue time, first delivery and tenant; ``held`` (if given)
    which of them to answer (1: still leased)."""
    priority, at, first, tenant = shared
    none = repeat(None)
    return [
        Message(  # (positional: the fields in Message's order, cheaper than keywords)
            mid,
            payload,
            priority,
            1,
            at,
            receipt,
            None,
            dedup,
            dict(attrs) if attrs else {},
            None,
            first,
            tenant,
        )
        for mid, receipt, payload, dedup, attrs, keep in zip(
            mids,
            receipts,
            payloads,
            dedup_ids or none,
            attributes or none,
            repeat(1) if held is None else held,
            strict=False,
        )
        if keep
    ]


def moved(page: Page, by: int) -> Page:
    """``page`` going ``by`` places later in an answer (answers joined one after another)."""
    return msgspec.structs.replace(page, at=page.at + by)


def merged(answer: Pages) -> list[Message]:
    """The messages of a dequeue's answer in the order the queue delivered them."""
    if not answer.pages:
        return answer.messages
    out: list[Message] = []
    singles = iter(answer.messages)
    for page in answer.pages:
        while len(out) < page.at:
            out.append(next(singles))
        out += messages(page)
    out.extend(singles)
    return out


def receipts(answer: Pages) -> list[str]:
    """The receipts of a dequeue's answer, without a message made per member of a page."""
    out = [msg.receipt for msg in answer.messages if msg.receipt is not None]
    for page in answer.pages:
        token = ids.RECEIPT_MARK + page.token
        out += [mid + token for mid in ids.make_many(page.queue, page.seq, page.place, page.count)]
    return out
