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
when the restarted query plans its next batch; those of its messages a crashed driver had
leased again are *owed*: completed when they come back, never emitted again. So a sink
with exactly-once output (a file sink) receives every message once across driver restarts, as
long as a batch finishes within ``visibilityTimeout`` often enough that messages do not run
out of attempts.

With option ``broker``, the broker leading the queue leases and completes instead; the driver
writes the payloads it receives beside each manifest (``<manifest>.data``) for the executors.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from ..api import Queue, open
from ..config import MAX_DEQUEUE
from ..errors import MessageNotFound, ReceiptExpired
from ..log import ids as message_ids
from ..message import Message, MessageStatus
from ..snapshot import Located
from ..store import Store, queue_name
from . import pieces
from .options import Options
from .snapshot_read import PiecesPartition

if TYPE_CHECKING:
    from ..client import Client, RemoteQueue

logger = logging.getLogger("s3q.spark")
T = TypeVar("T")

PREFIX = "spark/consume/"
DATA = ".data"  # suffix of the payloads a manifest carries (through a broker)
DEFAULT_BATCH = 10_000
DEFAULT_VISIBILITY = 300.0


class Manifest(msgspec.Struct, array_like=True):
    """The messages of one planned range: ids and the receipts of their leases."""

    n: int
    ids: list[str]
    receipts: list[str]
    # Through a broker only: the messages (payloads left out), whose payloads the driver
    # wrote back to back into ``<manifest>.data``, for the executors to read.
    messages: list[Message] | None = None
    sizes: list[int] | None = None
    # The batch reached the sink, but these messages could not be completed (a crashed driver
    # had leased them again): complete them when they come back, never emit them again.
    owed: bool = False


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Manifest)


class ConsumeReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Leases messages per micro-batch; completes them when Spark commits the batch.

    Under ``trigger(availableNow=True)`` the query reads, in batches of ``maxMessagesPerBatch``,
    the messages enqueued before it started (those in log objects up to the queue's
    ``log_seq`` then) and stops once none is left; messages enqueued later are given back
    unread for the next run."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.batch = options.integer("maxMessagesPerBatch", DEFAULT_BATCH)
        self.visibility = options.seconds("visibilityTimeout", DEFAULT_VISIBILITY)
        consumer = options.text("consumerId", "default") or "default"
        self.prefix = f"{PREFIX}{consumer}/"
        self.broker = options.text("broker")
        self._client: Client | None = None
        self._queue: Queue | RemoteQueue | None = None
        self._store: Store | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._manifests: dict[int, Manifest] = {}
        self._owner: dict[str, int] = {}  # message id -> manifest not yet committed
        self._leased: dict[str, Located] = {}  # as leased by this process, until planned
        self._until: int | None = None  # availableNow: the last log object to read from

    # -- the driver's state ----------------------------------------------------------------------

    def _open(self) -> Queue | RemoteQueue:
        if self._queue is None:
            self._loop = asyncio.new_event_loop()
            self._store = self.options.open_store()
            for key in self._run(self._store.keys(self.prefix)):
                if not key.endswith(DATA):
                    self._remember(_decoder.decode(self._run(self._store.get(key))))
            if self.broker:  # the broker leads the queue; its name ends the queue URL
                from ..client import connect  # needs the client's extra: only through a broker

                name = queue_name(self.options.url)
                self._client = connect(self.broker, token=self.options.text("token"))
                self._queue = self._client.queue(name)
            else:
                self._queue = open(self.options.url, **self.options.store)
        return self._queue

    def _take(self, queue: Queue | RemoteQueue, count: int) -> list[tuple[Message, Located | None]]:
        """Lease up to ``count``: embedded, with where their payloads lie; through a broker,
        with their payloads."""
        if isinstance(queue, Queue):
            return [(found.message, found) for found in queue.lease(count, self.visibility)]
        return [(message, None) for message in queue.dequeue(count, self.visibility)]

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

    def prepareForTriggerAvailableNow(self) -> None:
        queue = self._open()
        try:
            self._until = queue.stats().log_seq
        except LookupError:  # through a broker, a queue not made yet: nothing to read
            self._until = 0

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
        carried: list[Message] = []  # through a broker: the messages, payloads included
        touched: set[int] = set()
        owed_back: list[str] = []  # receipts of owed messages that came back
        later: list[str] = []  # availableNow: receipts of messages enqueued after the start
        while len(ids) < wanted:
            leased = self._take(queue, min(wanted - len(ids), MAX_DEQUEUE))
            if not leased:
                break
            for message, found in leased:
                assert message.receipt is not None
                if self._until is not None and message_ids.enqueued_by(message.id) > self._until:
                    later.append(message.receipt)
                    continue
                owner = self._owner.get(message.id)
                if owner is not None:  # redelivered after a crash: still that batch's
                    manifest = self._manifests[owner]
                    manifest.receipts[manifest.ids.index(message.id)] = message.receipt
                    touched.add(owner)
                    if manifest.owed:
                        owed_back.append(message.receipt)
                    continue
                ids.append(message.id)
                receipts.append(message.receipt)
                if found is None:
                    carried.append(message)
                else:
                    self._leased[message.id] = found
        for first in range(0, len(later), MAX_DEQUEUE):  # held meanwhile: not leased twice
            queue.release(later[first : first + MAX_DEQUEUE])
        if owed_back:
            queue.complete_batch(owed_back)
        for n in touched:
            manifest = self._manifests[n]
            if manifest.owed:
                self._drop_completed(manifest, owed_back)
            else:
                self._save(manifest)
        if not ids:
            return start
        manifest = Manifest(max([start["n"], *self._manifests]) + 1, ids, receipts)
        if carried:
            assert self._store is not None
            data = b"".join(m.payload for m in carried)
            self._run(self._store.put(self._key(manifest.n) + DATA, data))
            manifest.messages = [msgspec.structs.replace(m, payload=b"") for m in carried]
            manifest.sizes = [len(m.payload) for m in carried]
        self._save(manifest)
        self._remember(manifest)
        return {"n": manifest.n}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        queue = self._open()
        chosen = [self._manifests[n] for n in sorted(self._manifests) if start["n"] < n <= end["n"]]
        rows: list[pieces.Entry] = []
        for manifest in chosen:
            if manifest.messages is not None and manifest.sizes is not None:
                offset, key = 0, self._key(manifest.n) + DATA
                for message, size in zip(manifest.messages, manifest.sizes, strict=True):
                    rows.append((key, offset, size, message, "processing"))
                    offset += size
        ids = [mid for m in chosen if m.messages is None for mid in m.ids]
        if not ids or not isinstance(queue, Queue):
            return [PiecesPartition(i, p) for i, p in enumerate(pieces.plan(rows))]
        # Where the payloads lie: as just leased, else (a batch re-run after a restart)
        # looked up again. A relocated payload's old object outlives gc_grace.
        leased, self._leased = self._leased, {}
        missing = [mid for mid in ids if mid not in leased]
        located = {**leased, **queue.locate(missing)} if missing else leased
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
            yield from pieces.read(self.options.open_store, partition.pieces)

    def commit(self, end: dict[str, int]) -> None:
        self._complete_through(self._open(), end["n"])

    def _complete_through(self, queue: Queue | RemoteQueue, last: int) -> None:
        """Complete the messages of every manifest up to ``last``; forget those manifests."""
        done = sorted(n for n, m in self._manifests.items() if n <= last and not m.owed)
        if not done:
            return
        receipts = [r for n in done for r in self._manifests[n].receipts]
        stale: list[str] = []
        try:
            queue.complete_batch(receipts)
        except ReceiptExpired:
            stale = self._complete_one_by_one(queue, receipts)
        owed = [
            mid
            for mid in (message_ids.split_receipt(r)[0] for r in stale)
            if _unfinished(queue, mid)
        ]
        for n in done:
            manifest = self._manifests.pop(n)
            for mid in manifest.ids:
                self._owner.pop(mid, None)
            self._delete(manifest)
        if owed:  # remembered under the last number: completed when they come back
            self._remember(Manifest(done[-1], owed, [""] * len(owed), owed=True))
            self._save(self._manifests[done[-1]])

    def _complete_one_by_one(self, queue: Queue | RemoteQueue, receipts: list[str]) -> list[str]:
        """Complete each receipt that still holds; the stale ones."""
        stale = []
        for receipt in receipts:
            try:
                queue.complete(receipt)
            except ReceiptExpired:  # dead or completed meanwhile, or leased by a crashed driver
                stale.append(receipt)
        return stale

    def _drop_completed(self, manifest: Manifest, completed: list[str]) -> None:
        """Drop the owed messages just completed; the manifest goes once none is left."""
        gone = {message_ids.split_receipt(r)[0] for r in completed}
        for mid in gone & set(manifest.ids):
            self._owner.pop(mid, None)
        manifest.ids = [mid for mid in manifest.ids if mid not in gone]
        manifest.receipts = [""] * len(manifest.ids)
        if manifest.ids:
            self._save(manifest)
        else:
            del self._manifests[manifest.n]
            self._delete(manifest)

    def _delete(self, manifest: Manifest) -> None:
        assert self._store is not None
        self._run(self._store.delete(self._key(manifest.n)))
        if manifest.messages is not None:
            self._run(self._store.delete(self._key(manifest.n) + DATA))

    def stop(self) -> None:
        if self._queue is not None:
            self._queue.close()
            self._queue = None
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._loop is not None:
            assert self._store is not None
            self._run(self._store.close())
            self._loop.close()
            self._loop = None


def _unfinished(queue: Queue | RemoteQueue, mid: str) -> bool:
    """Whether message ``mid`` may still be delivered (neither completed, dead nor gone)."""
    try:
        status = queue.status(mid)
    except MessageNotFound:
        return False
    return status not in (MessageStatus.COMPLETED, MessageStatus.DEAD)
