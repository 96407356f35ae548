"""Where a local store's writes run: small ones on the caller's thread while the disk is quick,
large ones and those after a slow one in a thread (so the event loop keeps serving)."""

from __future__ import annotations

import asyncio
import threading
import time

from s3q.store import local
from s3q.store.local import Writes


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
