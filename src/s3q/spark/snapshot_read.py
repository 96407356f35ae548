"""Batch read: a non-destructive snapshot of a queue, payloads read by the executors.

The driver rebuilds the index from the newest checkpoint and the log after it (no writer, no
broker), picks the messages asked for, and plans one input partition per object or range of
one. Executors read the payloads straight from the store. Completed messages are not part of a
snapshot (their payloads may already be collected).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from .. import log
from ..errors import InvalidArgument, InvalidConfig
from ..message import MessageStatus
from ..records import DONE
from ..snapshot import Loaded, load
from ..state import blob_key
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
        loaded = run(_load(self.options))
        state, now = loaded.state, time.time()
        log_keys: dict[int, str] = {}
        chosen: list[pieces.Entry] = []
        for rec in state.records():
            if rec.state == DONE:
                continue
            status = state.status(rec, now).value
            if status not in self.statuses:
                continue
            if rec.stage is not None:
                chosen.append((rec.stage, rec.offset, rec.size, rec, status))
            elif rec.offset < 0:
                chosen.append((blob_key(rec.id), 0, rec.size, rec, status))
            else:
                key = log_keys.get(rec.payload_seq)
                if key is None:
                    key = log_keys[rec.payload_seq] = log.key(rec.payload_seq)
                chosen.append((key, rec.offset, rec.size, rec, status))
        runs = pieces.run_pieces(state) if MessageStatus.PENDING.value in self.statuses else ()
        planned = pieces.plan(chosen, runs)
        return [PiecesPartition(i, p) for i, p in enumerate(planned)] or [PiecesPartition(0, [])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, PiecesPartition)
        if partition.pieces:
            yield from pieces.read(self.options.open_store(), partition.pieces)


async def _load(options: Options) -> Loaded:
    store = options.open_store()
    try:
        loaded = await load(store, retries=LOAD_RETRIES)
    finally:
        await store.close()
    count = loaded.state.settings.get("partitions", 1)
    if isinstance(count, int) and count > 1:  # (its other partitions' messages are elsewhere)
        raise InvalidArgument(
            f"queue {options.url} has {count} partitions: the Spark source reads a queue of "
            "one partition (partition 0's log alone would be a part of the queue)"
        )
    return loaded
