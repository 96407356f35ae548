"""Streaming read: a Structured Streaming source that consumes a queue.

The driver opens the queue as its writer. Each micro-batch leases up to
``maxMessagesPerBatch`` messages and records them in a *manifest*, an object
``spark/consume/<consumerId>/<n>`` holding their ids and receipts; the batch's offset is just
``{"n": n}``. Batches cover contiguous ranges of manifest numbers, so a restarted query that
re-runs a planned batch (from its offset log) reads the same manifests, hence the same
messages. Executors read the payloads from the store. Messages are completed only once Spark
is past their batch — ``commit(end)``, or ``latestOffset(start)``, which Spark calls only after
the batch ending at ``start`` reached its commit log — and then their manifests are deleted.

After a crash, leases run out and the queue offers those messages again: the source
recognises messages of manifests not yet committed, takes the new receipt and keeps them out
of new batches. A manifest written but never planned (a crash before Spark logged the offset)
is planned by the next batch. A batch the sink committed but the source did not is completed
when the restarted query plans its next batch. So a sink with exactly-once output (a file sink) receives every
message once across driver restarts, as long as a batch finishes within ``visibilityTimeout``
often enough that messages do not run out of attempts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import msgspec
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows

from ..api import Queue, open
from ..engine import MAX_DEQUEUE
from ..errors import ReceiptExpired
from ..snapshot import Located
from ..store import Store
from . import pieces
from .options import Options
from .snapshot_read import PiecesPartition

logger = logging.getLogger("s3q.spark")
T = TypeVar("T")

PREFIX = "spark/consume/"
DEFAULT_BATCH = 10_000
DEFAULT_VISIBILITY = 300.0


class Manifest(msgspec.Struct, array_like=True):
    """The messages of one planned range: ids and the receipts of their leases."""

    n: int
    ids: list[str]
    receipts: list[str]


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Manifest)


class ConsumeReader(DataSourceStreamReader):
    """Leases messages per micro-batch; completes them when Spark commits the batch."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.batch = options.integer("maxMessagesPerBatch", DEFAULT_BATCH)
        self.visibility = options.seconds("visibilityTimeout", DEFAULT_VISIBILITY)
        consumer = options.text("consumerId", "default") or "default"
        self.prefix = f"{PREFIX}{consumer}/"
        self._queue: Queue | None = None
        self._store: Store | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._manifests: dict[int, Manifest] = {}
        self._owner: dict[str, int] = {}  # message id -> manifest not yet committed
        self._leased: dict[str, Located] = {}  # as leased by this process, until planned

    # -- the driver's state ----------------------------------------------------------------------

    def _open(self) -> Queue:
        if self._queue is None:
            self._loop = asyncio.new_event_loop()
            self._store = self.options.open_store()
            for key in self._run(self._store.keys(self.prefix)):
                manifest = _decoder.decode(self._run(self._store.get(key)))
                self._remember(manifest)
            self._queue = open(self.options.url, **self.options.store)
        return self._queue

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None
        return self._loop.run_until_complete(coro)

    def _key(self, n: int) -> str:
        return f"{self.prefix}{n:020d}"

    def _remember(self, manifest: Manifest) -> None:
        self._manifests[manifest.n] = manifest
        for mid in manifest.ids:
            self._owner[mid] = manifest.n

    def _save(self, manifest: Manifest) -> None:
        assert self._store is not None
        self._run(self._store.put(self._key(manifest.n), _encoder.encode(manifest)))

    # -- Spark's calls -----------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, int]:
        return {"n": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.batch)

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        queue = self._open()
        # Spark plans a batch only once the one before it is in its commit log: everything up
        # to ``start`` reached the sink, whether or not ``commit`` was called for it yet.
        self._complete_through(queue, start["n"])
        unplanned = [n for n in self._manifests if n > start["n"]]
        if unplanned:  # leased and recorded, but Spark never planned it (a crash in between)
            return {"n": max(unplanned)}
        # Other limits (all available, bytes, files) take maxMessagesPerBatch: a queue has
        # no end, and leasing more than a batch can finish within its lease helps nobody.
        wanted = limit.max_rows if isinstance(limit, ReadMaxRows) else self.batch
        ids: list[str] = []
        receipts: list[str] = []
        touched: set[int] = set()
        while len(ids) < wanted:
            leased = queue.lease(min(wanted - len(ids), MAX_DEQUEUE), self.visibility)
            if not leased:
                break
            for found in leased:
                message = found.message
                assert message.receipt is not None
                owner = self._owner.get(message.id)
                if owner is not None:  # redelivered after a crash: still that batch's
                    manifest = self._manifests[owner]
                    manifest.receipts[manifest.ids.index(message.id)] = message.receipt
                    touched.add(owner)
                    continue
                ids.append(message.id)
                self._leased[message.id] = found
                receipts.append(message.receipt)
        for n in touched:
            self._save(self._manifests[n])
        if not ids:
            return start
        manifest = Manifest(max([start["n"], *self._manifests]) + 1, ids, receipts)
        self._save(manifest)
        self._remember(manifest)
        return {"n": manifest.n}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        queue = self._open()
        ids = [
            mid
            for n in sorted(self._manifests)
            if start["n"] < n <= end["n"]
            for mid in self._manifests[n].ids
        ]
        if not ids:
            return []
        # Where the payloads lie: as just leased, else (a batch re-run after a restart)
        # looked up again. A relocated payload's old object outlives gc_grace.
        leased, self._leased = self._leased, {}
        missing = [mid for mid in ids if mid not in leased]
        located = {**leased, **queue.locate(missing)} if missing else leased
        rows: list[pieces.Entry] = []
        for mid in ids:
            found = located.get(mid)
            if found is not None:  # else completed meanwhile: nothing left to deliver
                where = found.location
                rows.append((where.key, where.offset, where.size, found.message, "processing"))
        planned = pieces.plan(rows)
        return [PiecesPartition(i, p) for i, p in enumerate(planned)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, PiecesPartition)
        if partition.pieces:
            yield from pieces.read(self.options.open_store(), partition.pieces)

    def commit(self, end: dict[str, int]) -> None:
        self._complete_through(self._open(), end["n"])

    def _complete_through(self, queue: Queue, last: int) -> None:
        """Complete the messages of every manifest up to ``last``; forget those manifests."""
        done = sorted(n for n in self._manifests if n <= last)
        receipts = [r for n in done for r in self._manifests[n].receipts]
        if receipts:
            try:
                queue.complete_batch(receipts)
            except ReceiptExpired:
                self._complete_one_by_one(queue, receipts)
        for n in done:
            manifest = self._manifests.pop(n)
            for mid in manifest.ids:
                self._owner.pop(mid, None)
            assert self._store is not None
            self._run(self._store.delete(self._key(n)))

    def _complete_one_by_one(self, queue: Queue, receipts: list[str]) -> None:
        for receipt in receipts:
            try:
                queue.complete(receipt)
            except ReceiptExpired as exc:  # dead meanwhile, or leased by a crashed driver
                logger.warning("s3q source: could not complete %s: %s", receipt, exc)

    def stop(self) -> None:
        if self._queue is not None:
            self._queue.close()
            self._queue = None
        if self._loop is not None:
            assert self._store is not None
            self._run(self._store.close())
            self._loop.close()
            self._loop = None
