"""Messages located in storage, planned into input partitions and read into Arrow batches.

The driver knows, for every message it hands to Spark, where its payload lies (an object key,
an offset, a size). It groups messages by object into *pieces* sorted by offset, and pieces into
partitions. An executor reads each piece with one ranged GET and turns it into a
``pyarrow.RecordBatch`` — the payload column straight from the bytes read when the payloads lie
back to back, as they do in log and staged objects.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from ..snapshot import Location, read_spans
from ..store import Store

PIECE_BYTES = 32 * 1024 * 1024  # payload bytes read by one GET, at most (one object or range)
PARTITION_BYTES = 64 * 1024 * 1024  # payload bytes of one input partition, about
PARTITION_ROWS = 200_000
READ_CONCURRENCY = 8

#: The columns of a read, in Spark's DDL.
SCHEMA = (
    "id string, payload binary, priority int, status string, attempts int, "
    "enqueued_at timestamp, `group` string, dedup_id string, attributes map<string,string>, "
    "last_error string"
)
ARROW_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("payload", pa.binary()),
        ("priority", pa.int32()),
        ("status", pa.string()),
        ("attempts", pa.int32()),
        ("enqueued_at", pa.timestamp("us", tz="UTC")),
        ("group", pa.string()),
        ("dedup_id", pa.string()),
        ("attributes", pa.map_(pa.string(), pa.string())),
        ("last_error", pa.string()),
    ]
)

# (id, priority, status, attempts, enqueued_at, group, dedup_id, attributes, last_error)
Row = tuple[str, int, str, int, float, str | None, str | None, dict[str, str] | None, str | None]


class Piece(msgspec.Struct, array_like=True):
    """Messages whose payloads lie in one object, by offset: read with one ranged GET."""

    key: str
    offsets: list[int]
    sizes: list[int]
    rows: list[Row]

    @property
    def nbytes(self) -> int:
        return sum(self.sizes)


def plan(located: Iterable[tuple[Location, Row]]) -> list[list[Piece]]:
    """Pieces (per object, split in ranges of at most PIECE_BYTES) packed into partitions."""
    by_key: dict[str, list[tuple[Location, Row]]] = {}
    for place, row in located:
        by_key.setdefault(place.key, []).append((place, row))
    pieces: list[Piece] = []
    for key in sorted(by_key):
        entries = sorted(by_key[key], key=lambda e: e[0].offset)
        piece = Piece(key, [], [], [])
        size = 0
        for place, row in entries:
            if piece.rows and (
                size + place.size > PIECE_BYTES or len(piece.rows) >= PARTITION_ROWS
            ):
                pieces.append(piece)
                piece, size = Piece(key, [], [], []), 0
            piece.offsets.append(place.offset)
            piece.sizes.append(place.size)
            piece.rows.append(row)
            size += place.size
        pieces.append(piece)
    partitions: list[list[Piece]] = []
    current: list[Piece] = []
    size = rows = 0
    for piece in pieces:
        if current and (size >= PARTITION_BYTES or rows >= PARTITION_ROWS):
            partitions.append(current)
            current, size, rows = [], 0, 0
        current.append(piece)
        size += piece.nbytes
        rows += len(piece.rows)
    if current:
        partitions.append(current)
    return partitions


def read(store: Store, pieces: list[Piece]) -> Iterator[pa.RecordBatch]:
    """The record batches of ``pieces``, read from ``store`` a few GETs at a time."""
    fetched = asyncio.run(_fetch(store, pieces))
    for piece, (data, base) in zip(pieces, fetched, strict=True):
        yield record_batch(piece, data, base)


async def _fetch(store: Store, pieces: list[Piece]) -> list[tuple[bytes, int]]:
    limit = asyncio.Semaphore(READ_CONCURRENCY)

    async def one(piece: Piece) -> tuple[bytes, int]:
        start = piece.offsets[0]
        end = max(o + s for o, s in zip(piece.offsets, piece.sizes, strict=True))
        async with limit:
            data = await read_spans(store, piece.key, [("", start, end - start)])
        return data[""], start

    try:
        return await asyncio.gather(*(one(p) for p in pieces))
    finally:
        await store.close()


def record_batch(piece: Piece, data: bytes, base: int) -> pa.RecordBatch:
    """One Arrow batch of ``piece``, whose object's bytes from ``base`` on are ``data``."""
    offsets = np.asarray(piece.offsets, dtype=np.int64) - base
    sizes = np.asarray(piece.sizes, dtype=np.int64)
    n = len(sizes)
    ends = offsets + sizes
    if n and bool(np.all(offsets[1:] == ends[:-1])):  # back to back: no copy
        bounds = np.append(offsets, ends[-1]).astype(np.int32)
        payload = pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(bounds), pa.py_buffer(data)]
        )
    else:
        view = memoryview(data)
        payload = pa.array([view[o:e] for o, e in zip(offsets, ends, strict=True)], pa.binary())
    return rows_batch(piece.rows, payload)


def rows_batch(rows: list[Row], payload: pa.Array) -> pa.RecordBatch:
    """The record batch of ``rows`` (message fields) and their payloads."""
    ids, priority, status, attempts, enqueued, group, dedup, attributes, error = (
        zip(*rows, strict=True) if rows else ([],) * 9
    )
    micros = (np.asarray(enqueued, dtype=np.float64) * 1e6).astype(np.int64)
    columns: list[Any] = [
        pa.array(ids, pa.string()),
        payload,
        pa.array(priority, pa.int32()),
        pa.array(status, pa.string()),
        pa.array(attempts, pa.int32()),
        pa.array(micros, pa.timestamp("us", tz="UTC")),
        pa.array(group, pa.string()),
        pa.array(dedup, pa.string()),
        pa.array(
            [None if a is None else list(a.items()) for a in attributes], ARROW_SCHEMA[8].type
        ),
        pa.array(error, pa.string()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
