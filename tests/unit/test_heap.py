"""A broker gives the free pages inside its C heap back to the system (s3q.broker.heap): memory
freed between allocations that live on stays resident until then. Run in a Python process of its own
(the heap is the process's)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from s3q.broker import heap

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
    reason="glibc's malloc only",
)

PROBE = """
import sys
from s3q.broker import heap

def rss():
    with open("/proc/self/status") as status:
        return next(int(l.split()[1]) for l in status if l.startswith("VmRSS:")) // 1024

# 60 MiB in buffers of 64 KiB (below glibc's mmap threshold: from the heap), every 16th kept:
# what is freed lies in holes below the kept ones, not at the heap's top
chunks = [bytearray(b"x" * (64 << 10)) for _ in range(960)]
kept = chunks[::16]
del chunks
before = rss()
if sys.argv[1] == "trim":
    assert heap.trim()
print(before, rss())
"""


def probe(mode: str) -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    )
    before, after = map(int, out.stdout.split())
    return before, after


def test_a_trim_gives_back_the_free_pages_inside_the_heap() -> None:
    before, after = probe("trim")
    assert before >= 60 and before - after >= 45, (before, after)


def test_without_one_the_holes_stay_resident() -> None:
    before, after = probe("keep")
    assert before >= 60 and before - after < 5, (before, after)  # what a broker's heap held


def test_trim_every_trims_until_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(heap, "_malloc_trim", lambda: calls.append)

    async def run() -> None:
        task = asyncio.create_task(heap.trim_every(0.01))
        while len(calls) < 3:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert calls[:3] == [0, 0, 0]
