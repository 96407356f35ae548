"""Leasing: leasing messages to consumers, and what consumers do with their leases.

``dequeue`` (and ``lease``, which leaves the payloads where they lie, for the Spark source)
chooses deliverable messages (``select``), after retiring those past the queue's retention
(``retirement``) and burying those whose last lease ran out of attempts, and logs a Lease of
them; ``complete``, ``fail``, ``release`` and ``extend`` settle or prolong a lease named by its
receipt. A long poll waits for the next change (``Core``).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from .. import snapshot
from ..config import BUFFERED
from ..errors import ReceiptExpired
from ..index.delivery import Chosen
from ..index.records import DONE, Record
from ..index.stretches import Stretch
from ..log import ids as message_ids
from ..log.ops import Bury, Complete, Extend, Fail, Lease, Release
from ..message import Message
from ..snapshot import Located
from ..wire import pages
from ..wire.pages import Pages
from .commit import Batch
from .core import Core
from .payloads import Payloads, message, stretch_messages
from .retirement import next_due, retire

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Take:
    """What a dequeue asks for (checked by the API)."""

    max_messages: int
    visibility_timeout: float | None
    wait: float
    per_group: int = 1
    complete: list[str] | None = None  # receipts to complete first, in the same commit


class Leasing:
    """Hands out the messages of one writer and settles their leases."""

    def __init__(self, core: Core, payloads: Payloads) -> None:
        self.core = core
        self.payloads = payloads
        self._receipts = itertools.count()

    # -- leasing ---------------------------------------------------------------------------------

    async def lease(self, max_messages: int, visibility_timeout: float | None) -> list[Located]:
        """Lease up to ``max_messages`` like ``dequeue``, without reading their payloads:
        each comes with where its payload lies, for a reader of the store to fetch."""
        core = self.core
        core.check()
        timeout = self._timeout(visibility_timeout)
        picked, buried = await self.select(max_messages)
        chosen = cast("list[Record]", picked)  # (no stretches: each located on its own)
        now = core.clock()
        if not chosen:
            await core.commit.durable_after(buried)
            return []
        lease = self._lease(chosen, now, now + timeout)
        where = [snapshot.location(rec) for rec in chosen]  # durable once the lease is
        await core.commit.durable_after(core.commit.add(lease))
        now = core.clock()
        return [
            Located(message(rec, b""), place)
            for rec, place, (_, receipt, _) in zip(chosen, where, lease.leases, strict=True)
            if _still_held(rec, receipt, now)
        ]

    async def locate(self, ids: list[str]) -> dict[str, Located]:
        """The messages named (not completed) and where their payloads lie now."""
        self.core.check()
        retire(self.core)
        found = {}
        for mid in ids:
            rec = await self.find(mid)
            if rec is not None and rec.state != DONE:
                found[mid] = Located(message(rec, b""), snapshot.location(rec))
        commit = self.core.commit
        await commit.durable_after(commit.latest())  # a relocation may be on its way
        return found

    async def dequeue(self, take: Take) -> list[Message]:
        """Lease up to ``take.max_messages``; with ``take.complete``, after completing those
        receipts' messages in the same commit (or in the one before, if this waits)."""
        leased = await self._next(take)
        if leased is None:
            return []
        chosen, lease, batch, completed = leased
        answers = await self._answers(chosen, lease, batch)
        await self.core.commit.durable_after(completed)  # (in that batch or before it)
        return answers

    async def dequeue_pages(self, take: Take) -> Pages:
        """``dequeue``, its stretches answered as pages (``s3q.wire.pages``)."""
        leased = await self._next(take)
        if leased is None:
            return Pages([])
        chosen, lease, batch, completed = leased
        answer = await self._pages(chosen, lease, batch)
        await self.core.commit.durable_after(completed)
        return answer

    async def _next(self, take: Take) -> tuple[list[Chosen], Lease, Batch, Batch | None] | None:
        """The messages chosen and the lease of them logged (riding the batch given), after
        the completions ``take.complete`` (riding the batch given last); None if none came
        within ``take.wait`` (the completions durable by then)."""
        core = self.core
        core.check()
        timeout = self._timeout(take.visibility_timeout)
        deadline = time.monotonic() + take.wait
        completed = self._complete(take.complete) if take.complete else None
        while True:
            core.check()
            chosen, buried = await self.select(take.max_messages, take.per_group, stretches=True)
            now = core.clock()
            if chosen:
                lease = self._lease(chosen, now, now + timeout)
                return chosen, lease, core.commit.add(lease), completed
            remaining = 0.0 if core.no_waits else deadline - time.monotonic()
            if remaining <= 0:
                await core.commit.durable_after(buried)
                await core.commit.durable_after(completed)
                return None
            await self.changed(remaining)

    async def changed(self, timeout: float) -> None:
        """Until the queue changes (a commit, a timer firing: a message may be deliverable),
        at most ``timeout`` seconds; at once if long polls were stopped."""
        core = self.core
        if core.no_waits:
            return
        upcoming = core.state.next_change()
        due = next_due(core)  # (a group's next message may head it once the head retires)
        if due is not None:
            upcoming = due if upcoming is None else min(upcoming, due)
        if upcoming is not None:
            timeout = min(timeout, max(upcoming - core.clock(), 0.001))
        await core.wait_change(timeout)

    def _timeout(self, given: float | None) -> float:
        """The visibility timeout of a lease: the one ``given``, else the queue's."""
        return self.core.config.visibility_timeout if given is None else given

    def _lease(self, chosen: Sequence[Chosen], now: float, until: float) -> Lease:
        """A new lease of each of ``chosen`` until ``until``: its receipt ``<id>~<token>``, a
        stretch's token shared by its members."""
        prefix, counter = self.core.token[:6], self._receipts
        leases, stretches, attempts = [], [], []
        for item in chosen:
            if isinstance(item, Stretch):
                token = f"{prefix}{next(counter):x}"
                stretches.append((item.seq, item.place, item.count, token, until))
            else:
                leases.append(
                    (item.id, message_ids.receipt(item.id, f"{prefix}{next(counter):x}"), until)
                )
                attempts.append(item.attempts + 1)  # (what folding the lease makes it)
        return Lease(leases, now, stretches or None, attempts or None)

    async def _answers(self, chosen: list[Chosen], lease: Lease, batch: Batch) -> list[Message]:
        """The messages ``lease`` (folded, riding ``batch``) hands out, once it is durable."""
        core = self.core
        stretches = [item for item in chosen if type(item) is Stretch]
        records = (
            cast("list[Record]", chosen)
            if not stretches
            else [item for item in chosen if type(item) is Record]
        )
        payloads, pages = await _read(
            self.payloads.of(records), records, stretches, self.payloads.of_stretch
        )
        await core.commit.durable_after(batch)  # (written meanwhile, by the commit's own task)
        now = core.clock()
        held = [  # (None: that lease lapsed while it was being made durable)
            message(rec, payload) if _still_held(rec, receipt, now) else None
            for rec, payload, (_, receipt, _) in zip(records, payloads, lease.leases, strict=True)
        ]
        if not stretches:
            return [answer for answer in held if answer is not None]
        answers: list[Message] = []
        by_record, by_stretch = iter(held), iter(pages)
        leased = core.state.stretches.by_token
        for item in chosen:
            if type(item) is Stretch:
                members = next(by_stretch)
                if leased.get(item.token) is item and item.until > now:
                    answers.extend(stretch_messages(item, members))
            elif (answer := next(by_record)) is not None:
                answers.append(answer)
        return answers

    async def _pages(self, chosen: list[Chosen], lease: Lease, batch: Batch) -> Pages:
        """``_answers``, each stretch whose members are all still leased as one page."""
        core = self.core
        stretches = [item for item in chosen if type(item) is Stretch]
        if not stretches:
            return Pages(await self._answers(chosen, lease, batch))
        records = [item for item in chosen if type(item) is Record]
        payloads, blocks = await _read(
            self.payloads.of(records), records, stretches, self.payloads.block_of
        )
        await core.commit.durable_after(batch)  # (written meanwhile, by the commit's own task)
        now = core.clock()
        singles: list[Message] = []
        paged: list[pages.Page] = []
        placed = 0  # members of the pages so far
        by_record = iter(zip(records, payloads, lease.leases, strict=True))
        by_block = iter(blocks)
        leased = core.state.stretches.by_token
        for item in chosen:
            if type(item) is Stretch:
                block = next(by_block)
                if leased.get(item.token) is not item or item.until <= now:
                    continue
                if block is not None and item.left == item.count:
                    paged.append(pages.page(item, block, len(singles) + placed))
                    placed += item.count
                else:  # (some left it meanwhile, or their payloads are not side by side)
                    singles += stretch_messages(item, await self.payloads.of_stretch(item))
            else:
                rec, payload, (_, receipt, _) = next(by_record)
                if _still_held(rec, receipt, now):
                    singles.append(message(rec, payload))
        return Pages(singles, paged)

    async def select(
        self, limit: int, per_group: int = 1, stretches: bool = False
    ) -> tuple[list[Chosen], Batch | None]:
        """Up to ``limit`` deliverable messages, after retiring those past the queue's
        retention and burying those whose last lease ran out of attempts; the tables of the
        runs they come from read back first. With ``stretches``, members of runs may come as
        leased stretches (``stretches``)."""
        core = self.core
        batch = None
        attempts = core.config.max_attempts
        while True:
            batch = retire(core) or batch
            await self.fill(core.state.wanted(limit, core.fair))
            now = core.clock()
            bury = core.state.expire(now, attempts)
            while bury:  # before choosing: a buried head of a group frees the next one
                batch = self._bury(bury, now)
                bury = core.state.expire(now, attempts)
            chosen, bury = core.state.select(now, limit, attempts, per_group, core.fair, stretches)
            if bury:  # (none: all expired above, at the same ``now``)
                batch = self._bury(bury, now)
            # Other callers may have taken the members read back for while they were read:
            # read on while the head holds runs without tables and nothing was chosen.
            if chosen or not limit or not core.state.wanted(limit, core.fair):
                self._count(chosen, now)
                return chosen, batch

    def _count(self, chosen: list[Chosen], now: float) -> None:
        tally = self.core.tally
        noisy = self.core.state.tenants.noisy_names(now)
        for item in chosen:
            n = item.count if isinstance(item, Stretch) else 1
            tally.deliveries[item.priority] = tally.deliveries.get(item.priority, 0) + n
            if item.tenant in noisy:
                tally.deliveries_noisy += n
            else:
                tally.deliveries_quiet += n

    def _bury(self, recs: list[Record], now: float) -> Batch:
        error = f"lease expired after {self.core.config.max_attempts} attempt(s)"
        attempts = [rec.attempts for rec in recs]
        return self.core.commit.add(Bury([rec.id for rec in recs], error, now, attempts))

    async def fill(self, seqs: set[int]) -> None:
        """Read back the run tables of log objects ``seqs``."""
        if seqs:
            await snapshot.fill_tables(self.core.store, self.core.state, seqs)

    async def find(self, mid: str) -> Record | None:
        """Message ``mid``'s record, its run's table read back if need be."""
        seq = self.core.state.wanted_for(mid)
        if seq is not None:
            await self.fill({seq})
        return self.core.state.find(mid)

    async def sweep(self) -> None:
        """Bury expired leases with no attempts left, so reads report them as dead."""
        _, batch = await self.select(0)
        await self.core.commit.durable_after(batch)

    # -- settling leases -------------------------------------------------------------------------

    async def complete(self, receipts: list[str]) -> None:
        core = self.core
        core.check()
        batch = self._complete(receipts)
        if core.config.ack_durability == BUFFERED and not core.commit.backlogged():
            core.tally.buffered_acks += len(receipts)
            return  # answered from the batch: a completion lost with it only redelivers
        await core.commit.durable_after(batch)

    def _complete(self, receipts: list[str]) -> Batch:
        """Log the completion of the messages ``receipts`` hold leases of (all or none)."""
        mids = self._held(receipts)
        batch = self.core.commit.add(Complete(list(dict.fromkeys(mids)), self.core.clock()))
        self.core.notify()  # a group's next message may be deliverable now
        return batch

    async def fail(self, receipt: str, error: str | None) -> float | None:
        core = self.core
        core.check()
        rec = self._holder(receipt)
        now = core.clock()
        retry_at = None
        if rec.attempts < core.config.max_attempts:
            retry_at = now + self._backoff(rec.attempts)
        batch = core.commit.add(Fail(rec.id, error, retry_at, now, rec.attempts))
        core.notify()
        await core.commit.durable_after(batch)
        return retry_at

    async def release(self, receipts: list[str]) -> None:
        core = self.core
        core.check()
        mids = self._held(receipts)
        batch = core.commit.add(Release(list(dict.fromkeys(mids))))
        core.notify()
        await core.commit.durable_after(batch)

    async def extend(self, receipt: str, seconds: float, revive: bool = False) -> None:
        core = self.core
        core.check()
        rec = self._holder(receipt)
        now = core.clock()
        if rec.lease_until <= now and not revive:
            raise ReceiptExpired(f"the lease of message {rec.id} has already expired")
        batch = core.commit.add(Extend(rec.id, now + seconds))
        if seconds == 0:
            core.notify()
        await core.commit.durable_after(batch)

    def _holder(self, receipt: str) -> Record:
        """The record of the message ``receipt`` holds a lease of (``ReceiptExpired`` if that
        lease is not current, or its message retired)."""
        retire(self.core)
        rec = self.core.state.receipt_holder(receipt)
        if rec is None:
            raise _stale(receipt)
        return rec

    def _held(self, receipts: Iterable[str]) -> list[str]:
        """The ids of the messages ``receipts`` hold leases of (as ``_holder``, making no
        record; all or none)."""
        retire(self.core)
        state = self.core.state
        holder, by_token, mids = state.holder, state.stretches.by_token, []
        given = receipts if isinstance(receipts, list) else list(receipts)
        i = 0
        while i < len(given):
            receipt = given[i]
            mid, token = message_ids.split_receipt(receipt)
            stretch = by_token.get(token)
            if stretch is not None and (k := stretch.member_index(mid)) is not None:
                # a member still leased in its stretch (so it has no record of its own); the
                # receipts that follow are most often the stretch's next ones
                m = stretch.run_of(given, i, k, stretch.receipts()) or 1
                mids += stretch.ids()[k : k + m]
                i += m
                continue
            if holder(receipt) is None:
                raise _stale(receipt)
            mids.append(mid)
            i += 1
        return mids

    def _backoff(self, attempts: int) -> float:
        """Exponential in the attempts made, capped, with equal jitter."""
        config = self.core.config
        base = config.retry_delay * float(2 ** min(attempts - 1, 62))
        delay = min(config.retry_delay_max, base)
        return delay / 2 + random.uniform(0, delay / 2)


def _stale(receipt: str) -> ReceiptExpired:
    return ReceiptExpired(
        f"receipt {receipt!r} is unknown or stale: the message was completed, "
        "dead-lettered, retired by the queue's retention, or delivered again after its lease "
        "expired"
    )


def _still_held(rec: Record, receipt: str, now: float) -> bool:
    """Whether the lease a call made on ``rec`` still runs at ``now``, once it is durable.

    A commit slower than the visibility timeout lets the lease lapse while the caller waits,
    and the message may have gone to another consumer meanwhile: such a message is left out of
    the answer (its delivery counts as an attempt), never handed out twice.
    """
    return rec.receipt == receipt and rec.lease_until > now


async def _read(
    of_records: Coroutine[Any, Any, list[bytes]],
    records: list[Record],
    stretches: list[Stretch],
    of_stretch: Callable[[Stretch], Coroutine[Any, Any, T]],
) -> tuple[list[bytes], list[T]]:
    """The payloads of ``records`` (``of_records``) and what ``of_stretch`` reads of each of
    ``stretches``: concurrently when there are several reads, else awaited in turn (a gather
    wraps each in a task, and a single message's delivery has one read, mostly from the cache)."""
    if len(stretches) + bool(records) > 1:
        found, read = await asyncio.gather(of_records, asyncio.gather(*map(of_stretch, stretches)))
        return found, list(read)
    return await of_records, [await of_stretch(stretch) for stretch in stretches]
