"""What a deep backlog costs the writer: memory, checkpoints and reopen time by queue depth.

    python benchmarks/depth.py [--pending 1000000 --pending 10000000 ...] [--size 100]
        [--batch 10000] [--store file|memory] [--build LABEL=SRC_DIR ...]

For each depth N and each build: a child process opens a fresh queue, loads N pending messages
of ``--size`` bytes with ``enqueue_batch`` (``--batch`` per call), and reports the growth of its
resident memory per message, the load's rate, and the bytes of the checkpoints written during
the load (``gc_grace`` is set high, so none of them is collected: their sizes add up to what
was written). It then closes the queue (which checkpoints) and a second child opens it again:
the reopen time, the checkpoint at rest, and the first dequeue. The memory store cannot be
reopened by another process, so ``--store memory`` reports the load only.

``--build`` runs an older build side by side in the same run: ``--build old=/tmp/s3q-old/src``
(a ``git worktree`` of the older commit); the default is this checkout's ``src``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent / "src"

LOAD = """
import json, os, resource, sys, time, s3q

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

url, n, size, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
q = s3q.open(url, gc_grace=1e9, checkpoint_interval=3600)
payloads = [bytes([65 + i % 26]) * size for i in range(batch)]
q.enqueue(b"warm-up")
base = rss()
started = time.perf_counter()
left = n
while left:
    take = min(batch, left)
    q.enqueue_batch(payloads[:take])
    left -= take
loaded = time.perf_counter() - started
grown = rss() - base
started = time.perf_counter()
q.close()
closed = time.perf_counter() - started
print(json.dumps({"rate": n / loaded, "grown": grown, "close": closed}))
"""

REOPEN = """
import json, os, sys, time, s3q

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

base = rss()
started = time.perf_counter()
q = s3q.open(sys.argv[1])
opened = time.perf_counter() - started
got = q.dequeue()
served = time.perf_counter() - started
print(json.dumps({"open": opened, "served": served, "grown": rss() - base, "got": len(got)}))
q.close()
"""


def child(src: Path, script: str, *args: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, "-c", script, *args], env=env, capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(f"child failed ({src}):\n{done.stderr}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def checkpoint_bytes(root: Path) -> tuple[int, int]:
    """All checkpoint bytes in the queue, and the newest checkpoint's."""
    files = sorted((root / "checkpoint").iterdir()) if (root / "checkpoint").exists() else []
    sizes = [f.stat().st_size for f in files]
    return sum(sizes), (sizes[-1] if sizes else 0)


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, action="append", help="repeatable")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--store", choices=["file", "memory"], default="file")
    parser.add_argument("--build", action="append", help="LABEL=SRC_DIR, repeatable")
    args = parser.parse_args()
    print("$ python " + shlex.join(sys.argv))
    builds = [b.split("=", 1) for b in args.build or [f"this={HERE}"]]
    print(
        "| build | pending | load msg/s | RSS growth | per message | checkpoints written "
        "| of payload bytes | close | checkpoint at rest | reopen | first dequeue | reopen RSS |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in args.pending or [1_000_000]:
        for label, src in builds:
            tmp = Path(tempfile.mkdtemp(prefix="s3q-depth-"))
            try:
                url = (
                    f"file://{tmp}/q"
                    if args.store == "file"
                    else f"memory://depth-{uuid.uuid4().hex}"
                )
                load = child(Path(src), LOAD, url, str(n), str(args.size), str(args.batch))
                row = [
                    label,
                    f"{n:,}",
                    f"{load['rate']:,.0f}",
                    mib(load["grown"]),
                    f"{load['grown'] / n:,.0f} B",
                ]
                if args.store == "file":
                    total, newest = checkpoint_bytes(tmp / "q")
                    written = total - newest  # the one written by close is not the load's
                    again = child(Path(src), REOPEN, url)
                    assert again["got"] == 1, again
                    row += [
                        mib(written),
                        f"{written / (n * args.size):.1%}",
                        f"{load['close']:.2f} s",
                        mib(newest),
                        f"{again['open']:.2f} s",
                        f"{again['served']:.2f} s",
                        mib(again["grown"]),
                    ]
                else:
                    row += ["-"] * 7
                print("| " + " | ".join(row) + " |", flush=True)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
