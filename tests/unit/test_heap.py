"""A process s3q owns maps its large buffers apart (s3q.heap): freeing one gives it back to the
system, where glibc's default would raise its threshold and serve the next from the heap. Each
case runs in a Python process of its own (the setting is the process's)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
    reason="glibc's malloc only",
)

PROBE = """
import ctypes, sys
from s3q.heap import map_large_buffers

class Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split())]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Mallinfo2
if sys.argv[1] == "set":
    print(map_large_buffers())
big = bytearray(8 << 20)  # mapped apart, then freed: glibc's default raises its threshold
del big
before = libc.mallinfo2().hblkhd
buffer = bytearray(1 << 20)
print(libc.mallinfo2().hblkhd - before)
"""


def probe(mode: str, **env: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        env={k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"} | env,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()


def test_a_large_buffer_is_mapped_apart_after_a_larger_one_was_freed() -> None:
    done, mapped = probe("set")
    assert done == "True" and int(mapped) >= 1 << 20


def test_without_it_glibc_serves_that_buffer_from_the_heap() -> None:
    assert probe("default") == ["0"]  # what the broker's heap crept with


def test_a_threshold_the_environment_gives_is_left_as_it_is() -> None:
    assert probe("set", MALLOC_MMAP_THRESHOLD_="65536")[0] == "False"
