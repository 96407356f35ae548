"""memory:// queues are shared by name within a process."""

from __future__ import annotations

import pytest
from conftest import FakeClock, MemoryEnv

import s3q

S = s3q.MessageStatus


def test_memory_store_shared_by_name_within_process(clock: FakeClock) -> None:
    a, b = MemoryEnv(), MemoryEnv()
    with a.open(clock=clock) as q:
        mid = q.enqueue(b"x")
    with b.open(clock=clock) as q:
        assert q.stats().total_enqueued == 0
        with pytest.raises(s3q.MessageNotFound):
            q.status(mid)
    with a.open(clock=clock) as q:
        assert q.status(mid) is S.PENDING
