"""Intake: enqueues and staged commits, admitted (``admission``) and added to the log.

The I/O around admission: payloads over ``large_payload`` are written to objects of their own
first; staged objects are checked on the store and kept from the collector while they are
committed; the caller is answered once its messages are durable, or at once when buffered.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterable, Sequence

from .. import validate
from ..config import BUFFERED
from ..errors import InvalidArgument, QueueFull, StoreError, StoreFull
from ..index.state import blob_key
from ..log import ids
from ..log.ops import Append, CommitToken
from ..log.staging import StagedObject
from ..store import NotFound
from . import admission
from .commit import Batch
from .core import Core
from .upkeep import Upkeep


class Intake:
    """Adds new messages to one writer's queue."""

    def __init__(self, core: Core, upkeep: Upkeep) -> None:
        self.core = core
        self.upkeep = upkeep
        self._blobs = itertools.count()

    async def enqueue(self, items: list[validate.Item], durability: str | None = None) -> list[str]:
        core = self.core
        core.check()
        self._admit(items)
        if not any(len(it.payload) > core.config.large_payload for it in items):
            return await self._add(items, {}, durability)
        blobs = await self._write_blobs(items)
        try:
            core.check()
            self._admit(items)  # the queue may have filled while the blobs were written
            return await self._add(items, blobs, durability)
        except (QueueFull, StoreFull):  # nothing enqueued: the blobs are nobody's
            self._delete(blobs.values())
            raise

    async def _add(
        self, items: list[validate.Item], blobs: dict[int, str], durability: str | None
    ) -> list[str]:
        """Add admitted ``items`` (``blobs``: the keys of those written to objects of their
        own) to the batch being filled; their ids once the caller may be answered."""
        core = self.core
        now = core.clock()
        admitted = admission.admit(items, self._seen(now), blobs)
        self._delete(admitted.twins)
        fresh = admitted.fresh
        if not fresh:  # all duplicates: answer once the originals are durable
            await self._answer_after(core.commit.latest(), 0, durability)
            return admitted.ids([])
        batch = core.commit.filling
        first = batch.places(len(fresh))
        made = [ids.make(core.state.queue, batch.seq, first + i) for i in range(len(fresh))]
        op = admitted.append(first, now, batch.size)
        carried = admitted.carried()
        payloads = [fresh[i].payload for i in carried]
        size = sum(map(len, payloads))
        await self._append(op, [made[i] for i in carried], payloads, size, durability)
        return admitted.ids(made)

    async def enqueue_payloads(
        self, payloads: list[bytes], durability: str | None = None
    ) -> list[str]:
        """``enqueue`` of plain messages (priority 0, no delay, group, dedup id or
        attributes) given as their payloads: the batch path, with no object per message."""
        core = self.core
        sizes = list(map(len, payloads))
        if max(sizes) > core.config.large_payload:
            return await self.enqueue(
                [validate.Item(p, 0, 0.0, None, None, None) for p in payloads], durability
            )
        core.check()
        self._room(len(payloads))
        batch = core.commit.filling
        first = batch.places(len(payloads))
        made = ids.make_many(core.state.queue, batch.seq, first, len(payloads))
        size = sum(sizes)
        op = Append(first, core.clock(), batch.size, sizes)
        await self._append(op, made, payloads, size, durability)
        return made

    def _seen(self, now: float) -> admission.Seen:
        """The first id of a dedup id within the dedup window at ``now``, if any."""
        state, window = self.core.state, self.core.config.dedup_window
        return lambda dedup_id: state.dedup_hit(dedup_id, now, window)

    def _admit(self, items: list[validate.Item]) -> None:
        """Raise QueueFull unless the new messages among ``items`` fit."""
        if self.core.config.max_queue_depth is not None:
            self._room(admission.unseen(items, self._seen(self.core.clock())))

    def _room(self, fresh: int) -> None:
        """Raise QueueFull unless ``fresh`` more messages fit."""
        core = self.core
        admission.room(core.store.url, core.state.live, fresh, core.config.max_queue_depth)

    async def _append(
        self,
        op: Append,
        made: list[str],
        payloads: list[bytes],
        size: int,
        durability: str | None,
    ) -> None:
        """Commit ``op``, carrying ``payloads`` (``size`` bytes) of the messages ``made``
        into the batch being filled; return once the caller may be answered."""
        batch = self.core.commit.add_payloads(op, made, payloads, size)
        self.core.notify()
        await self._answer_after(batch, len(op.sizes), durability)

    async def _answer_after(
        self, batch: Batch | None, messages: int, durability: str | None
    ) -> None:
        """Return when an enqueue riding ``batch`` may be answered: once the batch is durable;
        at once if buffered (``durability``, else the queue's) and the writer keeps up
        (``BUFFER_WEIGHT``)."""
        core = self.core
        buffered = (durability or core.config.durability) == BUFFERED
        if buffered and not core.commit.backlogged():
            core.tally.buffered_answers += messages
            return
        await core.commit.durable_after(batch)

    async def _write_blobs(self, items: list[validate.Item]) -> dict[int, str]:
        """Payloads over ``large_payload`` go to objects of their own, before their enqueue:
        the key of each, by its index in ``items``."""
        core = self.core
        threshold = core.config.large_payload
        large = [i for i, it in enumerate(items) if len(it.payload) > threshold]
        prefix = f"{int(time.time() * 1000):012x}{core.token[:8]}"  # names sort by time
        keys = {i: blob_key(f"{prefix}{next(self._blobs):x}") for i in large}
        results = await asyncio.gather(
            *(core.store.put(keys[i], items[i].payload) for i in large), return_exceptions=True
        )
        for failure in results:
            if isinstance(failure, BaseException):  # the others are nobody's
                self._delete(k for k, r in zip(keys.values(), results, strict=True) if r is None)
                raise failure
        return keys

    def _delete(self, keys: Iterable[str]) -> None:
        """Delete payload objects no message refers to, beside the writer."""
        for key in keys:
            self.core.background(self.core.store.delete(key))

    # -- bulk loads (the Spark source) -----------------------------------------------------------

    async def enqueue_staged(
        self, objects: list[StagedObject], token: str | None = None
    ) -> Sequence[str] | None:
        """Commit the messages of staged objects in one log object (all or none), with the
        commit ``token`` if given. Their ids (the first ids of dedup hits), or None if
        ``token`` was committed before: a replay, which enqueues nothing."""
        core = self.core
        core.check()
        if token is not None and token in core.state.tokens:
            await core.commit.durable_after(core.commit.latest())
            return None
        for obj in objects:
            validate.staged(obj, core.config.max_message_size, core.config.max_delay)
        keys = [obj.key for obj in objects]
        known = set(core.state.payloads.staged_refs) | core.state.payloads.garbage_objects()
        reused = [key for key in keys if key in known or key in core.staged_claims]
        if reused or len(set(keys)) != len(keys):
            raise InvalidArgument(f"staged object(s) committed twice: {(reused or keys)[:3]}")
        core.staged_claims.update(keys)  # from here on the collector leaves them alone
        try:
            await self.upkeep.collected()  # it may have chosen them already
            await asyncio.gather(*(self._check_staged(obj) for obj in objects))
            core.check()
            if token is not None and token in core.state.tokens:
                return None
            return await self._commit_staged(objects, token)
        finally:
            core.staged_claims.difference_update(keys)

    async def _check_staged(self, obj: StagedObject) -> None:
        """The staged object exists and is as long as its description says."""
        store = self.core.store
        try:
            tail = await store.get_range(obj.key, max(obj.size - 1, 0), obj.size)
        except NotFound:
            raise StoreError(
                f"staged object {obj.key} of {store.url} is gone: uncommitted staged "
                "objects are collected after a while; stage the data again"
            ) from None
        if len(tail) != min(obj.size, 1):
            raise InvalidArgument(f"staged object {obj.key} is shorter than {obj.size} bytes")

    async def _commit_staged(self, objects: list[StagedObject], token: str | None) -> Sequence[str]:
        core = self.core
        now = core.clock()
        admitted = admission.admit_staged(objects, self._seen(now))
        self._room(admitted.fresh)
        batch = core.commit.filling  # no await from here on: all ride one log object
        start = batch.places(admitted.fresh)
        for op in admitted.appends(start, now):
            core.commit.add(op)
        if token is not None:
            core.commit.add(CommitToken(token))
        core.notify()
        await core.commit.durable_after(batch)
        return admitted.ids(ids.Ids(core.state.queue, batch.seq, admitted.places(start)))
