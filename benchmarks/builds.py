"""Two builds of s3q side by side on the batch paths, alternating in one run (the machine is
noisy: never compare figures from two runs). Each figure is measured in a process of its own
importing the build given (``--build NAME=SRC``, SRC a source tree such as a git worktree's
``src``):

* ``s3q bench`` on file:// (enqueue, dequeue+complete, mixed; 1 KiB, batches of ``--batch``);
* the tenants benchmark's batch drain (``benchmarks/tenants.py``): no tenants, and 90 % of the
  messages one noisy tenant's, on memory://;
* the fair benchmark's batch drain (``benchmarks/fair.py``): 3 priorities, strict and fair.

    python benchmarks/builds.py --build before=../before/src --build after=src --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent

DRAIN = """
import sys, uuid, argparse
sys.path[:0] = [{bench!r}, {support!r}]
import tenants, fair
kind, messages, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
url = "memory://b-" + uuid.uuid4().hex
if kind.startswith("tenants"):
    print(tenants.drain(url, {{}}, messages, batch, kind == "tenants-noisy"))
else:
    args = argparse.Namespace(messages=messages, priorities=3, batch=batch)
    print(fair.drain(url, {{"delivery": kind.split("-")[1]}}, args)[0])
"""


def run(src: str, argv: list[str]) -> str:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
    done = subprocess.run(
        [sys.executable, *argv], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


def measure(src: str, messages: int, batch: int) -> dict[str, float]:
    out: dict[str, float] = {}
    bench = json.loads(
        run(
            src,
            [
                "-m",
                "s3q.cli",
                "bench",
                "--messages",
                str(messages),
                "--batch",
                str(batch),
                "--json",
            ],
        )
    )
    for phase in bench["phases"]:
        out[f"bench {phase['phase']}"] = phase["msg_per_s"]
    code = DRAIN.format(bench=str(HERE), support=str(HERE.parent / "tests" / "support"))
    for kind in ("tenants-none", "tenants-noisy", "fair-strict", "fair-fair"):
        out[kind] = float(run(src, ["-c", code, kind, str(messages), str(batch)]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", action="append", required=True, help="NAME=SRC")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    builds = dict(b.split("=", 1) for b in args.build)
    print(
        "python benchmarks/builds.py "
        + " ".join(f"--build {b}" for b in args.build)
        + f" --messages {args.messages} --batch {args.batch} --rounds {args.rounds}\n"
    )
    figures: dict[str, dict[str, list[float]]] = {name: {} for name in builds}
    for _ in range(args.rounds):
        for name, src in builds.items():
            for key, value in measure(src, args.messages, args.batch).items():
                figures[name].setdefault(key, []).append(value)
    names = list(builds)
    print("| path (msg/s: median, lowest-highest of rounds) | " + " | ".join(names) + " | change |")
    print("|---|" + "---|" * len(names) + "---|")
    for key in figures[names[0]]:
        medians = [statistics.median(figures[n][key]) for n in names]
        change = medians[-1] / medians[0] - 1
        cells = " | ".join(
            f"{m:,.0f} ({min(figures[n][key]):,.0f}-{max(figures[n][key]):,.0f})"
            for m, n in zip(medians, names, strict=True)
        )
        print(f"| {key} | {cells} | {change:+.1%} |")


if __name__ == "__main__":
    main()
