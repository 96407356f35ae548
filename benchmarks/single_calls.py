"""CPU per single call as a queue's history grows: one caller enqueues, dequeues and completes
one message at a time on file:// (each call its own commit), and every ``--phase`` trios the
CPU per trio is printed with the completed messages the queue remembers
(``completed_retention``, an hour by default). A figure that rises with them is a cost that
grows with history (a checkpoint or a collection pass doing work in what is retained).

    python benchmarks/single_calls.py [--phases 6] [--phase 5000]

Run it with each build on PYTHONPATH to compare them (the figures are this process's CPU).
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import tempfile
import time

import s3q


async def main(phases: int, per_phase: int) -> None:
    with tempfile.TemporaryDirectory() as root:
        q = await s3q.open_async(f"file://{root}/q")
        try:
            for phase in range(phases):
                started = time.process_time()
                for _ in range(per_phase):
                    await q.enqueue(b"x" * 1024)
                    [msg] = await q.dequeue(1)
                    await q.complete(msg)
                cpu = (time.process_time() - started) / per_phase * 1e6
                stats = await q.stats()
                print(
                    f"after {(phase + 1) * per_phase:>7,} trios: {cpu:,.0f} µs of CPU per "
                    f"enqueue + dequeue + complete; {stats.completed:,} completed remembered"
                )
        finally:
            await q.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phases", type=int, default=6)
    parser.add_argument("--phase", type=int, default=5000, help="trios per phase")
    args = parser.parse_args()
    print("$ python " + shlex.join(["benchmarks/single_calls.py", *sys.argv[1:]]))
    asyncio.run(main(args.phases, args.phase))
