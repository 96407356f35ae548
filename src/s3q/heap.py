"""The C heap of a process s3q runs (``s3q serve``, ``s3q worker``): large buffers mapped apart.

glibc's malloc gives a request of at least its mmap threshold (128 KiB at start) a mapping of
its own, returned to the system when freed, but raises the threshold, up to 32 MiB, to the
size of each such mapping freed. A queue's large buffers (request bodies, log objects,
checkpoints) then come from the heap, between smaller allocations that live longer, and the
holes they leave are kept: a broker leading a busy queue grew ~0.4 MiB a minute, its heap's
free space growing while what it used did not. Setting the threshold (which also stops the
raising) keeps them mapped apart (docs/reliability.md, "The broker's heap").

An embedded queue leaves its host process's allocator alone: this is for processes s3q owns.
"""

from __future__ import annotations

import ctypes
import os
import sys

#: glibc's mallopt parameter for the mmap threshold (malloc.h)
M_MMAP_THRESHOLD = -3
#: allocations of this many bytes or more are mapped apart (glibc's own starting threshold)
LARGE = 128 * 1024
#: the environment variable by which glibc's threshold is set: a value given there wins
ENVIRONMENT = "MALLOC_MMAP_THRESHOLD_"


def map_large_buffers(threshold: int = LARGE) -> bool:
    """Have this process's C library map every allocation of ``threshold`` bytes or more apart,
    so that freeing it gives it back. False, and nothing changed, where that library is not
    glibc or ``MALLOC_MMAP_THRESHOLD_`` already sets the threshold."""
    if not sys.platform.startswith("linux") or ENVIRONMENT in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, threshold))  # (musl's mallopt does nothing: 0)
