"""Run tables read back from the log.

The index keeps, for untouched messages beyond its table budget (``state.TABLE_BUDGET``) or
restored from a checkpoint, only where their run lies (``records.Run``); the rest of the run's
table (each member's size, payload offset, dedup id and attributes) stays in the Append that
enqueued them, inside log object ``seq``. This module reads those Appends back from the end of
a log object (its header, without the payloads) when the runs are about to be needed.
"""

from __future__ import annotations

from ..store import NotFound, Store
from . import segment
from .ops import Append

#: bytes read from the end of a log object first: its header, most often, in one request
TAIL_GUESS = 64 * 1024
#: log objects being read at once
CONCURRENCY = 32


class TableMissing(NotFound):
    """The log object holding untouched messages' table is gone."""


async def tail(store: Store, seq: int) -> bytes:
    """The end of log object ``seq`` that holds its header, at least (NotFound if it is gone):
    one ranged GET, two when the header is longer than ``TAIL_GUESS``."""
    key = segment.key(seq)
    found = await store.get_tail(key, TAIL_GUESS)
    need = segment.sealed_size(found, key)
    if need > len(found):
        found = await store.get_tail(key, need)
    return found


async def header(store: Store, seq: int) -> segment.Header:
    """The header of log object ``seq``, read from its end (NotFound if it is gone)."""
    return segment.decode(await tail(store, seq), segment.key(seq))


async def appends(store: Store, seq: int) -> list[Append]:
    """The Appends of log object ``seq``, read from its end."""
    try:
        found = await header(store, seq)
    except NotFound:
        raise TableMissing(f"log object {segment.key(seq)} of {store.url} is gone") from None
    return [op for op in found.ops if isinstance(op, Append)]
