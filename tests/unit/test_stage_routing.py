"""How a Spark task splits its rows between the partitions of a queue (``routed``)."""

from __future__ import annotations

import pyarrow as pa

from s3q.partitions.placement import home
from s3q.spark.stage import routed


def test_rows_go_to_their_keys_partition_and_the_rest_to_the_tasks() -> None:
    groups = ["a", None, "b", None, None, "a"]
    dedups = [None, "x", "y", None, None, None]  # (a group wins over a dedup id)
    batch = pa.record_batch(
        {"payload": [b"%d" % i for i in range(6)], "group": groups, "dedup_id": dedups}
    )
    split = {i: (part, numbers) for i, part, numbers in routed(batch, 5, turn=7, first=100)}
    expected: dict[int, list[int]] = {}
    for row, (group, dedup) in enumerate(zip(groups, dedups, strict=True)):
        key = group if group is not None else dedup
        expected.setdefault(home(key, 5) if key is not None else 7 % 5, []).append(row)
    assert {i: numbers.tolist() for i, (_, numbers) in split.items()} == {
        i: [100 + r for r in rows] for i, rows in expected.items()
    }
    for i, (part, _) in split.items():
        assert part.column("payload").to_pylist() == [b"%d" % r for r in expected[i]]


def test_a_batch_without_keys_or_partitions_goes_whole() -> None:
    plain = pa.record_batch({"payload": [b"a", b"b"]})
    [(index, part, numbers)] = routed(plain, 4, turn=6, first=0)
    assert (index, numbers) == (2, None) and part is plain
    keyed = pa.record_batch({"payload": [b"a"], "group": ["g"]})
    [(index, part, numbers)] = routed(keyed, 1, turn=6, first=0)
    assert (index, numbers) == (0, None) and part is keyed
