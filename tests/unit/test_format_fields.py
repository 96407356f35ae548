"""Fields that came within format 3: what this build writes decodes with the shapes of earlier
builds, and what they wrote decodes here; and the operations that moved the format on."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from s3q.errors import UnsupportedFormat
from s3q.index.checkpoint import Snapshot
from s3q.index.records import Record
from s3q.index.tenants import TenantSnap
from s3q.lease import LeaseRecord
from s3q.log import segment
from s3q.log.ops import Append, Bury, Complete, Fail, Lease, Op, Retire


def without_last_field(
    shape: type[msgspec.Struct], drop: int = 1, **config: Any
) -> type[msgspec.Struct]:
    """``shape`` as builds before its last ``drop`` (trailing, defaulted) fields defined it."""
    fields: list[Any] = []
    for f in msgspec.structs.fields(shape)[:-drop]:
        if f.required:
            fields.append((f.name, f.type))
        elif f.default is msgspec.NODEFAULT:
            fields.append((f.name, f.type, msgspec.field(default_factory=f.default_factory)))
        else:
            fields.append((f.name, f.type, f.default))
    return msgspec.defstruct(shape.__name__, fields, array_like=True, **config)


def test_the_time_of_a_lease_is_a_field_earlier_builds_of_format_3_skip() -> None:
    """Lease.at and Record.first_leased_at came within format 3 as trailing fields: objects this
    build writes decode with the shapes of the builds before them, and theirs with this one's."""
    old_lease = without_last_field(Lease, drop=3, tag="l", frozen=True)  # (stretches: format 4)
    new = Lease([("m1", "m1~r", 130.0)], 100.0)
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(new), type=old_lease) == old_lease(
        [("m1", "m1~r", 130.0)]
    )
    older = msgspec.msgpack.encode(old_lease([("m1", "m1~r", 130.0)]))
    assert msgspec.msgpack.decode(older, type=Lease) == Lease([("m1", "m1~r", 130.0)], 0.0)


def test_leases_in_stretches_are_format_4_which_a_format_3_reader_refuses() -> None:
    """Lease.stretches is a trailing field that a format-3 shape would skip without a word,
    losing leases: objects carrying it are sealed as format 4, which format-3 builds refuse;
    a format-3 Lease decodes here with no stretches."""
    format_3 = without_last_field(Lease, drop=2, tag="l", frozen=True)
    leased = Lease([], 100.0, [(7, 0, 1000, "ab12", 130.0)])
    skipped = msgspec.msgpack.decode(msgspec.msgpack.encode(leased), type=format_3)
    assert skipped == format_3([], 100.0)  # what sealing it as format 4 guards against
    assert segment.BASE_FORMAT >= 4 and 3 in segment.READABLE
    sealed = segment.encode(segment.Header(7, "w", 100.0, [leased]), [])
    assert sealed.endswith(b"S3Q%d" % segment.BASE_FORMAT)
    assert segment.decode(sealed, "log/7").ops == [leased]
    older = msgspec.msgpack.encode(format_3([("m1", "m1~r", 130.0)], 100.0))
    assert msgspec.msgpack.decode(older, type=Lease).stretches is None

    old_rec = without_last_field(Record, drop=3, gc=False)  # (tenant and leased_at came later)
    rec = Record("m1", 1, 0, 1.0, 1.0, 3, 0, 10, attempts=2, first_leased_at=100.0)
    back = msgspec.msgpack.decode(msgspec.msgpack.encode(rec), type=old_rec)
    assert (back.id, back.attempts, back.payload_seq) == ("m1", 2, 3)  # type: ignore[attr-defined]
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(back), type=Record).first_leased_at == 0.0


def test_the_attempts_a_lease_failure_or_burial_carries_are_fields_format_4_builds_skip() -> None:
    """Lease.attempts, Fail.attempt and Bury.attempts came within format 4 as trailing fields
    (for readers of the history: the fold counts attempts itself): what this build writes
    decodes with the shapes of the builds before them, and theirs here with none carried."""
    cases: list[tuple[msgspec.Struct, str, str]] = [
        (Lease([("m1", "m1~r", 130.0)], 100.0, [(7, 0, 10, "ab12", 130.0)], [2]), "l", "attempts"),
        (Fail("m1", "boom", 140.0, 100.0, 2), "f", "attempt"),
        (Bury(["m1", "m2"], "expired", 100.0, [3, 1]), "b", "attempts"),
    ]
    for new, tag, name in cases:
        shape = type(new)
        old_shape = without_last_field(shape, tag=tag, frozen=True)
        skipped = msgspec.msgpack.decode(msgspec.msgpack.encode(new), type=old_shape)
        kept = [getattr(new, f) for f in old_shape.__struct_fields__]
        assert skipped == old_shape(*kept)
        older = msgspec.msgpack.decode(msgspec.msgpack.encode(skipped), type=shape)
        assert older == msgspec.structs.replace(new, **{name: shape.__struct_defaults__[-1]})
    assert segment.BASE_FORMAT == 4  # (objects of these operations: format-4 builds read them)


def test_a_writer_lease_naming_a_broker_lease_is_a_field_earlier_builds_skip() -> None:
    """LeaseRecord.broker came as a trailing JSON field: a lease written by an earlier build
    names no broker, and one this build writes reads with the earlier shape (which takes the
    broker's expiry at the queue's open for the queue's own: such a build takes the queue over
    once that passes, and the log's fencing keeps the broker from writing after it)."""
    old_shape = msgspec.defstruct(
        "LeaseRecord",
        [
            ("holder", str),
            ("token", str),
            ("expires_at", float | None),
            ("address", str | None, None),
        ],
    )
    older = msgspec.json.encode(old_shape("pid 1 on h", "t1", 130.0, "http://h:1"))
    assert msgspec.json.decode(older, type=LeaseRecord) == LeaseRecord(
        "pid 1 on h", "t1", 130.0, "http://h:1", None
    )
    brokered = LeaseRecord("pid 2 on h", "t2", 140.0, "http://h:2", "0123abcd")
    back = msgspec.json.decode(msgspec.json.encode(brokered), type=old_shape)
    assert (back.token, back.expires_at, back.address) == ("t2", 140.0, "http://h:2")  # type: ignore[attr-defined]


def test_tenants_are_fields_earlier_builds_of_format_3_skip() -> None:
    """Append.tenants, Record.tenant and leased_at, RunSnap.tenant and the tenants of a Snapshot
    came within format 3 as trailing fields: what this build writes decodes with the shapes of
    the builds before, and what those wrote decodes here with no tenant."""
    old_append = without_last_field(Append, tag="a", frozen=True)
    new = Append(0, 1.0, 0, [3, 4], tenants=["acme", None])
    back = msgspec.msgpack.decode(msgspec.msgpack.encode(new), type=old_append)
    assert back.sizes == [3, 4]  # type: ignore[attr-defined]
    older = msgspec.msgpack.encode(back)
    assert msgspec.msgpack.decode(older, type=Append) == Append(0, 1.0, 0, [3, 4])

    old_rec = without_last_field(Record, drop=2, gc=False)
    rec = Record("m1", 1, 0, 1.0, 1.0, 3, 0, 10, first_leased_at=9.0, tenant="acme", leased_at=9.0)
    back = msgspec.msgpack.decode(msgspec.msgpack.encode(rec), type=old_rec)
    again = msgspec.msgpack.decode(msgspec.msgpack.encode(back), type=Record)
    assert (again.first_leased_at, again.tenant, again.leased_at) == (9.0, None, 0.0)

    old_snapshot = without_last_field(Snapshot, drop=2)
    snap = Snapshot(1, 0, 0, [], [], {}, [], tenants=[TenantSnap("acme", 5.0, 1.0, 5.0, True)])
    back = msgspec.msgpack.decode(msgspec.msgpack.encode(snap), type=old_snapshot)
    again = msgspec.msgpack.decode(msgspec.msgpack.encode(back), type=Snapshot)
    assert (again.tenants, again.busy) == ([], (0.0, 0.0))


def test_retirements_are_format_5_which_a_format_4_reader_refuses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Retire is an operation of a kind format-4 builds do not know (their union of operations
    would fail on its tag): objects that hold one are sealed as format 5, which those builds
    refuse before decoding anything (UnsupportedFormat: upgrade); the others stay format 4, so
    a queue that never retires stays readable by format-4 builds; every earlier format stays
    readable here."""
    retired = Retire(["m1"], 100.0, [(7, 0, 1000)])
    sealed = segment.encode(segment.Header(9, "w", 100.0, [retired]), [])
    plain = segment.encode(segment.Header(10, "w", 100.0, [Complete(["m2"], 100.0)]), [])
    assert plain.endswith(b"S3Q4")
    assert segment.FORMAT == 5
    assert frozenset({1, 2, 3, 4, 5}) == segment.READABLE
    assert sealed.endswith(b"S3Q5")
    assert segment.decode(sealed, "log/9").ops == [retired]
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(Retire([], 1.0)), type=Retire) == (
        Retire([], 1.0, None)
    )
    monkeypatch.setattr(segment, "READABLE", frozenset({1, 2, 3, 4}))  # a format-4 build
    with pytest.raises(UnsupportedFormat, match=r"format '5'.*upgrade s3q"):
        segment.decode(sealed, "log/9")
    assert segment.decode(plain, "log/10").ops == [Complete(["m2"], 100.0)]


def test_an_operation_of_an_unknown_kind_is_refused_naming_it() -> None:
    """A log object in a readable format whose operations include one of a kind this build does
    not know (a newer build that forgot to move the format on, another program) is refused with
    UnsupportedFormat naming the object and the kind, never skipped in silence; anything else
    that does not decode is the decoder's error, as before."""
    known = Complete(["m1"], 100.0)

    class Unknown(Op, tag="q", frozen=True):
        ids: list[str]

    head = msgspec.msgpack.encode(segment.Header(9, "w", 100.0, [known, Unknown(["m2"])]))  # type: ignore[list-item]
    with pytest.raises(UnsupportedFormat, match=r"log/9 holds operations .*tag 'q'.*upgrade"):
        segment.decode(segment.seal(head), "log/9")
    not_a_header = segment.seal(msgspec.msgpack.encode({"seq": 9}))
    with pytest.raises(msgspec.ValidationError):
        segment.decode(not_a_header, "log/9")
