"""Fault injection and history checking: how s3q is tested against a store that fails.

``schedule``  which fault each request meets: seeded profiles, partitions, scripted faults.
``store``     :class:`FaultyStore`, a wrapper around any store that fails the way object stores
              do (5xx before or after applying, resets, hung requests, bodies cut short,
              partitions of one writer), on a seeded schedule.
``proxy``     the same faults in an HTTP proxy in front of an S3 server, for the real client.
``checker``   a record of every call and its outcome, and the checker of what must hold.

The harness that runs workloads, clusters and soaks under these faults is the tests' support
code (``tests/support/fault_harness``), not part of the package.
"""

from .checker import Call, History, Violation, check
from .schedule import HARSH, REALISTIC, FaultProfile, Schedule
from .store import FaultyStore

__all__ = [
    "HARSH",
    "REALISTIC",
    "Call",
    "FaultProfile",
    "FaultyStore",
    "History",
    "Schedule",
    "Violation",
    "check",
]
