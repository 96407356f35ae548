"""When a checkpoint was taken: read from its first bytes (for this build's checkpoints and those
of earlier formats) for those an earlier writer took, and how collection finds the stable one."""

from __future__ import annotations

import asyncio
import random

import pytest
from conftest import SUPPORT_DIR

from s3q.index import checkpoint
from s3q.index.state import QueueState
from s3q.store import open_store
from s3q.writer import collector
from s3q.writer.checkpointer import Checkpointer


def encoded(seq: int, writer: str, at: float) -> bytes:
    return bytes(
        checkpoint.encode(checkpoint.Checkpoint(seq, writer, at, checkpoint.take(QueueState())))
    )


@pytest.mark.parametrize(
    ("seq", "writer", "at"),
    [
        (0, "a99f7ce3fd401919.t", 1_795_000_000.25),  # this build's writer tokens
        (100, "a99f7ce3fd401919", 1_790_000_002.0),  # earlier builds' tokens
        (2**40, "w" * 27, 3.5),  # the longest token the head holds
        (7, "", 12),  # a clock that gave an int
    ],
)
def test_the_head_of_a_checkpoint_holds_its_seq_and_time(seq: int, writer: str, at: float) -> None:
    data = encoded(seq, writer, at)
    assert checkpoint.head(data[: checkpoint.HEAD_BYTES]) == (seq, at)
    assert checkpoint.head(data) == (seq, at)


def test_a_head_cut_short_or_not_a_checkpoint_says_nothing() -> None:
    data = encoded(12, "a99f7ce3fd401919.t", 1_795_000_000.25)
    for cut in range(30):
        assert checkpoint.head(data[:cut]) is None, cut
    assert checkpoint.head(encoded(1, "w" * 40, 1.0)[: checkpoint.HEAD_BYTES]) is None
    assert checkpoint.head(b"\x94\xc0\xc0\xc0" + bytes(44)) is None  # nils, not its fields
    assert checkpoint.head(bytes(48)) is None


def test_the_checkpoints_of_earlier_formats_tell_their_time() -> None:
    found = sorted((SUPPORT_DIR / "fixtures").glob("queue-*/checkpoint/*"))
    assert len(found) >= 3
    for path in found:
        data = path.read_bytes()
        whole = checkpoint.decode(data, str(path))
        assert checkpoint.head(data[: checkpoint.HEAD_BYTES]) == (whole.seq, whole.at), path


def test_the_checkpointer_learns_when_a_checkpoint_it_did_not_write_was_taken() -> None:
    async def run() -> None:
        store = open_store("memory://checkpoint-head")
        now = [2_000.0]
        ours = Checkpointer(store, "w1", lambda: now[0], 1000, 60.0)
        await store.put(checkpoint.key(5), encoded(5, "w0", 1_000.0))
        await store.put(checkpoint.key(6), b"\x94 not a checkpoint" + bytes(40))
        await store.put(checkpoint.key(7), encoded(8, "w0", 1_000.0))  # under another key
        assert await ours.taken_at(5) == 1_000.0
        # what it cannot read the time of counts as taken when first seen (it was there)
        assert await ours.taken_at(6) == 2_000.0
        assert await ours.taken_at(7) == 2_000.0
        assert await ours.taken_at(9) is None  # not in the store: nothing learnt
        assert ours.known == {5: 1_000.0, 6: 2_000.0, 7: 2_000.0}
        now[0] = 3_000.0
        await store.delete(checkpoint.key(5))
        assert await ours.taken_at(5) == 1_000.0  # known: not read again
        await store.close()

    asyncio.run(run())


class _Times:
    """What collection asks of a writer to find the stable checkpoint: each one's time."""

    def __init__(self, times: dict[int, float | None], known: set[int]) -> None:
        self.times, self.known, self.read = times, known, 0

    async def checkpoint_taken_at(self, seq: int) -> float | None:
        if seq not in self.known:
            self.read += 1
            self.known.add(seq)
        return self.times[seq]


def stable(writer: _Times, cutoff: float) -> int:
    return asyncio.run(collector._stable(writer, sorted(writer.times), cutoff))  # type: ignore[arg-type]


def test_the_stable_checkpoint_is_found_with_a_few_reads_of_those_not_known() -> None:
    """A new writer finds 1,000 checkpoints an earlier one took, a second apart, and knows
    only the newest: the newest of those taken by the cutoff, after about ten reads."""
    times: dict[int, float | None] = {seq: float(seq) for seq in range(1, 1001)}
    writer = _Times(times, known={1000})
    assert stable(writer, 640.5) == 640
    assert writer.read <= 11
    assert stable(writer, 640.5) == 640  # known from then on: read once
    assert writer.read <= 11
    assert stable(_Times(times, known={1000}), 0.5) == 0  # none old enough
    idle = _Times(times, known={1000})
    assert stable(idle, 5000.0) == 1000 and idle.read == 0  # the newest: nothing read


def test_whatever_the_order_the_stable_checkpoint_was_taken_by_the_cutoff() -> None:
    """Times out of order (a clock that jumped, a time the store would not give): the one
    chosen is always old enough, never a younger one."""
    rng = random.Random(36)
    for _ in range(200):
        count = rng.randint(1, 40)
        times: dict[int, float | None] = {
            seq: None if rng.random() < 0.1 else rng.uniform(0, 100) for seq in range(1, count + 1)
        }
        cutoff = rng.uniform(0, 100)
        found = stable(_Times(times, known=set()), cutoff)
        at = times.get(found)
        assert found == 0 or (at is not None and at <= cutoff), (times, cutoff, found)
