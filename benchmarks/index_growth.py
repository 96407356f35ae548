"""What a queue's index and checkpoints hold over time, under a soak-like load, embedded.

One queue on a local directory: batches of 20 (a fifth delayed, a fifth grouped, a fifth with a
tenant), single enqueues with a dedup id and a group, two consumers completing what they get
and failing 3 % of it. Every ``--every`` seconds it prints the process's RSS, the backlog, the
newest checkpoint's size and each of its fields' encoded size and length: a field that grows
while the backlog does not is memory and storage no retention bounds. ``--dedup`` gives every
batched message a dedup id (as the soak's producers do); ``--trace`` follows allocations
(tracemalloc) and prints, at each report after the retention has filled, the lines whose live
memory grew most since then. ``--trim`` gives the C heap's free pages back every minute, as a
broker does (``s3q.broker.heap``).

    python benchmarks/index_growth.py --minutes 5 --rate 1000
    python benchmarks/index_growth.py --minutes 10 --rate 500 --dedup --trace
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import msgspec

import s3q
from s3q.broker import heap
from s3q.index import checkpoint


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


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in [
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        ]
    ]


def heap_mib() -> str:
    """The C heap (glibc's ``mallinfo2``): in use, free inside it, mapped apart; and the
    blocks Python's allocator holds. Free memory that grows is fragmentation, not a leak."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _Mallinfo2
        m = libc.mallinfo2()
    except (OSError, AttributeError):
        return f"python blocks {sys.getallocatedblocks()}"
    mib = 1024 * 1024
    return (
        f"heap used {m.uordblks / mib:5.1f} free {m.fordblks / mib:5.1f} "
        f"mapped {m.hblkhd / mib:5.1f} MiB  python blocks {sys.getallocatedblocks()}"
    )


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


RETENTION = 120.0  # seconds completed messages are kept (the dedup window is half)


def grown(since: tracemalloc.Snapshot, top: int = 12) -> list[str]:
    """The lines whose live memory grew most since ``since`` (with tracemalloc on)."""
    now = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)]
    )
    diff = now.compare_to(since, "lineno")
    return [
        f"    {d.size_diff / 1024:+9.1f} KiB {d.count_diff:+7d}  {d.traceback}" for d in diff[:top]
    ]


async def run(
    root: Path, minutes: float, rate: int, every: float, dedup: bool, trace: bool, trim: bool
) -> None:
    q = await s3q.open_async(
        str(root),
        completed_retention=RETENTION,
        dedup_window=RETENTION / 2,
        checkpoint_interval=10,
        gc_grace=30,
    )
    stop = time.monotonic() + minutes * 60
    k = 0

    async def produce() -> None:
        nonlocal k
        while time.monotonic() < stop:
            items = []
            for _ in range(20):
                r = random.random()
                k += 1
                item: dict[str, object] = {"payload": os.urandom(200)}
                if dedup:
                    item["dedup_id"] = f"b{k}"
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
        full: tracemalloc.Snapshot | None = None  # once the retention has filled
        while time.monotonic() < stop:
            await asyncio.sleep(every)
            stats = await q.stats()
            print(
                f"{time.monotonic() - started:5.0f} s  rss {rss_mib():6.1f} MiB  {heap_mib()}  "
                f"backlog {stats.pending + stats.delayed + stats.processing + stats.retry:6d}  "
                f"checkpoint {checkpoint_fields(root)}",
                flush=True,
            )
            if trace and time.monotonic() - started >= RETENTION + every:
                if full is None:
                    full = tracemalloc.take_snapshot()
                else:
                    print("\n".join(grown(full)), flush=True)

    trimming = asyncio.ensure_future(heap.trim_every() if trim else asyncio.sleep(0))
    await asyncio.gather(produce(), singles(), consume(), consume(), report())
    trimming.cancel()
    await q.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--rate", type=int, default=1000, help="batched messages a second")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between reports")
    parser.add_argument("--dedup", action="store_true", help="a dedup id on every message")
    parser.add_argument("--trace", action="store_true", help="print what grew (tracemalloc)")
    parser.add_argument(
        "--trim",
        action="store_true",
        help="give the C heap's free pages back every minute, as a broker does (s3q.broker.heap)",
    )
    args = parser.parse_args()
    if args.trace:
        tracemalloc.start(8)
    with tempfile.TemporaryDirectory() as root:
        asyncio.run(
            run(
                Path(root) / "q",
                args.minutes,
                args.rate,
                args.every,
                args.dedup,
                args.trace,
                args.trim,
            )
        )


if __name__ == "__main__":
    main()
