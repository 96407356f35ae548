"""Killing a child process with SIGKILL at a random point of its output."""

from __future__ import annotations

import os
import random
import signal

from conftest import LineReader


def _kill_after_random_lines(proc, reader: LineReader, rng: random.Random) -> list[str]:
    assert reader.next() == "ready"
    k = rng.randint(1, 200)
    lines = [reader.next() for _ in range(k)]
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    lines += reader.rest()  # acknowledged before the kill but not yet read by us
    proc.stdin.close()
    proc.stdout.close()
    proc.stderr.close()
    return lines
