"""Tenant fairness: which tenants are noisy, folded from the log like the rest of the index.

A message's ``tenant`` names who it is for (SQS calls it the ``MessageGroupId`` of a message on
a fair queue); a message without one is a tenant of its own and always quiet. A tenant turns
noisy when it holds more than ``SHARE`` of the queue's messages in flight and at least
``MIN_IN_FLIGHT`` of them, or more than ``SHARE`` of its recent processing time (time between
a delivery and its outcome, decaying with a half-life of ``HALF_LIFE`` seconds). It stays noisy
until its backlog is drained or it has sent nothing for ``QUIET_AFTER`` seconds. Delivery
prefers quiet tenants' messages (``state``); noisy ones are never dropped, only later.

Everything here is a function of the operations folded and the times they carry: a reopened
queue knows the same noisy tenants.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import msgspec

from .records import LEASED, QUEUED, Record
from .stretches import Stretch

SHARE = 0.1  # of in-flight messages or of recent processing time
MIN_IN_FLIGHT = 30
QUIET_AFTER = 300.0  # seconds without sending after which a noisy tenant is quiet again
HALF_LIFE = 60.0  # seconds: how fast past processing time stops counting


class TenantSnap(msgspec.Struct, array_like=True):
    """What a checkpoint keeps of a tenant (its counts are rebuilt from the messages)."""

    name: str
    last_sent: float
    busy: float
    busy_at: float
    noisy: bool


class Tenant:
    """One tenant's counts."""

    __slots__ = ("busy", "busy_at", "in_flight", "last_sent", "waiting")

    def __init__(self) -> None:
        self.waiting = 0  # queued: visible, delayed or waiting to be retried
        self.in_flight = 0  # leased
        self.last_sent = 0.0  # when its latest message was enqueued
        self.busy = 0.0  # recent processing time, as of ``busy_at``
        self.busy_at = 0.0


class QuietCounts(NamedTuple):
    """What ``Tenants.quiet_counts`` finds."""

    noisy_tenants: int
    visible: int
    in_flight: int
    delayed: int
    oldest_age: float


class Ended:
    """Deliveries (and queued messages) that end together, gathered for ``Tenants.ended``."""

    __slots__ = ("by_tenant", "held", "leased")

    def __init__(self) -> None:
        self.leased = 0  # deliveries
        self.held = 0.0  # their processing time
        self.by_tenant: dict[str, list[Any]] = {}  # tenant -> [deliveries, held, queued gone]


def _decayed(value: float, since: float, at: float) -> float:
    return value * 0.5 ** ((at - since) / HALF_LIFE) if at > since else value


class Tenants:
    """Every tenant with messages (or noisy), and the queue's totals they are judged against."""

    def __init__(self) -> None:
        self.by_name: dict[str, Tenant] = {}
        self.flagged: set[str] = set()  # noisy (unless silent for QUIET_AFTER: ``noisy``)
        self.in_flight = 0  # every leased message of the queue, tenants' or not
        self.busy = 0.0  # the queue's recent processing time, as of ``busy_at``
        self.busy_at = 0.0

    def noisy(self, name: str | None, now: float) -> bool:
        """Whether ``name``'s messages wait behind quiet ones at ``now``."""
        if name is None or name not in self.flagged:
            return False
        return now - self.by_name[name].last_sent < QUIET_AFTER

    def noisy_names(self, now: float) -> set[str]:
        """The tenants noisy at ``now``."""
        return {name for name in self.flagged if self.noisy(name, now)}

    def in_flight_of(self, name: str) -> int:
        tenant = self.by_name.get(name)
        return 0 if tenant is None else tenant.in_flight

    # -- folding ---------------------------------------------------------------------------------

    def arrived(self, name: str | None, count: int, at: float, sent: bool = True) -> None:
        """``count`` messages of ``name`` queued at ``at`` (``sent``: new ones, not redriven)."""
        if name is None:
            return
        tenant = self._named(name)
        if sent:
            if at - tenant.last_sent >= QUIET_AFTER:
                self.flagged.discard(name)
            tenant.last_sent = max(tenant.last_sent, at)
        tenant.waiting += count

    def leased(self, counts: dict[str | None, int]) -> None:
        """Queued messages were delivered (one dequeue): ``counts`` of them by tenant. Each
        tenant delivered to is judged once they all are."""
        self.in_flight += sum(counts.values())
        for name, count in counts.items():
            if name is None:
                continue
            tenant = self.by_name[name]
            tenant.waiting -= count
            tenant.in_flight += count
            if not tenant.waiting:
                self.flagged.discard(name)  # drained
            elif tenant.in_flight >= MIN_IN_FLIGHT and tenant.in_flight > SHARE * self.in_flight:
                self.flagged.add(name)

    def ended(self, ended: Ended, at: float, requeued: bool) -> None:
        """Deliveries ended together at ``at`` (one operation: their processing time counted
        if ``at``), the messages queued again if ``requeued``, else gone; and queued ones gone."""
        self.in_flight -= ended.leased
        if ended.held > 0:
            self.busy = _decayed(self.busy, self.busy_at, at) + ended.held
            self.busy_at = max(self.busy_at, at)
        for name, (leased, held, queued) in ended.by_tenant.items():
            tenant = self.by_name[name]
            tenant.in_flight -= leased
            tenant.waiting += (leased if requeued else 0) - queued
            if held > 0:
                tenant.busy = _decayed(tenant.busy, tenant.busy_at, at) + held
                tenant.busy_at = max(tenant.busy_at, at)
                if tenant.busy > SHARE * self.busy and tenant.waiting:
                    self.flagged.add(name)
            self._check_drained(name, tenant)

    def ended_records(
        self,
        recs: Iterable[Record],
        at: float,
        requeued: bool,
        stretched: Iterable[tuple[Stretch, int]] = (),
    ) -> None:
        """Messages ``recs`` leave the leased (or the queued) together at ``at`` (0: their
        processing time not counted), ``requeued`` if queued again; and with them ``count``
        members of each leased stretch ``stretched``."""
        ended = Ended()
        by_tenant = ended.by_tenant
        for stretch, count in stretched:
            held = 0.0
            if at and stretch.at:
                held = max(0.0, min(at, stretch.until) - stretch.at) * count
            ended.leased += count
            ended.held += held
            if stretch.tenant is not None:
                entry = by_tenant.setdefault(stretch.tenant, [0, 0.0, 0])
                entry[0] += count
                entry[1] += held
        for rec in recs:
            if rec.state == LEASED:
                held = 0.0
                if at and rec.leased_at:
                    held = max(0.0, min(at, rec.lease_until) - rec.leased_at)
                ended.leased += 1
                ended.held += held
                if rec.tenant is not None:
                    entry = by_tenant.setdefault(rec.tenant, [0, 0.0, 0])
                    entry[0] += 1
                    entry[1] += held
            elif rec.state == QUEUED and not requeued and rec.tenant is not None:
                by_tenant.setdefault(rec.tenant, [0, 0.0, 0])[2] += 1
        self.ended(ended, at, requeued)

    def dropped(self, counts: dict[str, int]) -> None:
        """Queued messages gone without a delivery (retired): ``counts`` of them by tenant."""
        ended = Ended()
        for name, count in counts.items():
            ended.by_tenant[name] = [0, 0.0, count]
        self.ended(ended, 0.0, False)

    def purged(self) -> None:
        """Every message not completed is gone."""
        self.by_name.clear()
        self.flagged.clear()
        self.in_flight = 0

    def _check_drained(self, name: str, tenant: Tenant) -> None:
        """A tenant with nothing waiting is quiet again, and forgotten with nothing in flight."""
        if tenant.waiting:
            return
        self.flagged.discard(name)
        if not tenant.in_flight:
            del self.by_name[name]

    # -- checkpoints -----------------------------------------------------------------------------

    def to_snap(self) -> list[TenantSnap]:
        return [
            TenantSnap(name, t.last_sent, t.busy, t.busy_at, name in self.flagged)
            for name, t in self.by_name.items()
        ]

    def restore(self, snaps: list[TenantSnap], busy: tuple[float, float]) -> None:
        """Take back what ``to_snap`` kept, once the counts are rebuilt (``arrived`` and
        ``restored_lease`` of every message)."""
        self.busy, self.busy_at = busy
        for snap in snaps:
            tenant = self.by_name.get(snap.name)
            if tenant is None:
                continue
            tenant.last_sent, tenant.busy, tenant.busy_at = snap.last_sent, snap.busy, snap.busy_at
            if snap.noisy and tenant.waiting:
                self.flagged.add(snap.name)

    def restored_lease(self, name: str | None) -> None:
        """A leased message of ``name`` in a checkpoint."""
        self.in_flight += 1
        if name is not None:
            self._named(name).in_flight += 1

    def _named(self, name: str) -> Tenant:
        tenant = self.by_name.get(name)
        if tenant is None:
            tenant = self.by_name[name] = Tenant()
        return tenant

    # -- reads -----------------------------------------------------------------------------------

    def quiet_counts(
        self,
        records: Iterable[Record],
        untouched: int,
        oldest_aside: Callable[[set[str], float], float],
        now: float,
    ) -> QuietCounts:
        """Tenant fairness at ``now``, as SQS fair queues report it: the tenants noisy, and the
        messages of the others (quiet tenants, and messages with no tenant), from the index's
        ``records``, its ``untouched`` messages and the earliest enqueue time of a quiet one
        among those (``oldest_aside(noisy, oldest so far)``)."""
        noisy = self.noisy_names(now)
        visible = in_flight = delayed = 0
        oldest = now
        noisy_records = 0  # queued records of noisy tenants (the rest of them are in runs)
        for rec in records:
            if rec.state == LEASED and rec.lease_until > now:
                in_flight += rec.tenant not in noisy
                continue
            if rec.state == LEASED:  # its lease ran out: visible (as ``status`` says)
                if rec.tenant not in noisy:
                    visible += 1
                    oldest = min(oldest, rec.enqueued_at)
                continue
            if rec.state != QUEUED:
                continue
            if rec.tenant in noisy:
                noisy_records += 1
            elif rec.visible_at > now:
                delayed += 1
            else:
                visible += 1
                oldest = min(oldest, rec.enqueued_at)
        noisy_waiting = sum(self.by_name[name].waiting for name in noisy)
        visible += untouched - (noisy_waiting - noisy_records)
        oldest = oldest_aside(noisy, oldest)
        return QuietCounts(len(noisy), visible, in_flight, delayed, now - oldest)
