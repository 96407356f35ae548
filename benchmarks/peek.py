"""What a peek costs beside a deep, busy queue: ``peek(10)`` on memory:// with ``--pending``
untouched messages and ``--leased`` of them leased (long leases), median and worst of 30.
Run it once per build to compare (PYTHONPATH=<a build's src>), alternating.

    python benchmarks/peek.py --pending 1000000 --leased 100000
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import s3q


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pending", type=int, default=1_000_000)
    parser.add_argument("--leased", type=int, default=100_000)
    args = parser.parse_args()
    with s3q.open(f"memory://peek-{uuid.uuid4().hex}", visibility_timeout=3600) as q:
        for start in range(0, args.pending, 10_000):
            q.enqueue_batch([b"x" * 100] * min(10_000, args.pending - start))
        leased = 0
        while leased < args.leased:
            leased += len(q.dequeue(max_messages=min(1000, args.leased - leased)))
        q.peek(10)
        times = []
        for _ in range(30):
            started = time.perf_counter()
            got = q.peek(10)
            times.append(time.perf_counter() - started)
        assert len(got) == 10, got
    print(
        f"python benchmarks/peek.py --pending {args.pending} --leased {args.leased}: "
        f"peek(10) {statistics.median(times) * 1000:.2f} ms median, "
        f"{max(times) * 1000:.2f} ms worst"
    )


if __name__ == "__main__":
    main()
