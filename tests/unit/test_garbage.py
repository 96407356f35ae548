"""The garbage list, kept as its checkpoint encoding."""

from __future__ import annotations

import msgspec

from s3q.index.garbage import Garbage
from s3q.log import segment


def test_the_encoding_is_the_list_of_pairs_through_additions_and_deletions() -> None:
    """What a checkpoint copies is byte for byte a list of ``(stamp, key)`` pairs, whether the
    collector deletes the oldest entries (dropped from the front, past 4,096) or others."""
    garbage, mirror = Garbage(), []
    for seq in range(1, 20_000):
        entry = (seq + 1, segment.key(seq) if seq % 10 else f"stage/{seq}")
        garbage.add(*entry)
        mirror.append(entry)
        if seq % 2_500 == 0:  # the oldest half goes, as a collection pass deletes it
            gone = {key for _, key in mirror[: len(mirror) // 2]}
            garbage.forget(gone)
            mirror = [e for e in mirror if e[1] not in gone]
            assert bytes(garbage.to_raw()) == msgspec.msgpack.encode(mirror)
    gone = {mirror[5][1], mirror[-1][1], "log/nothing"}  # not the oldest: the list is rebuilt
    garbage.forget(gone)
    mirror = [e for e in mirror if e[1] not in gone]
    assert bytes(garbage.to_raw()) == msgspec.msgpack.encode(mirror)
    assert len(garbage) == len(mirror) and len(garbage._encoded) < 40 * 20_000 // 2
    assert garbage.doomed(19_000) == [e for e in mirror if e[0] <= 19_000]
    assert set(garbage.others()) == {key for _, key in mirror if key.startswith("stage/")}
    again = Garbage.from_raw(garbage.to_raw())
    assert again.entries() == mirror and set(again.others()) == set(garbage.others())


def test_an_older_checkpoints_list_reads() -> None:
    older = msgspec.msgpack.encode([(3, "log/00000000000000000001"), (4, "blob/x")])
    garbage = Garbage.from_raw(msgspec.Raw(older))
    assert garbage.entries() == [(3, "log/00000000000000000001"), (4, "blob/x")]
    assert list(garbage.others()) == ["blob/x"]
    garbage.forget({"blob/x"})
    assert list(garbage.others()) == [] and len(garbage) == 1
