"""How long a queue takes to reopen after its writer was killed, by the length of its log.

    python benchmarks/reopen.py [--store s3|file] [--objects 1000 --objects 10000 ...]

For each length N: a child process opens a fresh queue and enqueues N messages one at a time
(each its own commit, so N log objects), then is killed with SIGKILL: no close, no final
checkpoint. Once its lease has lapsed, this process opens the queue and times the open (and
the first dequeue, to show the queue serves), and prints how many log objects the open
replays. Checkpoints every 1,000 log objects and after a long replay bound the replay,
whatever N is.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

import local_s3

import s3q
from s3q import snapshot
from s3q.store import open_store

CHILD = """
import sys, s3q
q = s3q.open(sys.argv[1], **eval(sys.argv[2]))
for i in range(int(sys.argv[3])):
    q.enqueue(b"m%d" % i)
print("done", flush=True)
sys.stdin.read()  # held open until killed
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=["file", "s3"], default="s3")
    parser.add_argument("--objects", type=int, action="append", help="repeatable")
    parser.add_argument("--lease-ttl", type=float, default=1.0)
    args = parser.parse_args()
    print("$ python " + shlex.join(sys.argv))
    moto = None
    options: dict[str, Any] = {}
    if args.store == "file":
        root = f"file://{tempfile.mkdtemp(prefix='s3q-reopen-')}"
    else:
        moto = local_s3.start("reopen")
        options = moto.store_options()
        root = "s3://reopen"
    try:
        for n in args.objects or [1000, 10000]:
            url = f"{root}/q-{uuid.uuid4().hex[:8]}"
            opts = {**options, "lease_ttl": args.lease_ttl}
            written = time.monotonic()
            child = subprocess.Popen(
                [sys.executable, "-c", CHILD, url, repr(opts), str(n)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            assert child.stdout is not None
            assert child.stdout.readline().strip() == b"done", "the child did not finish"
            written = time.monotonic() - written
            child.send_signal(signal.SIGKILL)
            child.wait()
            replayed = asyncio.run(_replayed(url, options))  # what the next open must replay
            time.sleep(args.lease_ttl + 0.5)  # the killed writer's lease lapses
            started = time.monotonic()
            q = s3q.open(url, **opts)
            opened = time.monotonic() - started
            got = q.dequeue()
            served = time.monotonic() - started
            q.close()
            print(
                f"{n:>7,} log objects (written in {written:.0f} s): open {opened:.2f} s, "
                f"first dequeue answered after {served:.2f} s ({len(got)} message); "
                f"log objects replayed: {replayed:,}"
            )
    finally:
        if moto is not None:
            moto.stop()


async def _replayed(url: str, options: dict[str, Any]) -> int:
    store = open_store(url, dict(options))
    try:
        return (await snapshot.load(store)).replayed
    finally:
        await store.close()


if __name__ == "__main__":
    main()
