"""A deep backlog costs the writer memory and checkpoint bytes by the messages in flight, not by
its depth: 2,000,000 untouched pending messages, measured in a process of their own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import child_env

pytestmark = pytest.mark.slow

LOAD = """
import json, os, sys, s3q

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

q = s3q.open(sys.argv[1], payload_cache_bytes=0)
batch = [b"%099d" % i for i in range(10_000)]
q.enqueue(b"warm-up")
base = rss()
for _ in range(200):
    q.enqueue_batch(batch)
grown = rss() - base
first = q.dequeue()[0]
q.close()
print(json.dumps({"grown": grown, "first": first.payload.decode()}))
"""


def test_two_million_pending_messages_cost_little_memory_and_checkpoint(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/q"
    done = subprocess.run(
        [sys.executable, "-c", LOAD, url],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["first"] == "warm-up"
    assert result["grown"] < 100 * 2**20, f"writer grew by {result['grown'] / 2**20:.0f} MiB"
    newest = max((tmp_path / "q" / "checkpoint").iterdir())
    assert newest.stat().st_size < 20 * 2**20, f"checkpoint at rest: {newest.stat().st_size:,} B"


def test_a_batch_of_alternating_priorities_is_a_run_per_priority(tmp_path: Path) -> None:
    """Members of one priority are committed together, so the index holds a run per priority
    (not per message); ids still answer the batch in its order, and delivery is by priority,
    then in the order sent, with a delayed member in the way changing nothing."""
    import asyncio

    import s3q
    from s3q import snapshot

    url = f"file://{tmp_path}/q"
    items: list[dict[str, object]] = [
        {"payload": b"m%d" % i, "priority": i % 3} for i in range(3_000)
    ]
    items[4]["delay"] = 600.0  # a record of its own among priority 1's run
    with s3q.open(url) as q:
        sent = q.enqueue_batch(items)
        assert q.status(sent[4]) is s3q.MessageStatus.DELAYED
        assert q.status(sent[7]) is s3q.MessageStatus.PENDING
        got = q.dequeue(max_messages=3_000)
    want = [i for p in (2, 1, 0) for i in range(3_000) if i % 3 == p and i != 4]
    assert [m.payload for m in got] == [b"m%d" % i for i in want]
    assert [m.id for m in got] == [sent[i] for i in want]
    loaded = asyncio.run(snapshot.load(s3q.store.open_store(url)))
    assert loaded.state.runs.count <= 3


def test_a_batch_with_a_group_across_priorities_keeps_the_group_in_order(
    tmp_path: Path,
) -> None:
    """A group is FIFO whatever its members' priorities, so a batch holding one is committed in
    the order sent: the group's first member (low priority) blocks its second (high)."""
    import s3q

    items: list[dict[str, object]] = [
        {"payload": b"g-first", "priority": 0, "group": "g"},
        {"payload": b"plain", "priority": 1},
        {"payload": b"g-second", "priority": 5, "group": "g"},
    ]
    with s3q.open(f"file://{tmp_path}/q") as q:
        q.enqueue_batch(items)
        got = [m.payload for m in q.dequeue(max_messages=3)]
    assert got == [b"plain", b"g-first"]
