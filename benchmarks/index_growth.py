"""What a queue's index and checkpoints hold over time, under a soak-like load, embedded.

One queue on a local directory: batches of 20 (a fifth delayed, a fifth grouped, a fifth with a
tenant), single enqueues with a dedup id and a group, two consumers completing what they get
and failing 3 % of it. Every ``--every`` seconds it prints the process's RSS, the backlog, the
newest checkpoint's size and each of its fields' encoded size and length: a field that grows
while the backlog does not is memory and storage no retention bounds.

    python benchmarks/index_growth.py --minutes 5 --rate 1000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
import time
from pathlib import Path

import msgspec

import s3q
from s3q import checkpoint


def checkpoint_fields(root: Path) -> dict[str, int]:
    """Sizes (bytes) and lengths (``n_``) of the newest checkpoint's fields."""
    keys = sorted((root / "checkpoint").glob("*"))
    if not keys:
        return {}
    data = keys[-1].read_bytes()
    snap = checkpoint.decode(data, str(keys[-1])).snapshot
    out = {"total": len(data)}
    for name in snap.__struct_fields__:
        value = getattr(snap, name)
        raw = value if isinstance(value, msgspec.Raw) else msgspec.msgpack.encode(value)
        out[name] = len(raw)
        if isinstance(value, list | dict):
            out["n_" + name] = len(value)
    return out


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


async def run(root: Path, minutes: float, rate: int, every: float) -> None:
    q = await s3q.open_async(
        str(root), completed_retention=120, dedup_window=60, checkpoint_interval=10, gc_grace=30
    )
    stop = time.monotonic() + minutes * 60

    async def produce() -> None:
        while time.monotonic() < stop:
            items = []
            for _ in range(20):
                r = random.random()
                item: dict[str, object] = {"payload": os.urandom(200)}
                if r < 0.2:
                    item["delay"] = random.uniform(0, 30)
                elif r < 0.4:
                    item["group"] = f"g{random.randrange(50)}"
                elif r < 0.6:
                    item["tenant"] = f"t{random.randrange(10)}"
                items.append(item)
            await q.enqueue_batch(items)
            await asyncio.sleep(20 / rate)

    async def singles() -> None:
        k = 0
        while time.monotonic() < stop:
            k += 1
            await q.enqueue(os.urandom(100), dedup_id=f"d{k}", group=f"s{k % 7}")
            await asyncio.sleep(0.05)

    async def consume() -> None:
        while time.monotonic() < stop:
            got = await q.dequeue(max_messages=20, wait=1.0, visibility_timeout=30)
            done = []
            for m in got:
                if random.random() < 0.03:
                    await q.fail(m, "failed on purpose")
                else:
                    done.append(m)
            if done:
                await q.complete_batch(done)

    async def report() -> None:
        started = time.monotonic()
        while time.monotonic() < stop:
            await asyncio.sleep(every)
            stats = await q.stats()
            print(
                f"{time.monotonic() - started:5.0f} s  rss {rss_mib():6.1f} MiB  "
                f"backlog {stats.pending + stats.delayed + stats.processing + stats.retry:6d}  "
                f"checkpoint {checkpoint_fields(root)}",
                flush=True,
            )

    await asyncio.gather(produce(), singles(), consume(), consume(), report())
    await q.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--rate", type=int, default=1000, help="batched messages a second")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between reports")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        asyncio.run(run(Path(root) / "q", args.minutes, args.rate, args.every))


if __name__ == "__main__":
    main()
