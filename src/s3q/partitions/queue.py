"""A queue spread over partitions: N logs, each with a writer of its own, served as one queue.

A queue made with ``partitions=N`` keeps N logs. Partition 0 is the queue's own log, at its
URL (a queue of one partition is every other queue) and it holds the setting; partition ``i``
lives under the queue's prefix (``s3q.partitions.placement``), with its own writer lease,
fencing, checkpoints and garbage collection. Between brokers partition ``i`` of queue ``q`` is
``q@i``; which broker of a cluster leads it, and how a broker serves the whole queue, is
``s3q.broker.registry``'s.

:class:`PartitionedQueue` serves the partitions as one queue (``AsyncQueueSurface``):

- **Enqueue.** A message with a group goes to its group's partition, so a group stays in
  order; else one with a dedup id to that id's partition, so deduplication stays exact (a
  message with both is deduplicated within its group, as SQS's high-throughput FIFO queues
  scope it); the others to the partition led here whose next log write leaves soonest (no
  hop to another broker; alike ones in turn), else to every partition in turn. A batch is
  split by partition, one call per partition. Staged objects (``s3q.log.staging``, a Spark
  write) lie under the prefix of the partition they are for, which commits them, its
  messages placed as an enqueue's are.
- **Dequeue** (``s3q.partitions.dequeue``) takes from the partitions led here first, the one
  whose best message has the highest priority first (``AsyncQueue.best_priority``), then from
  the others; partitions alike take turns, each call starting one further on, so none is
  starved; a long poll waits on every partition at once and wakes on the first with a
  message. Receipts and ids begin with their partition's queue id (``s3q.log.ids``), so
  ``complete``, ``fail``, ``extend``, ``release`` and ``status`` go straight to it.
- **Order.** Within a partition every promise of a queue holds (priorities, groups in order,
  fair delivery). Across partitions only priority's, among those led here: a message may be
  delivered before one enqueued earlier in another partition, or before one of a higher
  priority in a partition led elsewhere.
- **Everything else** (stats, peek, dead letters, redrive, purge, settings) spans the
  partitions; a batch over several partitions is one commit in each (all or none per
  partition, not across them).
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import itertools
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from .. import validate
from ..config import MAX_DELAY, MAX_MESSAGE_SIZE, QueueConfig, Setting
from ..errors import InvalidArgument, InvalidConfig, S3QError
from ..log import ids
from ..log.staging import StagedObject
from ..message import CompactionReport, Message, MessageStatus, QueueStats
from ..snapshot import Located
from ..store.base import Counts
from ..surface import AsyncQueueSurface, Target, documented
from ..wire import pages
from ..wire.pages import Pages
from .dequeue import Dequeues, Take
from .partition import Led, Partition, in_each
from .placement import check_placed, key_of, placed, split_key, token_of

T = TypeVar("T")


@documented
class PartitionedQueue:
    """The partitions of one queue (``queues[i]`` is partition ``i``), served as one queue.
    ``url``: the queue's."""

    def __init__(self, url: str, queues: Sequence[AsyncQueueSurface]) -> None:
        if not queues:
            raise InvalidArgument("a partitioned queue has at least one partition")
        self._url = url
        self.partitions = [Partition(i, q) for i, q in enumerate(queues)]
        self._turn = itertools.count()  # which partition comes first, call after call
        self._by_id: dict[str, Partition] = {}
        self._dequeues = Dequeues(self.partitions, self._order, self._by_partition, self.release)

    @property
    def url(self) -> str:
        return self._url

    # -- what a queue opened in this process offers besides the surface (``s3q.AsyncQueue``) ----

    def _led(self) -> list[Led]:
        """Every partition, each led in this process; InvalidArgument if one is not."""
        led = [p.led for p in self.partitions]
        if any(q is None for q in led):
            raise InvalidArgument(f"queue {self.url}: some of its partitions are led elsewhere")
        return [q for q in led if q is not None]

    @property
    def config(self) -> QueueConfig:
        """The configuration in force (partition 0's: the partitions' settings are alike)."""
        return self._led()[0].config

    @property
    def requests(self) -> Counts:
        """The store requests of every partition since it opened, by kind."""
        total = Counts()
        for queue in self._led():
            total.add(queue.requests)
        return total

    @property
    def stopped(self) -> S3QError | None:
        """Why the writer of a partition stopped, if one did: reopen the queue."""
        return next((q.stopped for q in self._led() if q.stopped is not None), None)

    def on_commit(self, listener: Callable[[float, int], None]) -> None:
        """Call ``listener(seconds, operations)`` after each durable commit of any partition."""
        for queue in self._led():
            queue.on_commit(listener)

    async def lease(
        self, max_messages: int = 1, visibility_timeout: float | None = None
    ) -> list[Located]:
        """``AsyncQueue.lease`` over the partitions in turn; each location names its key from
        the queue's URL (a partition's objects lie under ``partitions/<i>/``)."""
        got: list[Located] = []
        for part in self._order():
            want = max_messages - len(got)
            if want <= 0:
                break
            led = self._led()[part.index]
            got += _prefixed(part.index, await led.lease(want, visibility_timeout))
        return got

    async def locate(self, ids: Iterable[str]) -> dict[str, Located]:
        """``AsyncQueue.locate`` over the partitions holding ``ids`` (keys as ``lease``'s)."""
        split = await self._by_partition(validate.ids(ids, "locate"))
        found: dict[str, Located] = {}
        for part, named in split.items():
            led = self._led()[part.index]
            located = await led.locate(named)
            found.update(zip(located, _prefixed(part.index, list(located.values())), strict=True))
        return found

    async def changed(self, timeout: float) -> None:
        """Until any partition led here changes, at most ``timeout`` seconds."""
        waits = [asyncio.ensure_future(q.changed(timeout)) for q in self._led()]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()

    # -- routing ---------------------------------------------------------------------------------

    def _order(self) -> list[Partition]:
        """The partitions in the order a call tries them: those led here, the one whose best
        message has the highest priority first (``AsyncQueue.best_priority``; those with none
        last), then the others; those alike each starting one further on than the call
        before."""
        turn = next(self._turn)
        led: list[tuple[Partition, Led]] = []
        others = []
        for part in self.partitions:
            queue = part.led
            if queue is None:
                others.append(part)
            else:
                led.append((part, queue))
        best = {part.index: queue.best_priority() for part, queue in led}

        def ahead(part: Partition) -> tuple[bool, int]:  # (sorted is stable: turns kept)
            priority = best[part.index]
            return priority is None, -(priority or 0)

        first = sorted(_rotated([part for part, _ in led], turn), key=ahead)
        return first + _rotated(others, turn)

    def _for_new(self, group: str | None, dedup_id: str | None, turn: int) -> Partition:
        """Where a new message goes: its group's partition, else its dedup id's, else the one
        led here whose next log write leaves soonest (one writing nothing, else the one whose
        write in flight began first), the ``turn``-th first among equals; if none is led
        here, the ``turn``-th."""
        index = placed(group, dedup_id, len(self.partitions))
        if index is not None:
            return self.partitions[index]
        led = [p for p in self.partitions if p.led is not None]
        if not led:
            return self.partitions[turn % len(self.partitions)]
        return min(_rotated(led, turn), key=_next_write)

    async def _known(self) -> None:
        """Learn the queue id of every partition (once)."""
        unknown = [p for p in self.partitions if not p.queue_id]
        if not unknown:
            return
        found = await asyncio.gather(*(_queue_id(p.queue) for p in unknown))
        for part, queue_id in zip(unknown, found, strict=True):
            part.queue_id = queue_id
            self._by_id[queue_id] = part

    async def _of_id(self, id_or_receipt: str) -> Partition:
        """The partition that holds a message, by its id or receipt (partition 0 for an id
        of no partition: it answers as a queue does an id it never gave)."""
        if len(self._by_id) < len(self.partitions):
            await self._known()
        return self._by_id.get(id_or_receipt[: ids.QUEUE_DIGITS], self.partitions[0])

    async def _by_partition(self, targets: Iterable[Target]) -> dict[Partition, list[str]]:
        """Receipts (or ids) by the partition holding their messages, in their order."""
        if len(self._by_id) < len(self.partitions):
            await self._known()
        first, by_id = self.partitions[0], self._by_id
        split: dict[Partition, list[str]] = {}
        for target in targets:
            receipt = validate.receipt_of(target)
            split.setdefault(by_id.get(receipt[: ids.QUEUE_DIGITS], first), []).append(receipt)
        return split

    async def _each(self, call: Callable[[Partition], Awaitable[T]]) -> list[T]:
        """``call`` on every partition at once; their results in partition order."""
        return list(await asyncio.gather(*(call(p) for p in self.partitions)))

    # -- enqueue ---------------------------------------------------------------------------------

    async def enqueue(
        self,
        payload: bytes,
        priority: int = 0,
        delay: float = 0.0,
        dedup_id: str | None = None,
        group: str | None = None,
        attributes: dict[str, str] | None = None,
        *,
        durability: str | None = None,
        tenant: str | None = None,
    ) -> str:
        part = self._for_new(group, dedup_id, next(self._turn))
        return await part.queue.enqueue(
            payload,
            priority,
            delay,
            dedup_id,
            group,
            attributes,
            durability=durability,
            tenant=tenant,
        )

    async def enqueue_batch(
        self, items: Iterable[bytes | dict[str, Any]], *, durability: str | None = None
    ) -> list[str]:
        if isinstance(items, bytes | str | dict):
            raise InvalidArgument("enqueue_batch takes a list of payloads or dicts")
        listed = list(items)
        turn = next(self._turn)
        anywhere = self._for_new(None, None, turn)  # where messages with no key go
        if not any(isinstance(item, dict) for item in listed):  # one call, to one partition
            return await anywhere.queue.enqueue_batch(listed, durability=durability)
        # split over partitions, all or none: every item checked before any is sent
        max_size, max_delay = _limits(self.partitions[0])
        for item in listed:
            validate.item_of(item, max_size, max_delay)
        places: dict[Partition, list[int]] = {}
        for place, item in enumerate(listed):
            keyed = item if isinstance(item, dict) else {}
            key = keyed.get("group")
            if key is None:
                key = keyed.get("dedup_id")
            part = self._for_new(key, None, turn) if key is not None else anywhere
            places.setdefault(part, []).append(place)
        if len(places) == 1:  # one partition: the batch as it is, in one call
            (part,) = places
            return await part.queue.enqueue_batch(listed, durability=durability)
        answers = await in_each(
            "enqueue_batch",
            {
                part: part.queue.enqueue_batch([listed[k] for k in where], durability=durability)
                for part, where in places.items()
            },
        )
        out = [""] * len(listed)
        for where, answer in zip(places.values(), answers, strict=True):
            for place, mid in zip(where, answer, strict=True):
                out[place] = mid
        return out

    async def enqueue_staged(
        self, objects: Iterable[StagedObject], token: str | None = None
    ) -> Sequence[str] | None:
        # Each object lies under the prefix of the partition whose log commits it (its key
        # from the queue's URL, ``key_of``): one commit in each partition named, with
        # ``token`` (``token@i`` in partition i > 0). The ids committed now, in the objects'
        # order; None if every partition had seen its token (the objects of one that had, if
        # others had not, are left to its collector).
        given = list(objects)
        split: dict[Partition, list[StagedObject]] = {}
        where: list[Partition] = []
        for obj in given:
            index, key = split_key(obj.key)
            if index >= len(self.partitions):
                raise InvalidArgument(
                    f"staged object {obj.key} lies in partition {index}; the queue has "
                    f"{len(self.partitions)}"
                )
            check_placed(obj, index, len(self.partitions))
            part = self.partitions[index]
            split.setdefault(part, []).append(msgspec.structs.replace(obj, key=key))
            where.append(part)
        if len(split) <= 1:
            part = where[0] if where else self.partitions[0]
            return await part.queue.enqueue_staged(split.get(part, []), token_of(token, part.index))
        answers = await in_each(
            "enqueue_staged",
            {
                p: p.queue.enqueue_staged(objs, token_of(token, p.index))
                for p, objs in split.items()
            },
        )
        made = dict(zip(split, answers, strict=True))
        if all(answer is None for answer in answers):
            return None
        out: list[str] = []
        taken = dict.fromkeys(split, 0)
        for obj, part in zip(given, where, strict=True):
            done = made[part]
            if done is not None:
                out += done[taken[part] : taken[part] + len(obj)]
                taken[part] += len(obj)
        return out

    # -- dequeue ---------------------------------------------------------------------------------

    async def dequeue(
        self,
        max_messages: int = 1,
        visibility_timeout: float | None = None,
        wait: float = 0.0,
        *,
        per_group: int = 1,
        complete: Iterable[Target] = (),
    ) -> list[Message]:
        take = Take(max_messages, visibility_timeout, wait, per_group, paged=False)
        return pages.merged(await self._dequeues.take(take, complete))

    async def dequeue_pages(
        self,
        max_messages: int = 1,
        visibility_timeout: float | None = None,
        wait: float = 0.0,
        *,
        per_group: int = 1,
        complete: Iterable[Target] = (),
    ) -> Pages:
        """``dequeue``, stretches of the partitions led here answered as pages
        (``s3q.wire.pages``)."""
        take = Take(max_messages, visibility_timeout, wait, per_group, paged=True)
        return await self._dequeues.take(take, complete)

    def stop_waiting(self) -> None:
        """End every long poll now with what is there, and make later ones answer at once."""
        self._dequeues.stop_waiting()

    # -- calls on delivered messages -------------------------------------------------------------

    async def complete(self, target: Target) -> None:
        receipt = validate.receipt_of(target)
        await (await self._of_id(receipt)).queue.complete(receipt)

    async def complete_batch(self, targets: Iterable[Target]) -> None:
        split = await self._by_partition(targets)
        await in_each("complete_batch", {p: p.queue.complete_batch(r) for p, r in split.items()})

    async def fail(self, target: Target, error: str | None = None) -> float | None:
        receipt = validate.receipt_of(target)
        return await (await self._of_id(receipt)).queue.fail(receipt, error)

    async def release(self, targets: Target | Iterable[Target]) -> None:
        items = [targets] if isinstance(targets, Message | str) else targets
        split = await self._by_partition(items)
        await in_each("release", {p: p.queue.release(r) for p, r in split.items()})

    async def extend(self, target: Target, seconds: float, *, revive: bool = False) -> None:
        receipt = validate.receipt_of(target)
        await (await self._of_id(receipt)).queue.extend(receipt, seconds, revive=revive)

    async def status(self, id: str) -> MessageStatus:
        if not isinstance(id, str):
            raise InvalidArgument(f"id must be a string, got {type(id).__name__}")
        return await (await self._of_id(id)).queue.status(id)

    # -- the queue as a whole --------------------------------------------------------------------

    async def stats(self) -> QueueStats:
        each = await self._each(lambda p: p.queue.stats())
        for part, stats in zip(self.partitions, each, strict=True):
            if stats.queue_id and not part.queue_id:
                part.queue_id = stats.queue_id
                self._by_id[stats.queue_id] = part
        return summed(each)

    async def peek(self, limit: int = 10) -> list[Message]:
        each = await self._each(lambda p: p.queue.peek(limit))  # (each partition's in order)
        return list(itertools.islice(heapq.merge(*each, key=_ahead), limit))

    async def dead_letters(self, limit: int = 100) -> list[Message]:
        each = await self._each(lambda p: p.queue.dead_letters(limit))
        merged = heapq.merge(*each, key=lambda m: m.enqueued_at)
        return list(itertools.islice(merged, limit))

    async def redrive(self, ids: Iterable[str] | None = None) -> int:
        if ids is None:
            return sum(await self._each(lambda p: p.queue.redrive()))
        split = await self._by_partition(validate.ids(ids, "redrive"))
        return sum(await asyncio.gather(*(p.queue.redrive(r) for p, r in split.items())))

    async def discard(self, ids: Iterable[str]) -> int:
        split = await self._by_partition(validate.ids(ids, "discard"))
        return sum(await asyncio.gather(*(p.queue.discard(r) for p, r in split.items())))

    async def configure(self, /, **settings: Any) -> dict[str, Setting]:
        count = settings.pop("partitions", len(self.partitions))
        if count != len(self.partitions):
            raise InvalidConfig(
                f"queue {self.url} has partitions={len(self.partitions)}, not {count!r}: "
                "partitions is set before a queue's first message and never changed after"
            )
        first = await self.partitions[0].queue.configure(**settings)
        if settings:
            await asyncio.gather(*(p.queue.configure(**settings) for p in self.partitions[1:]))
        return first

    async def settle(self) -> None:
        """Give every partition the settings of partition 0 (but ``partitions``), where they
        differ: the partitions of a queue behave alike."""
        first = await self.partitions[0].queue.configure()
        wanted = {k: v for k, v in first.items() if k != "partitions"}

        async def align(part: Partition) -> None:
            now = await part.queue.configure()
            changed = {k: v for k, v in wanted.items() if now.get(k) != v}
            if changed:
                await part.queue.configure(**changed)

        await asyncio.gather(*(align(p) for p in self.partitions[1:]))

    async def cleanup(self) -> int:
        return sum(await self._each(lambda p: p.queue.cleanup()))

    async def purge(self) -> int:
        return sum(await self._each(lambda p: p.queue.purge()))

    async def compact(self) -> CompactionReport:
        return summed_reports(await self._each(lambda p: p.queue.compact()))

    async def close(self) -> None:
        self._dequeues.close()
        results = await self._each(lambda p: _closed(p.queue))
        for result in results:
            if result is not None:
                raise result

    def __repr__(self) -> str:
        return f"<s3q.PartitionedQueue {self.url} ({len(self.partitions)} partitions)>"


if TYPE_CHECKING:  # mypy checks that PartitionedQueue offers the whole surface
    _partitioned: type[AsyncQueueSurface] = PartitionedQueue


def _ahead(message: Message) -> tuple[int, float]:
    """Which of two messages of different partitions a peek lists first."""
    return -message.priority, message.enqueued_at


def _prefixed(index: int, located: list[Located]) -> list[Located]:
    """Locations in partition ``index`` as keys from the queue's URL."""
    if index == 0:
        return located
    return [
        msgspec.structs.replace(
            loc, location=loc.location._replace(key=key_of(index, loc.location.key))
        )
        for loc in located
    ]


def _limits(first: Partition) -> tuple[int, float]:
    """The largest message and delay the queue takes: partition 0's settings if it is led
    here, else the bounds of every queue (a partition refuses what its settings do not
    allow)."""
    led = first.led
    if led is not None:
        return led.config.max_message_size, led.config.max_delay
    return MAX_MESSAGE_SIZE, MAX_DELAY


def _next_write(part: Partition) -> float:
    """When ``part``'s next log write may leave: now (-inf) if it writes nothing, else the
    sooner the earlier its write in flight began."""
    led = part.led
    since = led.writing_since() if led is not None else None
    return float("-inf") if since is None else since


def _rotated(items: list[T], turn: int) -> list[T]:
    if not items:
        return items
    k = turn % len(items)
    return items[k:] + items[:k]


async def _queue_id(queue: AsyncQueueSurface) -> str:
    known = getattr(queue, "queue_id", None)
    if isinstance(known, str) and known:
        return known
    return (await queue.stats()).queue_id


async def _closed(queue: AsyncQueueSurface) -> BaseException | None:
    try:
        await queue.close()
    except Exception as exc:
        return exc
    return None


#: fields of QueueStats that are not summed over partitions
_LARGEST = ("quiet_oldest_age",)
_FIRST = ("log_seq",)


def summed(each: list[QueueStats]) -> QueueStats:
    """The stats of a queue from those of its partitions (kept in ``partitions``): counts
    summed, the oldest age the largest, the mean batch weighted by commits."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(QueueStats):
        name = field.name
        column = [getattr(s, name) for s in each]
        if name in _LARGEST:
            values[name] = max(column)
        elif name in _FIRST:
            values[name] = column[0]
        elif name == "queue_id":
            values[name] = ",".join(column)
        elif name == "partitions":
            values[name] = list(each)
        elif name == "mean_ops_per_commit":
            commits = sum(s.commits for s in each)
            ops = sum(s.mean_ops_per_commit * s.commits for s in each)
            values[name] = ops / commits if commits else 0.0
        elif isinstance(column[0], dict):
            total: dict[Any, Any] = {}
            for counts in column:
                for key, value in counts.items():
                    total[key] = total.get(key, 0) + value
            values[name] = dict(sorted(total.items()))
        else:
            values[name] = sum(column)
    return QueueStats(**values)


def summed_reports(reports: list[CompactionReport]) -> CompactionReport:
    """What a collection pass of every partition did, as the queue's."""
    total = CompactionReport()
    for report in reports:
        for field in dataclasses.fields(CompactionReport):
            if field.name not in ("objects", "bytes"):
                value = getattr(report, field.name)
                setattr(total, field.name, getattr(total, field.name) + value)
    # partition 0's prefix holds the other partitions': its figures are the queue's
    total.objects, total.bytes = reports[0].objects, reports[0].bytes
    return total
