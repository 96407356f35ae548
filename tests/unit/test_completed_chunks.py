"""The record of completed messages: chunks of ranges of places, by log object and time."""

from __future__ import annotations

import tracemalloc

import msgspec

from s3q.index.completed import Chunk, ChunkSnap, Completed


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


def test_the_encoding_kept_for_checkpoints_is_the_chunks_encoded_now() -> None:
    """What a checkpoint copies (``to_raw``) is byte for byte what encoding the chunks left
    would give, through additions, prunes and the dropping of pruned encodings (past 4,096)."""
    completed = Completed()
    encoder = msgspec.msgpack.Encoder()

    def expected() -> bytes:
        return encoder.encode(
            [ChunkSnap(c.seq, c.at, c.ranges.tobytes(), c.count) for c in completed.chunks()]
        )

    assert bytes(completed.to_raw()) == expected() == b"\x90"
    at = 0.0
    for seq in range(1, 12_000):
        at += 1.0
        completed.add(at, {seq: [0, 2, 3] if seq % 7 else list(range(seq % 50))})
        if seq % 1_000 == 0:
            completed.prune(at - 1_500.0)
            assert bytes(completed.to_raw()) == expected()
    assert len(completed) == 2_499  # the last 1,500 of the prune, and 999 since
    assert len(completed._ends) < 6_000  # the pruned encodings were dropped (11,999 made)
    again = Completed.from_raw(completed.to_raw())
    assert (again.count, bytes(again.to_raw())) == (completed.count, bytes(completed.to_raw()))
    assert again.finished_at(11_999, 2) == completed.finished_at(11_999, 2) == 11_999.0


def test_a_single_completion_costs_a_few_hundred_bytes_of_memory() -> None:
    """Single calls complete one message per log object: an hour of them at hundreds a second
    is held for ``completed_retention``, so each must cost bytes, not an object graph (a chunk
    object, its array and a deque per log object took over a kilobyte each)."""
    completed = Completed()
    completed.add(0.0, {1: [0]})  # the containers exist before the measurement
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for seq in range(2, 20_002):
            completed.add(float(seq), {3 * seq + 1_000: [0]})
        per_completion = (tracemalloc.get_traced_memory()[0] - before) / 20_000
    finally:
        tracemalloc.stop()
    assert per_completion < 300, per_completion
    assert completed.finished_at(3 * 500 + 1_000, 0) == 500.0
    assert completed.finished_at(3 * 500 + 1_000, 1) is None
    assert completed.prune(10_000.0) == 9_999 + 1 and completed.count == 10_001
    assert completed.finished_at(3 * 500 + 1_000, 0) is None
    assert completed.finished_at(3 * 19_000 + 1_000, 0) == 19_000.0
