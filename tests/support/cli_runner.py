"""Running the ``s3q`` command line as a subprocess and reading what it printed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import child_env

Run = subprocess.CompletedProcess[str]


def cli(
    tmp_path: Path, *args: str, input: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m s3q.cli ARGS`` with S3Q_STORE in tmp_path and stdin not a terminal."""
    env = child_env()
    env["S3Q_STORE"] = str(tmp_path / "store")
    return subprocess.run(
        [sys.executable, "-m", "s3q.cli", *args],
        input=input,
        stdin=subprocess.DEVNULL if input is None else None,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=tmp_path,
    )


def ok(done: Run) -> str:
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    return done.stdout


def data(done: Run) -> Any:
    """The one JSON document a --json command prints, and nothing else."""
    return json.loads(ok(done))


def failed(done: Run, code: int, *words: str) -> str:
    """A clean failure: the exit code, no traceback, a message (one line for runtime errors)."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stdout == ""
    error = done.stderr.strip()
    if code == 1:
        assert error.startswith("Error: ") and "\n" not in error, error
    for word in words:
        assert word in error, (word, error)
    return error
