"""Where a local store's writes run: small ones on the caller's thread while the disk is quick,
large ones and those after a slow one in a thread (so the event loop keeps serving); how many
fsyncs a new object costs, by file system."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest

from s3q.store import local
from s3q.store.base import AlreadyExists
from s3q.store.local import LocalStore, Writes


def test_small_writes_run_in_place_until_one_is_slow() -> None:
    async def main() -> list[bool]:
        writes, here = Writes(), threading.get_ident()
        in_place: list[bool] = []

        def write(key: str, data: bytes | bytearray) -> None:
            in_place.append(threading.get_ident() == here)
            if key == "slow":
                time.sleep(local.SLOW_WRITE_SECONDS * 2)  # a disk that took its time

        await writes.run(write, "quick", b"x")
        await writes.run(write, "large", b"x" * (local.INLINE_WRITE_BYTES + 1))
        await writes.run(write, "slow", b"x")
        for _ in range(local.THREADED_AFTER_SLOW):
            await writes.run(write, "after", b"x")
        await writes.run(write, "again", b"x")
        return in_place

    in_place = asyncio.run(main())
    assert in_place[:3] == [True, False, True]
    assert not any(in_place[3:-1])  # after the slow one: in a thread
    assert in_place[-1]  # and then in place again


MOUNTS = """\
sysfs /sys sysfs rw 0 0
/dev/vda / ext4 rw,relatime 0 0
tmpfs /tmp tmpfs rw 0 0
/dev/vdb /srv/data xfs rw 0 0
server:/x /srv/data/nfs nfs4 rw 0 0
/dev/vdc /mnt/with\\040space btrfs rw 0 0
"""


def test_a_link_is_durable_with_its_file_on_ext4_xfs_and_btrfs_only(tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(MOUNTS)
    said = {
        where: local.link_syncs_with_file(Path(where), str(mounts))
        for where in (
            "/home/q",  # ext4 (/)
            "/tmp/q",  # tmpfs
            "/srv/data/q",  # xfs
            "/srv/data/nfs/q",  # nfs, inside the xfs mount: the longest mount point decides
            "/srv/datax/q",  # not inside /srv/data
            "/mnt/with space/q",  # btrfs, its mount point's space escaped
        )
    }
    assert said == {
        "/home/q": True,
        "/tmp/q": False,
        "/srv/data/q": True,
        "/srv/data/nfs/q": False,
        "/srv/datax/q": True,
        "/mnt/with space/q": True,
    }
    assert not local.link_syncs_with_file(Path("/q"), str(tmp_path / "absent"))


def test_a_new_object_costs_one_fsync_where_its_link_rides_on_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    for link_syncs, fsyncs in ((True, 1), (False, 2)):
        store = LocalStore(tmp_path / f"s{link_syncs}")
        store._link_syncs = link_syncs
        store._put_new("log/1", b"x" * 100)  # (its directory made and fsynced)
        synced.clear()
        store._put_new("log/2", b"y" * 100)
        assert len(synced) == fsyncs
        assert (tmp_path / f"s{link_syncs}" / "log" / "2").read_bytes() == b"y" * 100
        assert [p.name for p in (tmp_path / f"s{link_syncs}" / "log").iterdir()] in (
            ["1", "2"],
            ["2", "1"],
        )  # (no temporary file left)
        with pytest.raises(AlreadyExists):
            store._put_new("log/2", b"z")
        assert (tmp_path / f"s{link_syncs}" / "log" / "2").read_bytes() == b"y" * 100
