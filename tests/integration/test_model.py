"""Stateful property test: random operation sequences against a pure-Python model.

The model is a direct reading of the semantics (DESIGN.md and the API contract). Where the
contract leaves something open, the model accepts every reasonable answer rather than guess:
  * retry jitter: a failed message is RETRY or PENDING until ``retry_delay_max`` has passed; before
    dequeuing, the model advances the clock past every such window so deliveries are exact;
  * a receipt whose lease expired but whose message was not yet redelivered may still work or may
    raise ReceiptExpired (either way the model follows what happened);
  * a completed record past its retention but not yet cleaned up may still answer COMPLETED, or
    may already be gone (pruned by the queue itself), so cleanup() may count fewer;
  * a dedup id whose message was purged may or may not still deduplicate;
  * ``last_error`` after a lease expiry or a redrive is not checked.
The clock never lands within 20 ms of a deadline the model knows, so no test depends on whether
a boundary is inclusive.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from typing import Any

import hypothesis.strategies as st
import pytest
from conftest import FakeClock
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import s3q
import s3q.index.tenants
import s3q.partitions.queue
from s3q.index import checkpoint
from s3q.snapshot import fill_tables
from s3q.wire import pages

pytestmark = pytest.mark.slow

S = s3q.MessageStatus
UNKNOWN = object()

OPTS = dict(
    max_attempts=2,
    retry_delay=0.5,
    retry_delay_max=3.0,
    visibility_timeout=20.0,
    dedup_window=100.0,
    completed_retention=200.0,
    lease_ttl=10.0,
    payload_cache_bytes=1024,  # most payloads are read back from the store, not a cache
)
# a few payloads big enough to be stored as objects of their own
BIG = [bytes([i]) * (300 * 1024 + i) for i in range(3)]
MAX_ATTEMPTS = OPTS["max_attempts"]
RDM = OPTS["retry_delay_max"]
VT = OPTS["visibility_timeout"]
WINDOW = OPTS["dedup_window"]
RETENTION = OPTS["completed_retention"]
MARGIN = 0.02

LIVE = ("ready", "leased", "retry")  # not finished: blocks the rest of its group

# Tenant fairness, with a lower threshold so that short random sequences reach noisy tenants
MIN_IN_FLIGHT = 2


@dataclass
class MMsg:
    id: str
    payload: bytes = field(repr=False)
    priority: int = 0
    seq: int = 0
    group: str | None = None
    dedup_id: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    enqueued_at: float = 0.0
    state: str = "ready"  # ready | leased | retry | completed | dead | gone
    visible_at: float = 0.0
    attempts: int = 0
    lease_until: float = 0.0
    receipt: str | None = None
    retry_from: float = 0.0
    last_error: object = None
    completed_at: float = 0.0
    message: object = field(default=None, repr=False)  # the Message of the latest delivery
    tenant: str | None = None
    # In flight for tenant fairness: leased, including a lease that lapsed but was neither
    # delivered again nor buried (the queue keeps such a message leased until then).
    held: bool = False
    leased_at: float = 0.0  # when its latest lease began


def _same_payload(got: bytes, mm: MMsg) -> None:
    if got != mm.payload:
        raise AssertionError(
            f"payload of {mm.id} differs: got {len(got)} bytes {got[:20]!r}..., "
            f"model has {len(mm.payload)} bytes {mm.payload[:20]!r}..."
        )


@dataclass
class Receipt:
    mid: str
    kind: str  # current | stale | maybe


@dataclass
class Dedup:
    mid: str
    at: float
    certain: bool = True


def _served(shares: dict[int, float], vtime: float, priority: int) -> tuple[float, float]:
    """Fair delivery, as documented: a delivery's start tag is its priority's share or the
    virtual time if that is ahead; the virtual time becomes that tag and the share moves on
    by 1 / (priority + 1)."""
    start = max(shares.get(priority, 0.0), vtime)
    return start, start + 1.0 / (priority + 1)


def _decayed(value: float, since: float, at: float) -> float:
    """Recent processing time ``value`` as of ``since``, as of ``at`` (halved every HALF_LIFE
    seconds; written as the queue computes it, so the floats compare equal)."""
    return value * 0.5 ** ((at - since) / s3q.index.tenants.HALF_LIFE) if at > since else value


@dataclass
class MTenant:
    waiting: int = 0  # queued: visible, delayed or to be retried (not held)
    in_flight: int = 0  # held
    last_sent: float = 0.0  # when its latest new message was enqueued
    busy: float = 0.0  # recent processing time, as of busy_at
    busy_at: float = 0.0


@dataclass
class Model:
    msgs: dict[str, MMsg] = field(default_factory=dict)
    receipts: dict[str, Receipt] = field(default_factory=dict)
    dedup: dict[str, Dedup] = field(default_factory=dict)
    seq: int = 0
    total: int = 0
    shares: dict[int, float] = field(default_factory=dict)  # fair delivery's start tags
    vtime: float = 0.0
    # tenant fairness: tenants with messages queued or held, those flagged noisy, and the
    # queue's totals they are judged against
    tenants: dict[str, MTenant] = field(default_factory=dict)
    flagged: set[str] = field(default_factory=set)
    in_flight: int = 0
    busy: float = 0.0
    busy_at: float = 0.0

    def noisy(self, name: str | None, now: float) -> bool:
        """Flagged, and sent something within the last QUIET_AFTER seconds."""
        if name is None or name not in self.flagged:
            return False
        return now - self.tenants[name].last_sent < s3q.index.tenants.QUIET_AFTER

    def in_flight_of(self, name: str) -> int:
        tenant = self.tenants.get(name)
        return 0 if tenant is None else tenant.in_flight

    def arrived(self, name: str | None, at: float, sent: bool) -> None:
        """A message of ``name`` queued at ``at``: a new one (``sent``) or a redriven one."""
        if name is None:
            return
        tenant = self.tenants.setdefault(name, MTenant())
        if sent:
            if at - tenant.last_sent >= s3q.index.tenants.QUIET_AFTER:
                self.flagged.discard(name)  # silent long enough: quiet again
            tenant.last_sent = max(tenant.last_sent, at)
        tenant.waiting += 1

    def leased(self, mms: list[MMsg]) -> None:
        """A dequeue delivered ``mms``: the queued ones among them are held now (a lapsed lease
        delivered again was held already). Each tenant is judged once, after all of them."""
        counts: dict[str | None, int] = {}
        for mm in mms:
            if not mm.held:
                mm.held = True
                counts[mm.tenant] = counts.get(mm.tenant, 0) + 1
        self.in_flight += sum(counts.values())
        for name, count in counts.items():
            if name is None:
                continue
            tenant = self.tenants[name]
            tenant.waiting -= count
            tenant.in_flight += count
            if not tenant.waiting:
                self.flagged.discard(name)  # drained
            elif (
                tenant.in_flight >= s3q.index.tenants.MIN_IN_FLIGHT
                and tenant.in_flight > s3q.index.tenants.SHARE * self.in_flight
            ):
                if name not in self.flagged:
                    event("flagged by messages in flight")
                self.flagged.add(name)

    def ended(self, mms: list[MMsg], at: float, queued: bool) -> None:
        """Held messages' deliveries ended together (one operation) at ``at`` (0: no outcome,
        their processing time not counted), the messages queued again if ``queued``. The
        processing times add up in order, as the queue adds them, so the floats compare equal;
        each tenant is judged once, after all of them."""
        total = 0.0
        by_tenant: dict[str, list] = {}  # tenant -> [ended, processing time]
        for mm in mms:
            assert mm.held, f"{mm.id} ({mm.state}) ended, but not held"
            mm.held = False
            held = 0.0
            if at and mm.leased_at:
                held = max(0.0, min(at, mm.lease_until) - mm.leased_at)
            total += held
            if mm.tenant is not None:
                entry = by_tenant.setdefault(mm.tenant, [0, 0.0])
                entry[0] += 1
                entry[1] += held
        self.in_flight -= len(mms)
        if total > 0:
            self.busy = _decayed(self.busy, self.busy_at, at) + total
            self.busy_at = max(self.busy_at, at)
        for name, (count, held) in by_tenant.items():
            tenant = self.tenants[name]
            tenant.in_flight -= count
            if queued:
                tenant.waiting += count
            if held > 0:
                tenant.busy = _decayed(tenant.busy, tenant.busy_at, at) + held
                tenant.busy_at = max(tenant.busy_at, at)
                if tenant.busy > s3q.index.tenants.SHARE * self.busy and tenant.waiting:
                    if name not in self.flagged:
                        event("flagged by processing time")
                    self.flagged.add(name)
            if not tenant.waiting:
                self.flagged.discard(name)  # drained
                if not tenant.in_flight:
                    del self.tenants[name]  # forgotten: its processing time and sending too

    def dropped(self, name: str | None) -> None:
        """A queued message of ``name``, not held, left unleased (retired)."""
        if name is None:
            return
        tenant = self.tenants[name]
        tenant.waiting -= 1
        if not tenant.waiting:
            self.flagged.discard(name)  # drained
            if not tenant.in_flight:
                del self.tenants[name]

    def purged(self) -> None:
        self.tenants.clear()
        self.flagged.clear()
        self.in_flight = 0
        for mm in self.msgs.values():
            mm.held = False


class QueueMachine(RuleBasedStateMachine):
    kind = "memory"

    table_budget: int | None = None  # untouched messages whose tables the index may keep
    delivery = "strict"  # the queue's order across priorities
    tenanted = True  # messages carry tenants (else every message's tenant is None)
    share: float | None = None  # tenants.SHARE for the run (None: as it is)
    retention: float | None = None  # the queue's retention (None: none)

    def __init__(self) -> None:
        super().__init__()
        self.budget = s3q.index.state.TABLE_BUDGET
        if self.table_budget is not None:
            s3q.index.state.TABLE_BUDGET = self.table_budget
        self.min_in_flight, self.share_was = (
            s3q.index.tenants.MIN_IN_FLIGHT,
            s3q.index.tenants.SHARE,
        )
        s3q.index.tenants.MIN_IN_FLIGHT = MIN_IN_FLIGHT
        if self.share is not None:
            s3q.index.tenants.SHARE = self.share
        self.clock = FakeClock()
        self.tmp: str | None = None
        if self.kind == "memory":
            self.url = "memory://model-" + uuid.uuid4().hex
        else:
            self.tmp = tempfile.mkdtemp(prefix="s3q-model-")
            self.url = "file://" + self.tmp + "/q"
        self.q = self._open()
        self.m = Model()
        self.buried = 0  # leases that ran out with no attempts left

    def _open(self) -> s3q.Queue:
        kept = {} if self.retention is None else {"retention": self.retention}
        return s3q.open(self.url, clock=self.clock, delivery=self.delivery, **OPTS, **kept)

    def _logs(self) -> list:
        """The AsyncQueue of each log of the queue."""
        return [self.q.async_queue]

    def _dedup_key(self, it: dict) -> object:
        """What a dedup id is unique within: the queue."""
        return it["dedup_id"]

    def teardown(self) -> None:
        try:
            self.q.close()
        finally:
            s3q.index.state.TABLE_BUDGET = self.budget
            s3q.index.tenants.MIN_IN_FLIGHT, s3q.index.tenants.SHARE = (
                self.min_in_flight,
                self.share_was,
            )
            if self.tmp:
                shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------------ model time

    @property
    def now(self) -> float:
        return self.clock.now

    def boundaries(self) -> list[float]:
        out = []
        for mm in self.m.msgs.values():
            if mm.state == "ready":
                out.append(mm.visible_at)
            elif mm.state == "leased":
                out.append(mm.lease_until)
            elif mm.state == "retry":
                out.append(mm.retry_from + RDM)
            elif mm.state == "completed":
                out.append(mm.completed_at + RETENTION)
        out.extend(d.at + WINDOW for d in self.m.dedup.values())
        if self.retention is not None:
            out.extend(
                mm.enqueued_at + self.retention
                for mm in self.m.msgs.values()
                if mm.state in (*LIVE, "dead")
            )
        return out

    def move_clock(self, dt: float) -> None:
        target = self.now + dt
        bounds = self.boundaries()
        while any(abs(target - b) < MARGIN for b in bounds):
            target += 2.5 * MARGIN
        self.clock.set(target)
        self.settle()

    def settle(self) -> None:
        now = self.now
        for mm in self.m.msgs.values():
            if mm.state == "leased" and mm.lease_until <= now:
                self._lease_lapsed(mm)
            elif mm.state == "retry" and now > mm.retry_from + RDM:
                mm.state = "ready"
                mm.visible_at = mm.retry_from + RDM
        if self.retention is not None:
            self._retire(now - self.retention)

    def _retire(self, cutoff: float) -> None:
        """Every message enqueued at or before ``cutoff`` and not finished (dead letters too)
        is removed, whatever its state, by the next call (every invariant calls): its
        receipt is stale, a lease it held ends untimed, a queued one leaves its tenant."""
        for mm in self.m.msgs.values():
            if mm.state not in (*LIVE, "dead") or mm.enqueued_at > cutoff:
                continue
            event(f"retired ({mm.state})")
            if mm.receipt is not None:
                self.m.receipts[mm.receipt].kind = "stale"
            if mm.held:
                self.m.ended([mm], 0.0, queued=False)
            elif mm.state != "dead":
                self.m.dropped(mm.tenant)
            mm.state = "gone"

    def _lease_lapsed(self, mm: MMsg) -> None:
        if mm.receipt is not None:
            self.m.receipts[mm.receipt].kind = "maybe"
        mm.last_error = UNKNOWN
        if mm.attempts >= MAX_ATTEMPTS:
            event("lease lapsed -> dead")
            mm.state = "dead"
            self.buried += 1
            # buried by the next read (every invariant reads), untimed; before that nothing
            # can touch it (a dequeue buries first)
            self.m.ended([mm], 0.0, queued=False)
        else:
            mm.state = "ready"
            mm.visible_at = mm.lease_until

    def uncertain_retries(self) -> list[MMsg]:
        return [mm for mm in self.m.msgs.values() if mm.state == "retry"]

    def resolve_retries(self) -> None:
        pending = self.uncertain_retries()
        if pending:
            latest = max(mm.retry_from for mm in pending) + RDM
            self.move_clock(max(latest - self.now, 0.0) + 3 * MARGIN)
            assert not self.uncertain_retries()

    # ------------------------------------------------------------------ model queries

    def deliverable(
        self, limit: int, per_group: int = 1, tenants: bool = True, only: int | None = None
    ) -> list[MMsg]:
        """What a dequeue of up to ``limit`` delivers, in order: a group's head followed by up
        to ``per_group - 1`` of the messages after it that are deliverable too (of partition
        ``only`` alone, if given)."""
        now = self.now

        def due(mm: MMsg) -> bool:
            return mm.state == "ready" and mm.visible_at <= now

        units: list[list[MMsg]] = []
        groups: dict[str, list[MMsg]] = {}
        for mm in self.m.msgs.values():
            if only is not None and self.partition_of(mm.id) != only:
                continue
            if mm.group is None:
                if due(mm):
                    units.append([mm])
            else:
                groups.setdefault(mm.group, []).append(mm)
        for members in groups.values():
            if any(mm.state == "leased" for mm in members):
                continue
            live = sorted((mm for mm in members if mm.state in LIVE), key=lambda mm: mm.seq)
            if not live or not due(live[0]):
                continue
            unit = list(itertools.takewhile(due, live[:per_group]))
            units.append(unit)
        if self.delivery == "strict":
            if not tenants:  # (what would go without tenant fairness)
                units.sort(key=lambda unit: (-unit[0].priority, unit[0].seq))
                return [mm for unit in units for mm in unit][:limit]
            return self._strict_order(units, limit)[:limit]
        # fair: the priority with the lowest start tag goes next, one unit at a time
        waiting: dict[int, list[list[MMsg]]] = {}
        for unit in sorted(units, key=lambda unit: unit[0].seq, reverse=True):
            waiting.setdefault(unit[0].priority, []).append(unit)
        out: list[MMsg] = []
        vtime, shares = self.m.vtime, dict(self.m.shares)
        while waiting:
            p = min(waiting, key=lambda p: (max(shares.get(p, 0.0), vtime), -p))
            unit = waiting[p].pop()
            if not waiting[p]:
                del waiting[p]
            for mm in unit:
                vtime, shares[mm.priority] = _served(shares, vtime, mm.priority)
            out.extend(unit)
        return out[:limit]

    def _strict_order(self, units: list[list[MMsg]], limit: int) -> list[MMsg]:
        """Strict priority; within the top priority, quiet tenants' units first, by arrival.
        Then noisy ones: the tenant with the fewest in flight (counting what this dequeue
        chose of it so far, group heads only), then the earliest, is served until another has
        as few, or, when others have as few already, an equal part (rounded up) of what is
        left of the ``limit``, each; in arrival order, a group's unit (head and followers)
        ending a turn. A group's unit goes by its head's tenant."""
        now = self.now
        out: list[MMsg] = []
        given: dict[str, int] = {}
        left = sorted(units, key=lambda unit: unit[0].seq)
        while left and len(out) < limit:
            top = max(unit[0].priority for unit in left)
            candidates = [unit for unit in left if unit[0].priority == top]
            quiet = [unit for unit in candidates if not self.m.noisy(unit[0].tenant, now)]
            if quiet:
                unit = quiet[0]
                if unit[0].tenant in self.m.flagged:
                    event("a flagged tenant silent long enough delivered as quiet")
                left.remove(unit)
                out.extend(unit)
                continue
            earliest: dict[str, int] = {}
            for unit in candidates:
                assert unit[0].tenant is not None
                earliest.setdefault(unit[0].tenant, unit[0].seq)
            ranked = sorted(
                (self.m.in_flight_of(name) + given.get(name, 0), seq, name)
                for name, seq in earliest.items()
            )
            wanted = limit - len(out)
            flight, _, name = ranked[0]
            room = wanted
            if len(ranked) > 1:
                room = max(ranked[1][0] - flight, -(-wanted // len(ranked)))
                event("noisy tenants ranked")
            event("noisy tenant delivered")
            taken = 0
            for unit in candidates:
                if taken == min(room, wanted):
                    break
                if unit[0].tenant != name:
                    continue
                left.remove(unit)
                out.extend(unit)
                taken += 1
                if unit[0].group is not None:
                    break  # (a group's followers go with its head: a turn ends)
            given[name] = given.get(name, 0) + taken
        return out

    def partition_of(self, mid: str) -> int:
        return 0

    def allowed_status(self, mm: MMsg) -> set[object]:
        if mm.state == "ready":
            return {S.PENDING if mm.visible_at <= self.now else S.DELAYED}
        if mm.state == "leased":
            return {S.PROCESSING}
        if mm.state == "retry":
            return {S.RETRY, S.PENDING}
        if mm.state == "completed":
            if self.now - mm.completed_at > RETENTION:
                return {S.COMPLETED, None}
            return {S.COMPLETED}
        if mm.state == "dead":
            return {S.DEAD}
        return {None}

    def leased(self) -> list[MMsg]:
        return sorted(
            (mm for mm in self.m.msgs.values() if mm.state == "leased"), key=lambda mm: mm.seq
        )

    def dead(self) -> list[MMsg]:
        return [mm for mm in self.m.msgs.values() if mm.state == "dead"]

    # ------------------------------------------------------------------ rules: enqueue

    item = st.fixed_dictionaries(
        {
            "payload": st.binary(max_size=48),
            "big": st.sampled_from([None] * 12 + [0, 1, 2]),  # index into BIG, else small
            "priority": st.sampled_from([0, 0, 1, 7, 255]),
            "delay": st.sampled_from([0.0, 0.0, 0.0, 2.5, 33.3]),
            "group": st.sampled_from([None, None, None, "g1", "g2"]),
            "dedup_id": st.sampled_from([None, None, None, "d1", "d2"]),
            "attributes": st.sampled_from([None, {"a": "1"}, {"k": "v", "x": ""}]),
            "tenant": st.sampled_from([None, None, "t1", "t2", "t3"]),
        }
    )

    def _tenanted(self, it: dict) -> dict:
        """``it`` as this machine sends it (no tenant unless ``tenanted``)."""
        return it if self.tenanted else {**it, "tenant": None}

    @staticmethod
    def _payload(it: dict) -> bytes:
        return it["payload"] if it["big"] is None else BIG[it["big"]]

    def _model_enqueue(self, it: dict, got_id: str) -> MMsg | None:
        """The new message ``it`` made (None: a duplicate)."""
        now = self.now
        d = it["dedup_id"]
        key = self._dedup_key(it)
        if d is not None:
            entry = self.m.dedup.get(key)
            live = entry is not None and now - entry.at < WINDOW
            if live and (entry.certain or got_id == entry.mid):
                assert got_id == entry.mid, "dedup within window must return the first id"
                return None
        assert got_id not in self.m.msgs, "a new message reused an existing id"
        self.m.seq += 1
        self.m.total += 1
        mm = self.m.msgs[got_id] = MMsg(
            id=got_id,
            payload=self._payload(it),
            priority=it["priority"],
            seq=self.m.seq,
            group=it["group"],
            dedup_id=d,
            attributes=dict(it["attributes"] or {}),
            enqueued_at=now,
            state="ready",
            visible_at=now + it["delay"],
            tenant=it["tenant"],
        )
        self.m.arrived(mm.tenant, now, sent=True)
        if d is not None:
            self.m.dedup[key] = Dedup(got_id, now)
        return mm

    @rule(it=item)
    def enqueue(self, it: dict) -> None:
        it = self._tenanted(it)
        kw = {k: v for k, v in it.items() if k not in ("payload", "big") and v is not None}
        got = self.q.enqueue(self._payload(it), **kw)
        self._model_enqueue(it, got)

    @rule(items=st.lists(item, min_size=1, max_size=5), plain=st.booleans())
    def enqueue_batch(self, items: list[dict], plain: bool) -> None:
        self._enqueue_batch([self._tenanted(it) for it in items], plain)

    @rule(
        tenant=st.sampled_from(["t1", "t2", "t3"]),
        count=st.integers(3, 8),
        priority=st.sampled_from([0, 0, 7]),
        take=st.sampled_from([0, 2, 3]),
    )
    def burst(self, tenant: str, count: int, priority: int, take: int) -> None:
        """A backlog of one tenant's messages, some of them delivered at once: what makes a
        tenant noisy (random batches rarely do)."""
        base = {"big": None, "delay": 0.0, "group": None, "dedup_id": None, "attributes": None}
        items = [
            {**base, "payload": b"%s:%d" % (tenant.encode(), i), "priority": priority}
            for i in range(count)
        ]
        self._enqueue_batch([self._tenanted({**it, "tenant": tenant}) for it in items], False)
        if take:
            self._dequeue(take, None)

    def _enqueue_batch(self, items: list[dict], plain: bool) -> None:
        if plain:
            items = [
                {
                    **it,
                    "priority": 0,
                    "delay": 0.0,
                    "group": None,
                    "dedup_id": None,
                    "attributes": None,
                    "tenant": None,
                }
                for it in items
            ]
            ids = self.q.enqueue_batch([self._payload(it) for it in items])
        else:
            ids = self.q.enqueue_batch(
                [
                    {
                        **{k: v for k, v in it.items() if k != "big" and v is not None},
                        "payload": self._payload(it),
                    }
                    for it in items
                ]
            )
        self._model_batch(items, ids)

    def _model_batch(self, items: list[dict], ids: list[str]) -> None:
        """The batch of ``items`` enqueued as ``ids`` (one call: a batch in each partition)."""
        assert len(ids) == len(items)
        made = [self._model_enqueue(it, got) for it, got in zip(items, ids, strict=True)]
        fresh = [mm for mm in made if mm is not None]
        # A batch with no group arrives ordered by priority, then tenant (no tenant first,
        # then by name), the order within each kept: a run each (admission.runs_together).
        # Only the order of one batch's tenants changes (docs/api.md has "arrival order").
        # (A partitioned queue's batch is a batch in each partition.)
        by_partition: dict[int, list[MMsg]] = {}
        for mm in fresh:
            by_partition.setdefault(self.partition_of(mm.id), []).append(mm)
        for some in by_partition.values():
            if not any(mm.group is not None for mm in some):
                seqs = sorted(mm.seq for mm in some)
                ordered = sorted(some, key=lambda mm: (-mm.priority, mm.tenant or ""))
                for mm, seq in zip(ordered, seqs, strict=True):
                    mm.seq = seq

    # ------------------------------------------------------------------ rules: consume

    @rule(
        k=st.sampled_from([1, 1, 2, 5, 50]),
        vt=st.sampled_from([None, 5.5, 45.5]),
        per_group=st.sampled_from([1, 1, 3]),
    )
    def dequeue(self, k: int, vt: float | None, per_group: int) -> None:
        self._dequeue(k, vt, per_group)

    @rule(
        k=st.sampled_from([1, 2, 5, 50]),
        vt=st.sampled_from([None, 5.5]),
        per_group=st.sampled_from([1, 3]),
    )
    def dequeue_pages(self, k: int, vt: float | None, per_group: int) -> None:
        """As a broker dequeues: stretches as pages, made into messages as the client does."""
        self._dequeue(k, vt, per_group, paged=True)

    @rule(error=st.sampled_from(["boom", "timeout"]))
    def dequeue_then_fail(self, error: str) -> None:
        """Drives messages towards the dead-letter list, which random rules rarely reach."""
        for mm in self._dequeue(1, None):
            self.q.fail(mm.message, error)
            self._failed(mm, error)

    def _dequeue(
        self, k: int, vt: float | None, per_group: int = 1, paged: bool = False
    ) -> list[MMsg]:
        self.resolve_retries()
        expected = self.deliverable(k, per_group)
        if self.delivery == "strict":
            plain = sorted(self.deliverable(k, per_group, tenants=False), key=lambda mm: mm.seq)
            if plain != sorted(expected, key=lambda mm: mm.seq):
                event("quiet tenants went ahead")
        if paged:
            answer = self.q.dequeue_pages(k, visibility_timeout=vt, per_group=per_group)
            event(f"dequeue answered {min(len(answer.pages), 2)}+ pages")
            got = pages.merged(answer)
        else:
            got = self.q.dequeue(max_messages=k, visibility_timeout=vt, per_group=per_group)
        event(f"dequeue delivered {min(len(got), 2)}+")
        return self._took(got, self.check_order(got, expected, k, per_group), vt)

    def _took(self, got: list[s3q.Message], expected: list[MMsg], vt: float | None) -> list[MMsg]:
        """A dequeue delivered ``got``, the model's ``expected`` in its order: each as the
        model has it, with an attempt more and a receipt never seen; leased now."""
        for mm in expected:  # the leases' share of deliveries (folded whatever the order)
            self.m.vtime, self.m.shares[mm.priority] = _served(
                self.m.shares, self.m.vtime, mm.priority
            )
        for m, mm in zip(got, expected, strict=True):
            _same_payload(m.payload, mm)
            assert m.priority == mm.priority
            assert m.group == mm.group
            assert m.dedup_id == mm.dedup_id
            assert m.attributes == mm.attributes
            assert m.tenant == mm.tenant, (m.tenant, mm.tenant)
            assert m.enqueued_at == pytest.approx(mm.enqueued_at, abs=1e-3)
            assert m.attempts == mm.attempts + 1
            if mm.last_error is not UNKNOWN:
                assert m.last_error == mm.last_error
            assert isinstance(m.receipt, str) and m.receipt not in self.m.receipts
            if mm.receipt is not None:
                self.m.receipts[mm.receipt].kind = "stale"
            mm.attempts += 1
            mm.state = "leased"
            mm.leased_at = self.now
            mm.lease_until = self.now + (vt if vt is not None else VT)
            mm.receipt = m.receipt
            mm.message = m
            self.m.receipts[m.receipt] = Receipt(mm.id, "current")
        self.m.leased(expected)
        return expected

    def check_order(
        self, got: list[s3q.Message], expected: list[MMsg], k: int, per_group: int = 1
    ) -> list[MMsg]:
        """That ``got`` (a dequeue's or a peek's) is what the model ``expected``; the model's
        messages in the order got."""
        assert [m.id for m in got] == [mm.id for mm in expected], (
            f"delivered {[m.payload[:20] for m in got]}, model expected "
            f"{[mm.payload[:20] for mm in expected]}"
        )
        return expected

    def _pick_leased(self, data) -> tuple[MMsg, object]:
        mm = data.draw(st.sampled_from(self.leased()), label="leased message")
        assert mm.receipt is not None
        as_message = data.draw(st.booleans(), label="pass Message object")
        if as_message:
            assert mm.message is not None and mm.message.receipt == mm.receipt
            return mm, mm.message
        return mm, mm.receipt

    @precondition(lambda self: self.leased())
    @rule(data=st.data())
    def complete(self, data) -> None:
        mm, ref = self._pick_leased(data)
        self.q.complete(ref)
        self._completed([mm])

    @precondition(lambda self: len(self.leased()) >= 2)
    @rule(data=st.data())
    def complete_batch(self, data) -> None:
        chosen = data.draw(
            st.lists(st.sampled_from(self.leased()), min_size=2, max_size=4, unique_by=id)
        )
        self.q.complete_batch([mm.receipt for mm in chosen])
        self._completed(chosen)

    def _completed(self, mms: list[MMsg]) -> None:
        """``mms`` completed by one operation."""
        self.m.ended(mms, self.now, queued=False)
        for mm in mms:
            if mm.receipt is not None:
                self.m.receipts[mm.receipt].kind = "stale"
            mm.state = "completed"
            mm.completed_at = self.now

    @precondition(lambda self: self.leased())
    @rule(data=st.data(), error=st.sampled_from(["boom", "timeout", "x" * 40]))
    def fail(self, data, error: str) -> None:
        mm, ref = self._pick_leased(data)
        self.q.fail(ref, error)
        self._failed(mm, error)

    def _failed(self, mm: MMsg, error: str) -> None:
        if mm.receipt is not None:
            self.m.receipts[mm.receipt].kind = "stale"
        mm.last_error = error
        self.m.ended([mm], self.now, queued=mm.attempts < MAX_ATTEMPTS)
        if mm.attempts >= MAX_ATTEMPTS:
            event("fail -> dead")
            mm.state = "dead"
        else:
            mm.state = "retry"
            mm.retry_from = self.now

    @precondition(lambda self: self.leased())
    @rule(data=st.data())
    def release(self, data) -> None:
        """Give deliveries back unprocessed: visible at once, the delivery uncounted."""
        chosen = data.draw(
            st.lists(st.sampled_from(self.leased()), min_size=1, max_size=3, unique_by=id),
            label="released",
        )
        as_messages = data.draw(st.booleans(), label="pass Message objects")
        self.q.release([mm.message if as_messages else mm.receipt for mm in chosen])
        self._released(chosen)

    def _released(self, mms: list[MMsg]) -> None:
        """``mms`` given back by one operation."""
        self.m.ended(mms, 0.0, queued=True)
        for mm in mms:
            if mm.receipt is not None:
                self.m.receipts[mm.receipt].kind = "stale"
            mm.state = "ready"
            mm.attempts -= 1
            mm.visible_at = min(mm.visible_at, self.now)

    @precondition(lambda self: self.leased())
    @rule(data=st.data(), seconds=st.sampled_from([0.0, 2.5, 15.5, 60.5]))
    def extend(self, data, seconds: float) -> None:
        mm, ref = self._pick_leased(data)
        self.q.extend(ref, seconds)
        mm.lease_until = self.now + seconds
        if seconds == 0:
            self._lease_lapsed(mm)
            mm.visible_at = self.now

    @precondition(lambda self: self.m.receipts)
    @rule(data=st.data(), op=st.sampled_from(["complete", "fail", "extend", "release"]))
    def use_old_receipt(self, data, op: str) -> None:
        # in the order they were given: a receipt names its writer's token, new at each open
        # (random), so sorted they would come in another order each run
        olds = [r for r, v in self.m.receipts.items() if v.kind != "current"]
        if not olds:
            return
        receipt = data.draw(st.sampled_from(olds), label="old receipt")
        info = self.m.receipts[receipt]
        mm = self.m.msgs[info.mid]
        try:
            if op == "complete":
                self.q.complete(receipt)
            elif op == "fail":
                self.q.fail(receipt, "late")
            elif op == "release":
                self.q.release(receipt)
            else:
                self.q.extend(receipt, 30.5)
        except s3q.ReceiptExpired:
            # a "maybe" receipt may be refused by one operation and accepted by another (say
            # complete after the lease lapsed, but not extend): it stays "maybe"
            event(f"old receipt ({info.kind}) rejected")
            return
        except s3q.MessageNotFound:
            assert mm.state == "gone", "MessageNotFound for a message that exists"
            return
        assert info.kind == "maybe", f"a stale receipt was accepted by {op}"
        event("expired, not redelivered receipt accepted")
        assert mm.state != "gone", f"{op} accepted a receipt of a removed message"
        # accepted: the implementation treats an expired, not yet redelivered lease as still
        # held by this receipt; follow it
        if op == "complete":
            self._completed([mm])
        elif op == "fail":
            self._failed(mm, "late")
        elif op == "release":
            self._released([mm])
        else:
            mm.state = "leased"
            mm.lease_until = self.now + 30.5
            mm.receipt = receipt
            info.kind = "current"

    # ------------------------------------------------------------------ rules: admin

    @rule(dt=st.sampled_from([0.3, 1.7, 4.1, 12.9, 25.3, 61.7, 150.1, 260.9]))
    def advance(self, dt: float) -> None:
        self.move_clock(dt)

    @precondition(lambda self: self.dead())
    @rule(data=st.data(), everything=st.booleans())
    def redrive(self, data, everything: bool) -> None:
        # Where a redriven message goes in line is not in the contract; the queue puts it at the
        # back (a fresh arrival, as SQS redrive does). Several redriven at once keep the order of
        # the dead-letter list, which the model takes from dead_letters().
        listed = [m.id for m in self.q.dead_letters(limit=10_000)]
        assert sorted(listed) == sorted(mm.id for mm in self.dead())
        if everything:
            chosen = [self.m.msgs[mid] for mid in listed]
            n = self.q.redrive()
        else:
            subset = data.draw(
                st.lists(st.sampled_from(self.dead()), min_size=1, unique_by=id), label="ids"
            )
            chosen = sorted(subset, key=lambda mm: listed.index(mm.id))
            n = self.q.redrive(ids=[mm.id for mm in chosen])
        assert n == len(chosen)
        event(f"redrive {min(n, 2)}+")
        for mm in chosen:
            self.m.seq += 1
            mm.seq = self.m.seq
            mm.state = "ready"
            mm.attempts = 0
            mm.visible_at = self.now
            mm.last_error = UNKNOWN
            self.m.arrived(mm.tenant, self.now, sent=False)

    @rule(roll=st.integers(0, 5))
    def purge(self, roll: int) -> None:
        if roll:  # purging wipes the state the other rules build up: only one time in six
            return
        expected = [mm for mm in self.m.msgs.values() if mm.state in (*LIVE, "dead")]
        assert self.q.purge() == len(expected)
        for mm in expected:
            mm.state = "gone"
        self.m.purged()
        for entry in self.m.dedup.values():
            if self.m.msgs[entry.mid].state == "gone":
                entry.certain = False

    @rule()
    def cleanup(self) -> None:
        now = self.now
        old = [
            mm
            for mm in self.m.msgs.values()
            if mm.state == "completed" and now - mm.completed_at > RETENTION
        ]
        expired = [d for d, e in self.m.dedup.items() if now - e.at >= WINDOW]
        n = self.q.cleanup()
        # the queue may also prune on its own (say when it checkpoints), so fewer is fine
        assert 0 <= n <= len(old) + len(expired), (n, len(old), len(expired))
        for mm in old:
            mm.state = "gone"
        for d in expired:
            del self.m.dedup[d]

    @rule(compact=st.booleans(), killed=st.booleans())
    def reopen(self, compact: bool, killed: bool) -> None:
        if compact:  # reopened from a checkpoint (what it keeps of tenants too)
            self.q.compact()
        if killed:  # as if killed: no checkpoint at close, the log since the last one replayed
            for queue in self._logs():
                queue._engine.commit.failure = s3q.StoreError("killed")
        self.q.close()
        self.q = self._open()

    @rule(limit=st.sampled_from([1, 3, 50]))
    def peek(self, limit: int) -> None:
        """What dequeue would deliver next, in its order, leasing nothing."""
        self.resolve_retries()
        got = self.q.peek(limit)
        self.check_order(got, self.deliverable(limit), limit)
        for m in got:
            mm = self.m.msgs[m.id]
            assert m.receipt is None
            assert (m.tenant, m.priority, m.group) == (mm.tenant, mm.priority, mm.group)
            _same_payload(m.payload, mm)

    @rule()
    def check_dead_letters(self) -> None:
        got = self.q.dead_letters(limit=10_000)
        assert sorted(m.id for m in got) == sorted(mm.id for mm in self.dead())
        for m in got:
            mm = self.m.msgs[m.id]
            _same_payload(m.payload, mm)
            assert m.attempts == mm.attempts
            if mm.last_error is not UNKNOWN:
                assert m.last_error == mm.last_error

    # ------------------------------------------------------------------ invariants

    @invariant()
    def statuses_match(self) -> None:
        for mm in self.m.msgs.values():
            try:
                got: object = self.q.status(mm.id)
            except s3q.MessageNotFound:
                got = None
            allowed = self.allowed_status(mm)
            assert got in allowed, (
                f"{mm.payload[:20]!r} ({mm.state}): status {got}, model {allowed}"
            )

    @invariant()
    def a_checkpoint_restores_what_delivers_next(self) -> None:
        """A checkpoint of each log taken now restores an index that would deliver what the
        live one would, in its order (a reopen from it must not change what comes next)."""

        async def compare() -> None:
            for queue in self._logs():
                engine = queue._engine
                state, config = engine.state, engine.config
                data = checkpoint.encode(checkpoint.Checkpoint(0, "w", 0.0, checkpoint.take(state)))
                restored = checkpoint.restore(checkpoint.decode(bytes(data), "model").snapshot)
                now, attempts, fair = self.now, config.max_attempts, self.delivery == "fair"
                for index in (state, restored):  # (runs' tables read back, as a dequeue does)
                    while wanted := index.wanted(1000, fair):
                        await fill_tables(engine.store, index, wanted)
                for per_group in (1, 3):
                    live = [r.id for r in state.peek(now, 1000, attempts, fair, per_group)]
                    again = [r.id for r in restored.peek(now, 1000, attempts, fair, per_group)]
                    assert again == live, (per_group, live, again)

        self.q._run(compare())

    @invariant()
    def stats_match(self) -> None:
        s = self.q.stats()
        now = self.now
        count = {k: 0 for k in ("pending", "delayed", "processing", "retry", "dead")}
        completed_min = completed_max = 0
        for mm in self.m.msgs.values():
            if mm.state == "ready":
                count["pending" if mm.visible_at <= now else "delayed"] += 1
            elif mm.state == "leased":
                count["processing"] += 1
            elif mm.state == "retry":
                count["retry"] += 1
            elif mm.state == "dead":
                count["dead"] += 1
            elif mm.state == "completed":
                completed_max += 1
                if now - mm.completed_at <= RETENTION:
                    completed_min += 1
        assert s.pending + s.retry == count["pending"] + count["retry"], s
        assert s.retry <= count["retry"], s
        assert (s.delayed, s.processing, s.dead) == (
            count["delayed"],
            count["processing"],
            count["dead"],
        ), s
        assert completed_min <= s.completed <= completed_max, s
        assert s.total_enqueued == self.m.total, s
        self.check_tenant_counts()
        noisy = sorted(name for name in self.m.flagged if self.m.noisy(name, now))
        event(f"noisy tenants {min(len(noisy), 2)}+")
        assert s.noisy_tenants == len(noisy), (s.noisy_tenants, noisy, self.m.tenants)
        self.check_quiet_counts(s, set(noisy))

    def check_quiet_counts(self, s: s3q.QueueStats, noisy: set[str]) -> None:
        """The quiet tenants' messages (and those with no tenant): visible, in flight, delayed
        (or waiting to be retried) and the age of the oldest visible. Open: whether a lapsed
        lease not delivered again is in flight or visible (either, all alike); and a message
        to be retried may be visible or not (the sums are exact)."""
        now = self.now
        visible = in_flight = lapsed = delayed = retrying = 0
        oldest = now
        for mm in self.m.msgs.values():
            if mm.tenant in noisy:
                continue
            if mm.held:
                if mm.lease_until > now:
                    in_flight += 1
                else:
                    lapsed += 1
            elif mm.state == "retry":
                retrying += 1
            elif mm.state == "ready":
                if mm.visible_at > now:
                    delayed += 1
                else:
                    visible += 1
                    oldest = min(oldest, mm.enqueued_at)
        got = (s.quiet_visible, s.quiet_in_flight, s.quiet_delayed)
        want = (visible, in_flight, lapsed, delayed, retrying)
        assert sum(got) == sum(want), (got, want)
        assert s.quiet_in_flight in (in_flight, in_flight + lapsed), (got, want)
        assert delayed <= s.quiet_delayed <= delayed + retrying, (got, want)
        if not retrying and not lapsed:
            assert s.quiet_oldest_age == pytest.approx(now - oldest, abs=1e-3), s

    def check_tenant_counts(self) -> None:
        """The model's own tenant counts agree with its messages."""
        waiting: dict[str, int] = {}
        in_flight: dict[str, int] = {}
        for mm in self.m.msgs.values():
            assert mm.held == (mm.state == "leased" or (mm.state == "ready" and mm.held)), mm
            if mm.tenant is None:
                continue
            if mm.held:
                in_flight[mm.tenant] = in_flight.get(mm.tenant, 0) + 1
            elif mm.state in LIVE:
                waiting[mm.tenant] = waiting.get(mm.tenant, 0) + 1
        assert self.m.in_flight == sum(mm.held for mm in self.m.msgs.values())
        for name in {*waiting, *in_flight, *self.m.tenants}:
            tenant = self.m.tenants[name]
            assert (tenant.waiting, tenant.in_flight) == (
                waiting.get(name, 0),
                in_flight.get(name, 0),
            ), name
        assert all(self.m.tenants[name].waiting for name in self.m.flagged)


# Shrinking a long failing sequence can take minutes; it is off unless S3Q_SHRINK=1, so a failure
# costs seconds and is reported unshrunk (set S3Q_SHRINK=1 to get a minimal sequence).
PHASES = [Phase.explicit, Phase.reuse, Phase.generate]
if os.environ.get("S3Q_SHRINK"):
    PHASES += [Phase.shrink, Phase.explain]

SETTINGS = settings(
    max_examples=int(os.environ.get("S3Q_MODEL_EXAMPLES", "100")),
    stateful_step_count=40,
    deadline=None,
    phases=PHASES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class MemoryQueueMachine(QueueMachine):
    kind = "memory"


class FileQueueMachine(QueueMachine):
    """With a larger share, so that a tenant's share of what is in flight and of the
    processing time matters with the few messages of a run (at 10 % it rarely does)."""

    kind = "file"
    share = 0.4


class TablesReadBackMachine(QueueMachine):
    """Runs drop their tables at once (but for a handful), so deliveries, peeks, status,
    replayed leases and checkpoints read them back from the log."""

    kind = "file"
    table_budget = 3


TestModelMemory = MemoryQueueMachine.TestCase
TestModelMemory.settings = SETTINGS
TestModelFile = FileQueueMachine.TestCase
TestModelFile.settings = SETTINGS
TestModelTablesReadBack = TablesReadBackMachine.TestCase
TestModelTablesReadBack.settings = SETTINGS


class FairMachine(QueueMachine):
    """Priorities share deliveries (``delivery="fair"``), runs read back from the log."""

    kind = "file"
    table_budget = 3
    delivery = "fair"
    tenanted = False  # (fair delivery with tenants is not modelled)


TestModelFair = FairMachine.TestCase
TestModelFair.settings = SETTINGS


class RetentionMachine(QueueMachine):
    """A queue with ``retention``: messages enqueued that long ago leave whatever their state
    (pending, delayed, leased, lapsed, retrying, dead), their receipts stale, their tenants'
    counts and groups moving on; runs read back from the log, so some retire untabled."""

    kind = "file"
    table_budget = 3
    retention = 30.0


TestModelRetention = RetentionMachine.TestCase
TestModelRetention.settings = SETTINGS


class Together:
    """What holds the answers of the partitions led "elsewhere" (:class:`Elsewhere`) of one
    dequeue: each answer with messages waits until ``parties`` partitions have one, and then
    all of them end in the same turn of the event loop, as answers a broker's busy event loop
    takes in at once do (there it may happen; here it always does). Also whether each of the
    ``size`` partitions has a long poll under way (``polling``)."""

    def __init__(self, parties: int, size: int) -> None:
        self.parties, self.size = parties, size
        self.held = 0
        self.open: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.polled: set[int] = set()
        self.polling = asyncio.Event()

    def poll(self, index: int) -> None:
        """Partition ``index`` was asked with a wait (a long poll)."""
        self.polled.add(index)
        if len(self.polled) == self.size:
            self.polling.set()

    async def answered(self) -> None:
        """A partition answered messages: wait for the others (every waiter wakes at once)."""
        self.held += 1
        if self.held >= self.parties and not self.open.done():
            self.open.set_result(None)
        await self.open


class Elsewhere:
    """A partition as a partitioned queue reaches it when another broker leads it: the queue's
    surface alone (not led here: no waiting on its writer; no pages; not followed), so a
    dequeue asks it at once beside the others, or long polls it, for the whole
    ``max_messages`` (``s3q.partitions.dequeue``). Its answers come ``Together``."""

    def __init__(self, index: int, queue: s3q.AsyncQueue, together: Together) -> None:
        self._index, self._queue, self._together = index, queue, together

    async def dequeue(
        self,
        max_messages: int = 1,
        visibility_timeout: float | None = None,
        wait: float = 0.0,
        **kwargs: Any,
    ) -> list[s3q.Message]:
        if wait > 0:
            self._together.poll(self._index)
        got = await self._queue.dequeue(max_messages, visibility_timeout, wait, **kwargs)
        if got:
            await self._together.answered()
        return got

    def __getattr__(self, name: str) -> Any:
        if name in ("dequeue_pages", "changed", "here", "best_priority", "writing_since"):
            raise AttributeError(name)  # (not led here, not paged, not followed)
        return getattr(self._queue, name)


class PartitionedMachine(QueueMachine):
    """A queue of three partitions (``s3q.partitions``), as one queue: a group keeps its order
    and a dedup id deduplicates within its partition (its group's, if it has one), and each
    partition delivers in the order of a queue; across partitions no order is promised, and
    a dequeue takes as many as any partition has. (Tenants are fair within a partition, which
    the model does not follow: they are left out.) Also dequeues as a broker leading none of
    the partitions makes them (``dequeue_elsewhere``): the partitions' answers, coming in
    together, cut to ``max_messages``, the rest given back at once."""

    kind = "file"
    tenanted = False
    partitions = 3

    def _open(self) -> s3q.Queue:
        queue = s3q.open(
            self.url,
            clock=self.clock,
            delivery=self.delivery,
            partitions=self.partitions,
            **OPTS,
        )
        self.queue_ids = queue.stats().queue_id.split(",")
        assert len(self.queue_ids) == self.partitions
        return queue

    def _logs(self) -> list:
        return [p.queue for p in self.q.async_queue.partitions]

    def _dedup_key(self, it: dict) -> object:
        key = it["group"] if it["group"] is not None else it["dedup_id"]
        where = None if key is None else s3q.partitions.placement.home(key, self.partitions)
        return where, it["dedup_id"]

    def partition_of(self, mid: str) -> int:
        return self.queue_ids.index(mid[:8])

    def check_order(
        self, got: list[s3q.Message], expected: list[MMsg], k: int, per_group: int = 1
    ) -> list[MMsg]:
        """Each partition's messages in ``got`` come first in its order; as many as ``k``, or
        every one the partitions have; the first of the highest priority any partition has
        (every partition is led here: a dequeue starts with the partition whose best message
        is the best)."""
        each = [self.deliverable(10**9, per_group, only=p) for p in range(self.partitions)]
        tops = [ready[0].priority for ready in each if ready]
        if got and self.delivery == "strict":
            assert got[0].priority == max(tops), (got[0].priority, tops)
            if len(set(tops)) > 1:
                event("partitions' best priorities differ")
        for p, ready in enumerate(each):
            mine = [m.id for m in got if self.partition_of(m.id) == p]
            assert mine == [mm.id for mm in ready[: len(mine)]], (
                p,
                [(m.id[8:], m.priority) for m in got],
                [(mm.id[8:], mm.priority, mm.seq, mm.group) for mm in ready],
            )
        assert len(got) == min(k, sum(map(len, each))), (len(got), k, [len(e) for e in each])
        if len({self.partition_of(m.id) for m in got}) > 1:
            event("a dequeue took from several partitions")
        return [self.m.msgs[m.id] for m in got]

    # ------------------------------------------------------------------ partitions elsewhere

    wake_items = st.lists(  # a batch into each partition: what wakes a long poll in all
        st.lists(
            st.tuples(st.binary(max_size=8), st.sampled_from([0, 0, 7])), min_size=1, max_size=4
        ),
        min_size=3,
        max_size=3,
    )

    @rule(
        k=st.sampled_from([1, 2, 2, 5, 50]),
        vt=st.sampled_from([None, 5.5]),
        per_group=st.sampled_from([1, 3]),
        wait=st.booleans(),
        batches=wake_items,
        again=st.booleans(),
    )
    def dequeue_elsewhere(
        self,
        k: int,
        vt: float | None,
        per_group: int,
        wait: bool,
        batches: list[list[tuple[bytes, int]]],
        again: bool,
    ) -> None:
        """A dequeue of the queue through a broker leading none of its partitions
        (:class:`Elsewhere`): each partition asked for ``k`` at once, or long polled for
        ``k``, their answers coming in together. The answer holds at most ``k`` messages (a
        whole answer of some partitions, then the start of one), what it cut given back at
        once: visible again in its place, its attempt not counted, nothing left leased.
        With nothing to deliver, a long poll woken by a batch into every partition; with
        something in every partition, a long poll (``wait``) answered by what is there; else
        a dequeue answered by what is there."""
        self.resolve_retries()
        n = self.partitions
        answered = {p: self.deliverable(k, per_group, only=p) for p in range(n)}
        woken = not any(answered.values())
        waits = woken or (wait and all(answered.values()))
        parties = n if woken else sum(1 for ready in answered.values() if ready)
        inner = [part.queue for part in self.q.async_queue.partitions]
        items = [
            [{"payload": payload, "priority": priority} for payload, priority in batch]
            for batch in batches
        ]

        async def take() -> tuple[list[s3q.Message], list[list[str]]]:
            async with asyncio.timeout(20):  # (a woken long poll answers at once)
                together = Together(parties, n)
                far = s3q.PartitionedQueue(
                    self.url, [Elsewhere(p, q, together) for p, q in enumerate(inner)]
                )  # (not closed: that would close the partitions, which are the machine's)
                poll = asyncio.ensure_future(
                    far.dequeue(k, vt, 10.0 if waits else 0.0, per_group=per_group)
                )
                made = []
                if woken:  # once a long poll is under way in every partition (or it failed)
                    polling = asyncio.ensure_future(together.polling.wait())
                    await asyncio.wait([poll, polling], return_when=asyncio.FIRST_COMPLETED)
                    polling.cancel()
                    assert not poll.done(), f"no long poll: {poll.exception() or poll.result()}"
                    made = [await q.enqueue_batch(it) for q, it in zip(inner, items, strict=True)]
                got = await poll
                # nothing to give back later: every partition had answered when it answered
                assert not far._dequeues._ending, "something of the answer is released later"
                return got, made

        got, made = self.q._run(take())
        if woken:
            base = {"big": None, "delay": 0.0, "group": None, "dedup_id": None}
            for batch, ids in zip(items, made, strict=True):
                whole = [{**base, **it, "attributes": None, "tenant": None} for it in batch]
                self._model_batch(whole, ids)
            answered = {p: self.deliverable(k, per_group, only=p) for p in range(n)}
        offered = sum(map(len, answered.values()))
        path = "woken" if woken else "waits" if waits else "now"
        event(f"dequeue elsewhere ({path})")
        if offered > k:
            event(f"dequeue elsewhere ({path}): answers cut")
        self._took(got, self._cut_as_promised(got, answered, k), vt)
        if again:  # what was cut comes next, in its place, its attempt not counted
            self._dequeue(50, None)

    def _cut_as_promised(
        self, got: list[s3q.Message], answered: dict[int, list[MMsg]], k: int
    ) -> list[MMsg]:
        """That ``got`` is the answers of the partitions (``answered``: what each had) joined
        in some order, cut to ``k``; the model's messages in the order got."""
        assert len(got) <= k, f"a dequeue of at most {k} messages answered {len(got)}"
        offered = sum(map(len, answered.values()))
        assert len(got) == min(k, offered), (len(got), k, offered)
        blocks = [
            (p, [m.id for m in ms])
            for p, ms in itertools.groupby(got, key=lambda m: self.partition_of(m.id))
        ]
        assert len({p for p, _ in blocks}) == len(blocks), ("a partition's answer split", blocks)
        for i, (p, mids) in enumerate(blocks):
            whole = [mm.id for mm in answered[p]]
            assert mids == whole[: len(mids)], (p, mids, whole)
            assert i == len(blocks) - 1 or mids == whole, ("cut but the last", p, mids, whole)
        return [self.m.msgs[m.id] for m in got]


TestModelPartitioned = PartitionedMachine.TestCase
TestModelPartitioned.settings = SETTINGS
