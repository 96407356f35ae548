"""Operation streams recorded at the boundary between the writer and its index, replayed through
the index as it was before it was split (``fold_before``) and as it is now.

A stream is every call the writer made on one index: how it began (new, or restored from a
snapshot), each operation folded, each run table filled, and each question asked (``expire``,
``select``, ``deliverable``, ``wanted``) with the answer the recorded build gave. The fixtures
were recorded at d948d1a, the last build of the index as one class, whose peek was
``deliverable``; ``Recorder`` now patches the index as it is. Replaying a
stream asks both indexes the same questions and compares their answers and snapshots.

Record anew (only when the stream format itself changes; the fixtures are the index's behaviour
as of the build that recorded them)::

    python tests/support/fold_streams.py record
"""

from __future__ import annotations

import asyncio
import gzip
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from s3q.log import ops as ops_module

FIXTURES = Path(__file__).parent / "fixtures" / "fold-streams"

Call = tuple[Any, ...]


# -------------------------------------------------------------------------------- encoding


def _encode_op(op: Any) -> list[Any]:
    return [type(op).__name__, msgspec.msgpack.encode(op)]


def _decode_op(raw: list[Any]) -> Any:
    return msgspec.msgpack.decode(raw[1], type=getattr(ops_module, raw[0]))


def encode(stream: list[Call]) -> bytes:
    """A stream as bytes: calls whose operations, appends and snapshots are msgpack."""
    out: list[Any] = []
    for call in stream:
        kind = call[0]
        if kind == "apply":
            out.append(["apply", _encode_op(call[1]), call[2]])
        elif kind == "fill":
            out.append(["fill", call[1], [msgspec.msgpack.encode(a) for a in call[2]]])
        elif kind == "restore":
            out.append(["restore", call[1], call[2]])  # the snapshot, already encoded
        else:
            out.append(list(call))
    return gzip.compress(msgspec.msgpack.encode(out), 6)


def decode(data: bytes) -> list[Call]:
    calls: list[Call] = []
    for raw in msgspec.msgpack.decode(gzip.decompress(data)):
        kind = raw[0]
        if kind == "apply":
            calls.append(("apply", _decode_op(raw[1]), raw[2]))
        elif kind == "fill":
            appends = [msgspec.msgpack.decode(a, type=ops_module.Append) for a in raw[2]]
            calls.append(("fill", raw[1], appends))
        else:
            calls.append(tuple(raw))
    return calls


def streams() -> Iterator[tuple[str, list[Call]]]:
    """Every recorded stream, by name."""
    for path in sorted(FIXTURES.glob("*.msgpack.gz")):
        yield path.name.removesuffix(".msgpack.gz"), decode(path.read_bytes())


# -------------------------------------------------------------------------------- recording


def parameters() -> dict[str, float]:
    """The module settings a recording ran with (the model test changes them)."""
    import s3q.index.state
    import s3q.index.tenants

    return {
        "table_budget": s3q.index.state.TABLE_BUDGET,
        "min_in_flight": s3q.index.tenants.MIN_IN_FLIGHT,
        "share": s3q.index.tenants.SHARE,
    }


def _ids(recs: Any) -> list[str]:
    return [rec.id for rec in recs]


class Recorder:
    """Patches the index class (and ``checkpoint.restore``) so every index records its calls
    into ``self.streams``. A peek is recorded as the old index's ``deliverable`` was."""

    METHODS = ("__init__", "apply", "fill", "expire", "select", "peek", "wanted")

    def __init__(self, cls: Any) -> None:
        self.cls = cls
        self.streams: list[list[Call]] = []
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> Recorder:
        from s3q.index import checkpoint

        cls, streams, saved = self.cls, self.streams, self._saved
        for name in self.METHODS:
            saved[name] = cls.__dict__[name]
        saved["restore"] = checkpoint.restore

        def stream_of(state: Any) -> list[Call]:
            return state.__dict__["_recorded"]  # type: ignore[no-any-return]

        def init(state: Any) -> None:
            saved["__init__"](state)
            state.__dict__["_recorded"] = [("new", parameters())]
            streams.append(state.__dict__["_recorded"])

        def restore(snap: Any) -> Any:
            state = saved["restore"](snap)
            stream = stream_of(state)
            stream.clear()
            stream.append(("restore", parameters(), msgspec.msgpack.encode(snap)))
            return state

        def apply(state: Any, op: Any, seq: int) -> int:
            stream_of(state).append(("apply", op, seq))
            return saved["apply"](state, op, seq)  # type: ignore[no-any-return]

        def fill(state: Any, seq: int, appends: list[Any]) -> None:
            stream_of(state).append(("fill", seq, list(appends)))
            saved["fill"](state, seq, appends)

        def expire(state: Any, now: float, max_attempts: int) -> Any:
            got = saved["expire"](state, now, max_attempts)
            stream_of(state).append(("expire", now, max_attempts, _ids(got)))
            return got

        def select(
            state: Any,
            now: float,
            limit: int,
            max_attempts: int,
            per_group: int = 1,
            fair: bool = False,
        ) -> Any:
            chosen, bury = saved["select"](state, now, limit, max_attempts, per_group, fair)
            stream_of(state).append(
                ("select", now, limit, max_attempts, per_group, fair, _ids(chosen), _ids(bury))
            )
            return chosen, bury

        def peek(
            state: Any,
            now: float,
            limit: int,
            max_attempts: int,
            fair: bool = False,
            per_group: int = 1,
        ) -> Any:
            got = saved["peek"](state, now, limit, max_attempts, fair, per_group)
            stream_of(state).append(("deliverable", now, limit, fair, _ids(got)))
            return got

        def wanted(state: Any, limit: int, fair: bool = False) -> Any:
            got = saved["wanted"](state, limit, fair)
            stream_of(state).append(("wanted", limit, fair, sorted(got)))
            return got

        cls.__init__ = init
        checkpoint.restore = restore
        cls.apply, cls.fill, cls.expire = apply, fill, expire
        cls.select, cls.peek, cls.wanted = select, peek, wanted
        return self

    def __exit__(self, *exc: object) -> None:
        from s3q.index import checkpoint

        checkpoint.restore = self._saved.pop("restore")
        for name, value in self._saved.items():
            setattr(self.cls, name, value)


def _record_model(save: Callable[[str, list[list[Call]]], None]) -> None:
    from hypothesis import settings
    from hypothesis.stateful import run_state_machine_as_test

    sys.path[:0] = [str(Path(__file__).parents[1] / "integration"), str(Path(__file__).parents[1])]
    import test_model

    import s3q.index.state

    for name in ("MemoryQueueMachine", "TablesReadBackMachine", "FairMachine"):
        machine = getattr(test_model, name)
        with Recorder(s3q.index.state.QueueState) as rec:
            run_state_machine_as_test(
                machine,
                settings=settings(
                    max_examples=25,
                    stateful_step_count=60,
                    derandomize=True,
                    deadline=None,
                    database=None,
                ),
            )
        save(f"model-{name}", rec.streams)


def _record_flood(save: Callable[[str, list[list[Call]]], None]) -> None:
    import floods

    import s3q.index.state

    for flood in (False, True):
        with Recorder(s3q.index.state.QueueState) as rec:
            url = f"memory://flood-{flood}"
            asyncio.run(floods.quiet_dwell(url, {}, flood, "noisy" if flood else None, 3.0))
        save(f"flood-{'noisy' if flood else 'calm'}", rec.streams)


def _record_faults(save: Callable[[str, list[list[Call]]], None]) -> None:
    from fault_harness.workload import Plan, in_memory, run_embedded

    import s3q.index.state

    plan = Plan(ops=3000, seed=1054713527)
    with Recorder(s3q.index.state.QueueState) as rec:
        report = asyncio.run(run_embedded(plan, in_memory(plan)))
    assert not report.violations, report.violations
    save("faults-harsh", rec.streams)


def record() -> None:
    """Record every scenario's streams into ``FIXTURES``."""
    FIXTURES.mkdir(parents=True, exist_ok=True)

    def save(name: str, recorded: list[list[Call]]) -> None:
        # the streams that did something (a queue opened and closed at once teaches nothing)
        useful = [s for s in recorded if sum(c[0] == "apply" for c in s) > 2]
        useful.sort(key=len, reverse=True)
        kept = useful[:12]
        for i, stream in enumerate(kept):
            (FIXTURES / f"{name}-{i:02d}.msgpack.gz").write_bytes(encode(stream))
        print(name, [len(s) for s in kept])

    _record_model(save)
    _record_flood(save)
    _record_faults(save)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    if sys.argv[1:] != ["record"]:
        sys.exit("usage: python tests/support/fold_streams.py record")
    record()
