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
