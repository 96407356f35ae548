"""Which checkpoints newer than the stable one collection lets go (``collector.thinned``)."""

from __future__ import annotations

from s3q.writer.collector import KEEP_NEWEST, thinned


def test_the_newest_are_kept_and_the_oldest_of_each_step() -> None:
    seqs = list(range(100, 2100, 100))  # one a second, 20 of them
    taken = {seq: float(seq // 100) for seq in seqs}  # seq 100 at 1 s ... seq 2000 at 20 s
    doomed = thinned(seqs, taken, step=5.0)
    kept = [s for s in seqs if s not in doomed]
    assert kept[-KEEP_NEWEST:] == seqs[-KEEP_NEWEST:]
    assert kept == [100, 500, 1000, 1500, 1900, 2000]  # 1 s, 5 s, 10 s, 15 s; 19 s, 20 s
    # a later pass, with newer checkpoints, keeps what this one kept
    more = [s for s in seqs if s not in doomed] + [2100, 2200]
    taken |= {2100: 21.0, 2200: 22.0}
    assert thinned(more, taken, step=5.0) == [1900]  # in the span of 2000 (20 s)


def test_a_checkpoint_of_unknown_time_is_kept() -> None:
    seqs = [1, 2, 3, 4, 5]
    taken = {1: 1.0, 2: 2.0, 4: 4.0, 5: 5.0}  # 3: an earlier writer's, its time not read
    assert thinned(seqs, taken, step=10.0) == [2]  # 1 is the oldest of its span


def test_a_step_of_zero_thins_nothing() -> None:
    seqs = [1, 2, 3, 4]
    assert thinned(seqs, {s: 1.0 for s in seqs}, step=0.0) == []
