"""An OS crash on a local store whose file system makes a new object's link durable with the
file's fsync (ext4, XFS, btrfs: one fsync per commit, s3q.store.local) may leave the newest log
object linked but not written: empty, or its end never reached the disk. Its fsync had not
returned, so it was never acknowledged. The next writer removes it and goes on; every message
acknowledged before it is intact; a reader of the log skips it. A damaged object that is not
such a trace (its trailer written, its checksum wrong) is still refused, never removed.

The crash is injected by writing what it leaves behind: a kill -9 cannot lose the page cache.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

import s3q
from s3q.log import segment
from s3q.snapshot import load
from s3q.store import local
from s3q.store.local import LocalStore


@pytest.fixture(autouse=True)
def one_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever file system the tests run on, the store writes as on ext4 (one fsync)."""
    monkeypatch.setattr(local, "link_syncs_with_file", lambda path: True)


def _last(root: Path) -> int:
    return max(int(p.name) for p in (root / "log").iterdir() if p.name.isdigit())


def _tears(size_of: Callable[[bytes], bytes]) -> Callable[[Path], bytes]:
    """What a crash leaves of the next log object, from a real one's bytes."""

    def leave(root: Path) -> bytes:
        last = (root / "log" / segment.key(_last(root), "")).read_bytes()
        return size_of(last)

    return leave


TORN = {
    "empty": _tears(lambda whole: b""),
    "zeros": _tears(lambda whole: bytes(len(whole))),
    "end unwritten": _tears(lambda whole: whole[: len(whole) // 2] + bytes(len(whole) // 2 + 1)),
}


@pytest.mark.parametrize("torn", TORN, ids=list(TORN))
def test_a_torn_newest_log_object_is_removed_and_nothing_acknowledged_is_lost(
    tmp_path: Path, torn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="s3q")  # (another test may have raised it)
    root = tmp_path / "q"
    with s3q.open(f"file://{root}") as q:
        ids = q.enqueue_batch([b"m%d" % i for i in range(20)])
        q.complete(q.dequeue(1)[0])
    seq = _last(root) + 1
    (root / "log" / segment.key(seq, "")).write_bytes(TORN[torn](root))
    # a reader of the log, before any writer: the torn object is not in its snapshot
    loaded = _run_load(root)
    assert (loaded.seq, loaded.torn) == (seq - 1, seq)
    with s3q.open(f"file://{root}") as q:
        assert "cut short by a crash" in caplog.text
        st = q.stats()
        assert (st.pending, st.completed, st.total_enqueued) == (19, 1, 20)
        again = q.dequeue(100)
        assert [m.id for m in again] == ids[1:]
        q.complete_batch(again)
    # the writer wrote its own object where the torn one was
    assert segment.decode((root / "log" / segment.key(seq, "")).read_bytes(), "log").ops


def test_a_damaged_log_object_is_refused_not_removed(tmp_path: Path) -> None:
    root = tmp_path / "q"
    with s3q.open(f"file://{root}") as q:
        q.enqueue_batch([b"m%d" % i for i in range(5)])
    for ck in (root / "checkpoint").iterdir():
        ck.unlink()  # (so that the log is read from its start, its last object included)
    path = root / "log" / segment.key(_last(root), "")
    data = bytearray(path.read_bytes())
    data[-segment._TRAILER.size - 3] ^= 0xFF  # its header's (its trailer whole: not a crash's)
    path.write_bytes(bytes(data))
    with pytest.raises(s3q.StoreError, match="checksum"):
        s3q.open(f"file://{root}")
    assert path.read_bytes() == bytes(data)


def test_a_store_that_writes_whole_objects_does_not_skip_a_torn_looking_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the directory is fsynced after the link (other file systems; S3's PUT), an empty
    newest object is not a crash's trace: the queue refuses to open rather than drop it."""
    monkeypatch.setattr(local, "link_syncs_with_file", lambda path: False)
    root = tmp_path / "q"
    with s3q.open(f"file://{root}") as q:
        q.enqueue(b"x")
    (root / "log" / segment.key(_last(root) + 1, "")).write_bytes(b"")
    with pytest.raises(s3q.StoreError):
        s3q.open(f"file://{root}")


def _run_load(root: Path) -> object:
    import asyncio

    async def read() -> object:
        store = LocalStore(root)
        try:
            return await load(store, retries=1)
        finally:
            await store.close()

    return asyncio.run(read())
