"""The index split into parts folds as the one class did: recorded operation streams (model-test
runs, the flood scenario, the fault workload) replayed through the index as it was before the
split (tests/support/fold_before.py) and as it is now give the same answers to every question
and the same snapshots; and peek, now computed by ``select`` itself, is what ``select`` then
delivers."""

from __future__ import annotations

from typing import Any

import fold_before
import fold_streams
import msgspec
import pytest

import s3q.index.tenants
from s3q.index import checkpoint
from s3q.index import state as new_state

STREAMS = dict(fold_streams.streams())


def _snap_bytes(state: Any) -> bytes:
    if isinstance(state, fold_before.QueueState):
        return msgspec.msgpack.encode(state.snapshot())
    return msgspec.msgpack.encode(checkpoint.take(state))


def _start(stream: list[Any], new: bool) -> Any:
    if stream[0][0] == "new":
        return new_state.QueueState() if new else fold_before.QueueState()
    if new:
        return checkpoint.restore(msgspec.msgpack.decode(stream[0][2], type=checkpoint.Snapshot))
    return fold_before.QueueState.restore(
        msgspec.msgpack.decode(stream[0][2], type=fold_before.Snapshot)
    )


@pytest.fixture
def parameters(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Sets the module settings a stream was recorded with, for the old index and the new."""

    def set_for(stream: list[Any]) -> None:
        given = stream[0][1]
        for module in (fold_before, new_state):
            monkeypatch.setattr(module, "TABLE_BUDGET", given["table_budget"])
        monkeypatch.setattr(s3q.index.tenants, "MIN_IN_FLIGHT", given["min_in_flight"])
        monkeypatch.setattr(s3q.index.tenants, "SHARE", given["share"])

    return set_for


def _ids(recs: Any) -> list[str]:
    return [rec.id for rec in recs]


def test_streams_were_recorded() -> None:
    names = {name.rsplit("-", 1)[0] for name in STREAMS}
    assert names == {
        "model-MemoryQueueMachine",
        "model-TablesReadBackMachine",
        "model-FairMachine",
        "flood-calm",
        "flood-noisy",
        "faults-harsh",
    }
    selects = sum(c[0] == "select" and bool(c[6]) for s in STREAMS.values() for c in s)
    peeks = sum(c[0] == "deliverable" and bool(c[4]) for s in STREAMS.values() for c in s)
    assert selects > 1_000 and peeks > 50


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_old_and_new_index_answer_alike(name: str, parameters: Any) -> None:
    stream = STREAMS[name]
    parameters(stream)
    twin = fold_streams.decode(fold_streams.encode(stream))  # operations of its own
    old = _start(stream, new=False)
    new = _start(twin, new=True)
    for i, (call, mine) in enumerate(zip(stream, twin, strict=True)):
        kind = call[0]
        where = f"{name} call {i} {kind}"
        if kind == "apply":
            old.apply(call[1], call[2])
            new.apply(mine[1], mine[2])
        elif kind == "fill":
            old.fill(call[1], call[2])
            new.fill(mine[1], mine[2])
        elif kind == "expire":
            _, now, attempts, recorded = call
            assert _ids(old.expire(now, attempts)) == recorded, where
            assert _ids(new.expire(now, attempts)) == recorded, where
        elif kind == "select":
            _, now, limit, attempts, per_group, fair, chosen, bury = call
            assert _ids(old.select(now, limit, attempts, per_group, fair)[0]) == chosen, where
            peeked = _ids(new.peek(now, limit, attempts, fair, per_group))
            got, buried = new.select(now, limit, attempts, per_group, fair)
            assert _ids(got) == chosen, where
            assert _ids(buried) == bury, where
            assert peeked == chosen, f"{where}: peek is not what select delivers"
        elif kind == "deliverable":
            _, now, limit, fair, recorded = call
            assert _ids(old.deliverable(now, limit, fair)) == recorded, where
            assert _ids(new.peek(now, limit, 1 << 30, fair)) == recorded, where
        elif kind == "wanted":
            _, limit, fair, recorded = call
            assert sorted(old.wanted(limit, fair)) == recorded, where
            assert sorted(new.wanted(limit, fair)) == recorded, where
        if kind == "apply" and i % 200 == 0:
            assert _snap_bytes(old) == _snap_bytes(new), where
    assert _snap_bytes(old) == _snap_bytes(new), name
