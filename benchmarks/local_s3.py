"""A moto S3 server on 127.0.0.1 for the benchmarks: the one the tests start, with a bucket."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))

from conftest import start_moto


def start(bucket: str) -> Any:
    """A running moto server (``.endpoint``, ``.store_options()``, ``.stop()``) holding an
    empty bucket named ``bucket``."""
    server = start_moto()
    server.client().create_bucket(Bucket=bucket)
    return server
