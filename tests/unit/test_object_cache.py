"""The cache of recent log objects: bounded in bytes, and holding only what live messages need."""

from __future__ import annotations

from s3q.writer.cache import SWEEP_EVERY, ObjectCache


def test_oldest_objects_leave_first_beyond_the_budget() -> None:
    cache = ObjectCache(max_bytes=10)
    for seq in range(1, 5):
        cache.put(seq, b"abcd")
    assert [cache.get(s) is not None for s in range(1, 5)] == [False, False, True, True]
    assert cache.size == 8


def test_objects_no_live_message_needs_are_swept_with_room_to_spare() -> None:
    live = {1, 2, 3}
    cache = ObjectCache(max_bytes=1 << 20, needed=live.__contains__)
    for seq in (1, 2, 3):
        cache.put(seq, b"x" * 100)
    live -= {1, 2}  # their messages finished
    for seq in range(4, 4 + SWEEP_EVERY):
        live.add(seq)
        cache.put(seq, b"y")
    assert (cache.get(1), cache.get(2)) == (None, None)
    assert cache.get(3) == b"x" * 100  # still needed: kept, however old
    assert cache.size == 100 + SWEEP_EVERY


def test_an_object_already_unneeded_is_not_kept() -> None:
    cache = ObjectCache(max_bytes=1 << 20, needed=lambda seq: False)
    cache.put(1, b"abc")
    assert cache.get(1) is None and cache.size == 0
