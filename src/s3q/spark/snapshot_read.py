"""Batch read: a non-destructive snapshot of a queue, payloads read by the executors.

The driver rebuilds the index from the newest checkpoint and the log after it (no writer, no
broker), picks the messages asked for, and plans one input partition per object or range of
one. Executors read the payloads straight from the store. Completed messages are not part of a
snapshot (their payloads may already be collected).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from ..errors import InvalidConfig
from ..index.records import DONE
from ..index.state import QueueState, blob_key
from ..log import segment
from ..message import MessageStatus
from ..partitions import placement
from ..snapshot import Loaded, load
from . import pieces
from .options import Options, run

STATUSES = {s.value for s in MessageStatus} - {MessageStatus.COMPLETED.value}
LOAD_RETRIES = 2  # fresh starts if the collector removes a log object under the snapshot


class PiecesPartition(InputPartition):
    """Pieces of payload objects for one task to read."""

    def __init__(self, index: int, parts: list[pieces.Piece | pieces.RunPiece]) -> None:
        super().__init__(index)
        self.pieces = parts


class SnapshotReader(DataSourceReader):
    """Reads the messages of a queue as they stand at the newest log object."""

    def __init__(self, options: Options) -> None:
        self.options = options
        wanted = options.text("status")
        self.statuses = STATUSES
        if wanted:
            self.statuses = {s.strip().lower() for s in wanted.split(",") if s.strip()}
            unknown = self.statuses - STATUSES
            if unknown:
                raise InvalidConfig(
                    f"option status: unknown {', '.join(sorted(unknown))}; "
                    f"use any of {', '.join(sorted(STATUSES))}"
                )

    def partitions(self) -> list[InputPartition]:
        now = time.time()
        chosen: list[pieces.Entry] = []
        runs: list[pieces.RunPiece] = []
        for index, loaded in enumerate(run(_load_all(self.options))):  # each of its partitions
            chosen += self._chosen(loaded.state, index, now)
            if MessageStatus.PENDING.value in self.statuses:
                runs += pieces.run_pieces(loaded.state, index)
        planned = pieces.plan(chosen, runs)
        return [PiecesPartition(i, p) for i, p in enumerate(planned)] or [PiecesPartition(0, [])]

    def _chosen(self, state: QueueState, index: int, now: float) -> list[pieces.Entry]:
        """The messages of ``state`` (the queue's partition ``index``) with a status asked
        for, each where its payload lies (keys from the queue's URL)."""
        log_keys: dict[int, str] = {}
        chosen: list[pieces.Entry] = []
        for rec in state.records():
            if rec.state == DONE:
                continue
            status = state.status(rec, now).value
            if status not in self.statuses:
                continue
            if rec.stage is not None:
                key = placement.key_of(index, rec.stage)
                chosen.append((key, rec.offset, rec.size, rec, status))
            elif rec.offset < 0:
                key = placement.key_of(index, blob_key(rec.id))
                chosen.append((key, 0, rec.size, rec, status))
            else:
                known = log_keys.get(rec.payload_seq)
                if known is None:
                    known = placement.key_of(index, segment.key(rec.payload_seq))
                    log_keys[rec.payload_seq] = known
                chosen.append((known, rec.offset, rec.size, rec, status))
        return chosen

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, PiecesPartition)
        if partition.pieces:
            yield from pieces.read(self.options.open_store, partition.pieces)


async def _load(options: Options, partition: int = 0) -> Loaded:
    store = options.open_store(partition)
    try:
        return await load(store, retries=LOAD_RETRIES)
    finally:
        await store.close()


async def _load_all(options: Options) -> list[Loaded]:
    """The index of each of the queue's partitions (one, unless it has several)."""
    first = await _load(options)
    count = first.state.settings.get("partitions", 1)
    if not isinstance(count, int) or count <= 1:
        return [first]
    return [first, *await asyncio.gather(*(_load(options, i) for i in range(1, count)))]
