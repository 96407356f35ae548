"""Puts the tests' support code on a benchmark's import path: the fault harness
(``fault_harness``: workloads, clusters of brokers, soaks) lives there, outside the package."""

import sys
from pathlib import Path

SUPPORT = Path(__file__).resolve().parents[1] / "tests" / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))
