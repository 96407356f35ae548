"""Retirement in the index, pure: random histories of enqueues (runs, delayed, grouped, tenants'
and stored-apart messages), leases (records and stretches), completions, deaths, lapsed leases
and time, folded as the writer folds them, with a Retire of what ``removal.retiring`` finds at
each step. After each: every live message enqueued at or before the cutoff is gone, whatever
its state, every other one is as it was; the counts, payload references and tenants agree with
what is left; and the same log folded again (from the start, and from a checkpoint taken
midway, where stretches' members are records) gives the same index."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import hypothesis.strategies as st
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings

from s3q.index import ages, checkpoint, removal
from s3q.index.records import DEAD, DONE, LEASED, QUEUED
from s3q.index.state import QueueState
from s3q.index.stretches import Stretch
from s3q.log import ids
from s3q.log.ops import AnyOp, Append, Bury, Complete, Fail, Lease, Open, Retire

QUEUE = "0123abcd"
ATTEMPTS = 3
RETENTION = 60.0
T0 = 1000.0


class History:
    """An index, the log folded into it so far, and the time."""

    def __init__(self) -> None:
        self.state = QueueState()
        self.log: list[tuple[AnyOp, int]] = []
        self.seq = 0
        self.now = T0
        self.tokens = itertools.count()
        self.apply(Open("test", T0, QUEUE))

    def apply(self, op: AnyOp, new: bool = True) -> None:
        if new:
            self.seq += 1
        self.state.apply(op, self.seq)
        self.log.append((op, self.seq))

    def enqueue(self, kinds: list[str]) -> None:
        """One Append: ``plain``, ``delayed``, ``grouped``, ``tenant`` (plain, a tenant's),
        ``urgent`` (plain, priority 5), ``apart`` (its payload in an object of its own)."""
        n = len(kinds)
        delays = [30.0 if k == "delayed" else 0.0 for k in kinds]
        groups = [f"g{i % 2}" if k == "grouped" else None for i, k in enumerate(kinds)]
        tenants = ["acme" if k == "tenant" else None for k in kinds]
        priorities = [5 if k == "urgent" else 0 for k in kinds]
        blobs = {i: f"blob/{self.seq + 1}-{i}" for i, k in enumerate(kinds) if k == "apart"}
        self.apply(
            Append(
                0,
                self.now,
                0,
                [10 + i for i in range(n)],
                delays=delays if any(delays) else None,
                groups=groups if any(groups) else None,
                tenants=tenants if any(tenants) else None,
                priorities=priorities if any(priorities) else None,
                blobs=blobs or None,
            )
        )

    def lease(self, limit: int, stretches: bool, hold: float = 20.0) -> None:
        state, now = self.state, self.now
        self.seq += 1
        bury = state.expire(now, ATTEMPTS)
        while bury:
            self.apply(Bury([r.id for r in bury], "lapsed", now), new=False)
            bury = state.expire(now, ATTEMPTS)
        chosen, bury = state.select(now, limit, ATTEMPTS, stretches=stretches)
        if bury:
            self.apply(Bury([r.id for r in bury], "lapsed", now), new=False)
        leases, spans = [], []
        for item in chosen:
            token = f"t{next(self.tokens)}"
            if isinstance(item, Stretch):
                spans.append((item.seq, item.place, item.count, token, now + hold))
            else:
                leases.append((item.id, ids.receipt(item.id, token), now + hold))
        if chosen:
            self.apply(Lease(leases, now, spans or None), new=False)

    def leased(self) -> list[str]:
        """The ids of messages leased now, their leases running."""
        found = [
            r.id
            for r in self.state.messages.values()
            if r.state == LEASED and r.lease_until > self.now
        ]
        for stretch in self.state.stretches:
            if stretch.until > self.now:
                found += [m for k, m in enumerate(stretch.ids()) if stretch.held[k]]
        return sorted(found)

    def complete(self, pick: int) -> None:
        leased = self.leased()
        if leased:
            chosen = leased[pick % len(leased) :: 2]
            self.apply(Complete(chosen, self.now))

    def kill(self, pick: int) -> None:
        """The last attempt of a leased message failed: it is dead."""
        leased = self.leased()
        if leased:
            self.apply(Fail(leased[pick % len(leased)], "boom", None, self.now))

    def retire(self) -> tuple[set[str], set[str]]:
        """Retire what is due; the live messages before, and those it named."""
        before = live(self.state)
        found = removal.retiring(self.state, self.now - RETENTION)
        if found is None:
            return before, set()
        mids, ranges = found
        named = set(mids) | {
            ids.make(QUEUE, seq, p)
            for seq, place, count in ranges
            for p in range(place, place + count)
        }
        assert len(named) == len(mids) + sum(c for _, _, c in ranges)  # each named once
        self.apply(Retire(mids, self.now, ranges or None))
        return before, named


def live(state: QueueState) -> dict[str, float]:
    """Every message not finished (dead letters too): id -> enqueue time."""
    found = {r.id: r.enqueued_at for r in state.records() if r.state != DONE}
    for run in state.runs:
        for k in range(run.taken, run.count):
            found[ids.make(QUEUE, run.seq, run.place + k)] = run.enqueued_at
    return found


def view(state: QueueState) -> dict[str, Any]:
    """What the index holds, in a form two indexes of the same log compare equal in."""
    records = sorted(
        (r.id, r.state, r.attempts, r.receipt, r.lease_until, r.visible_at, r.payload_seq, r.stage)
        for r in state.records()
    )
    runs = sorted((run.seq, run.front_place(), len(run), run.bytes) for run in state.runs)
    payloads = state.payloads
    return {
        "records": records,
        "runs": runs,
        "dead": list(state.dead),
        "live": state.live,
        "refs": dict(payloads.refs),
        "live_bytes": {k: v for k, v in payloads.live_bytes.items() if v},
        "staged": dict(payloads.staged_refs),
        "garbage": sorted(payloads.garbage.entries()),
        "tenants": {n: (t.waiting, t.in_flight) for n, t in state.tenants.by_name.items()},
        "in_flight": state.tenants.in_flight,
        "groups": {g: list(m) for g, m in state.delivery.groups.members.items()},
    }


def check_counts(state: QueueState) -> None:
    """The counts agree with the messages the index holds."""
    records = [r for r in state.records() if r.state != DONE]
    queued_or_leased = sum(r.state in (QUEUED, LEASED) for r in records)
    assert state.live == queued_or_leased + state.runs.untouched
    assert set(state.dead) == {r.id for r in records if r.state == DEAD}
    refs: Counter[int] = Counter()
    staged: Counter[str] = Counter()
    for r in records:
        if r.stage is not None:
            staged[r.stage] += 1
        else:
            refs[r.payload_seq] += 1
    for run in state.runs:
        refs[run.seq] += len(run)
    assert dict(refs) == state.payloads.refs
    assert dict(staged) == state.payloads.staged_refs
    for name, tenant in state.tenants.by_name.items():
        mine = [r for r in records if r.tenant == name]
        waiting = sum(r.state == QUEUED for r in mine)
        waiting += sum(len(run) for run in state.runs if run.tenant == name)
        assert tenant.waiting == waiting, name
        assert tenant.in_flight == sum(r.state == LEASED for r in mine), name


def replayed(log: list[tuple[AnyOp, int]], restart: int | None = None) -> QueueState:
    """The index of ``log`` folded anew (from a checkpoint taken after ``restart`` of them)."""
    state = QueueState()
    for i, (op, seq) in enumerate(log):
        again = msgspec.msgpack.decode(msgspec.msgpack.encode(op), type=AnyOp)
        for wanted in state.wanted_by(again):  # run tables a checkpoint left in the log
            state.fill(wanted, [a for a, s in log if s == wanted and isinstance(a, Append)])
        state.apply(again, seq)
        if i == restart:
            snap = msgspec.msgpack.encode(checkpoint.take(state))
            state = checkpoint.restore(msgspec.msgpack.decode(snap, type=checkpoint.Snapshot))
    return state


KINDS = st.sampled_from(["plain", "plain", "delayed", "grouped", "tenant", "urgent", "apart"])
STEP = st.one_of(
    st.tuples(st.just("enqueue"), st.lists(KINDS, min_size=1, max_size=6)),
    st.tuples(st.just("lease"), st.integers(1, 8), st.booleans(), st.sampled_from([20.0, 300.0])),
    st.tuples(st.just("complete"), st.integers(0, 5)),
    st.tuples(st.just("kill"), st.integers(0, 5)),
    st.tuples(st.just("wait"), st.sampled_from([5.0, 15.0, 30.0, 60.0, 95.0])),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(STEP, min_size=1, max_size=40),
    restarts=st.lists(st.integers(0, 200), min_size=1, max_size=3),
)
def test_retirement_removes_exactly_what_outlived_the_retention(
    steps: list[tuple[Any, ...]], restarts: list[int]
) -> None:
    h = History()
    for step in steps:
        if step[0] == "enqueue":
            h.enqueue(step[1])
        elif step[0] == "lease":
            h.lease(step[1], step[2], step[3])
        elif step[0] == "complete":
            h.complete(step[1])
        elif step[0] == "kill":
            h.kill(step[1])
        else:
            h.now += step[1]
        before, named = h.retire()
        cutoff = h.now - RETENTION
        due = {mid for mid, at in before.items() if at <= cutoff}
        assert named == due
        after = live(h.state)
        assert after == {mid: at for mid, at in before.items() if mid not in due}
        for mid in due:
            assert h.state.find(mid) is None
        check_counts(h.state)
    assert view(replayed(h.log)) == view(h.state)
    for restart in restarts:
        assert view(replayed(h.log, restart % len(h.log))) == view(h.state), restart


def _all_kinds() -> History:
    """Messages in every state, enqueued at T0: pending (runs, a record aside), delayed,
    groups', leased alone and in a stretch, waiting to be retried and dead."""
    h = History()
    h.enqueue(["plain"] * 4)
    h.enqueue(["delayed", "grouped", "grouped", "apart", "tenant", "urgent"])
    h.lease(1, stretches=False)  # the urgent one, alone
    h.lease(2, stretches=True)  # a stretch of the run
    h.lease(1, stretches=False)  # the tenant's
    leased = h.leased()
    h.apply(Fail(leased[0], "retry me", h.now + 500.0, h.now))
    h.kill(1)
    return h


def test_every_state_retires_and_a_run_is_one_range() -> None:
    h = _all_kinds()
    states = Counter(r.state for r in h.state.records())
    assert states[DEAD] == 1 and states[LEASED] >= 1 and states[QUEUED] >= 3
    assert len(h.state.stretches) == 1 and h.state.runs.count == 2  # (the tenant's is one)
    h.now = T0 + RETENTION - 1
    assert h.retire()[1] == set()  # not yet
    h.now = T0 + RETENTION
    h.enqueue(["plain"] * 3)  # a newer run stays
    before, named = h.retire()
    assert named == set(before) - set(live(h.state)) and len(named) == 10
    op = h.log[-1][0]
    assert isinstance(op, Retire)
    assert op.ranges is not None and len(op.ranges) == 3  # the runs and the stretch, one each
    assert (len(h.state.messages), len(h.state.stretches), h.state.runs.count) == (0, 0, 1)
    assert (h.state.live, len(h.state.dead), h.state.runs.untouched) == (3, 0, 3)
    assert not h.state.payloads.staged_refs  # the payload apart is given up
    assert not h.state.tenants.by_name and h.state.tenants.in_flight == 0
    assert h.state.delivery.groups.members == {}
    check_counts(h.state)
    for restart in range(len(h.log)):
        assert view(replayed(h.log, restart)) == view(h.state), restart


def test_a_retired_lease_leaves_no_receipt_and_a_group_moves_on() -> None:
    h = History()
    h.enqueue(["grouped"])  # the head of group g0 (log object 2)
    h.lease(1, stretches=False, hold=500.0)
    (head,) = h.leased()
    rec = h.state.messages[head]
    receipt = rec.receipt
    assert receipt is not None
    h.now += 60.0
    h.enqueue(["grouped", "grouped"])  # (log object 4) one of g0 behind the head, one of g1
    assert [r.id for r in h.state.peek(h.now, 10, ATTEMPTS)] == [ids.make(QUEUE, 4, 1)]
    h.now += 45.0
    assert h.retire()[1] == {head}
    assert h.state.receipt_holder(receipt) is None and rec.receipt is None
    assert [r.id for r in h.state.peek(h.now, 10, ATTEMPTS)] == [
        ids.make(QUEUE, 4, 0),  # the head retired: the next of its group goes
        ids.make(QUEUE, 4, 1),
    ]


def test_an_index_never_asked_keeps_no_ages_and_one_asked_keeps_them_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ages, "SLACK", 16)
    h = History()
    for _ in range(200):
        h.enqueue(["plain", "delayed"])
        h.lease(4, stretches=True)
        h.complete(0)
        h.complete(1)
        h.now += 1.0
    assert not h.state.ages.watching
    assert h.state.ages.oldest() is None
    assert removal.retiring(h.state, h.now - 1e6) is None  # nothing that old: starts the ages
    assert h.state.ages.watching
    for _ in range(300):
        h.enqueue(["plain", "delayed"])  # an entry of each kind: rebuilt if they are too many
        entries = h.state.ages
        assert len(entries._records) <= 2 * len(h.state.messages) + 16
        assert len(entries._seqs) <= 2 * (h.state.runs.count + len(h.state.stretches)) + 16
        h.lease(4, stretches=False)
        h.complete(0)
        h.complete(1)
        h.now += 1.0
    oldest = h.state.ages.oldest()
    assert oldest is not None and oldest <= min(live(h.state).values())
    h.state.ages.stop()
    assert h.state.ages.oldest() is None and not h.state.ages.watching
