"""The C heap of a broker: the free pages inside it given back to the system now and then.

glibc's malloc keeps what a process frees for its next allocations, and gives memory back to the
system only from the top of a heap. A broker's large buffers (request bodies, log objects,
checkpoints) come and go between allocations that live longer, and the holes they leave stay
resident: an embedded queue under a soak's load held 26-27 MiB free inside its heap beside
17-19 MiB in use, and with the free pages given back every minute its RSS stayed 8-18 MiB lower
(docs/reliability.md, "The broker's heap"). ``malloc_trim`` gives back every free page, inside
the heap too, in well under a millisecond. (Mapping large buffers apart instead, with glibc's
mmap threshold, kept the heap free of holes but cost the broker 20-90 % more CPU per message:
a mapping, and fresh pages, for each request body.)

An embedded queue leaves its host process's allocator alone: this is for the broker.
"""

from __future__ import annotations

import asyncio
import ctypes
import sys
from collections.abc import Callable

#: seconds between two trims of a broker's heap
TRIM_EVERY = 60.0


def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim  # glibc's; musl has none
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def trim() -> bool:
    """Give the free pages of this process's C heap back to the system now: whether any were
    (False where the C library is not glibc)."""
    malloc_trim = _malloc_trim()
    return malloc_trim is not None and bool(malloc_trim(0))


async def trim_every(seconds: float = TRIM_EVERY) -> None:
    """:func:`trim` every ``seconds``, until cancelled (at once, where there is nothing to do)."""
    malloc_trim = _malloc_trim()
    if malloc_trim is None:
        return
    while True:
        await asyncio.sleep(seconds)
        malloc_trim(0)  # (under a millisecond: not worth a thread)
