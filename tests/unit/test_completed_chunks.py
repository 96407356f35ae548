"""The record of completed messages: chunks of ranges of places, by log object and time."""

from __future__ import annotations

from s3q.completed import Chunk, Completed


def test_a_chunk_holds_ranges_of_places() -> None:
    chunk = Chunk.of(7, 1.0, [5, 3, 4, 9, 4, 12, 11])
    assert list(chunk.ranges) == [3, 6, 9, 10, 11, 13]
    assert chunk.count == 6
    assert [p for p in range(15) if p in chunk] == [3, 4, 5, 9, 11, 12]


def test_completed_by_object_and_time_then_pruned() -> None:
    done = Completed()
    done.add(10.0, {1: list(range(1000)), 2: [5]})
    done.add(20.0, {1: [2000, 2001]})
    assert done.count == 1003 and len(done) == 3
    assert done.finished_at(1, 999) == 10.0 and done.finished_at(1, 2001) == 20.0
    assert done.finished_at(1, 1000) is None and done.finished_at(3, 0) is None
    assert done.count_since(10.0) == 2 and done.count_since(9.0) == 1003
    assert done.prunable(10.0) and not done.prunable(9.9)
    assert done.prune(10.0) == 1001
    assert done.finished_at(1, 5) is None and done.finished_at(1, 2000) == 20.0
    again = Completed.from_snap(done.to_snap())
    assert again.count == 2 and again.finished_at(1, 2000) == 20.0
