"""Staged payloads: bulk loads write payloads beside the log, then commit them in one operation.

A bulk writer (a Spark task) concatenates many payloads into one object ``staged/<job>/<name>``
and describes the messages in it (offset, size and options of each) in a :class:`StagedObject`.
The queue's writer then commits every staged object of the job in one log object
(``Engine.enqueue_staged``): a job that fails before that commit enqueues nothing. The index
counts the live messages of each staged object like those of a log object, so the object is
garbage once its last message is finished. Staged objects nobody committed (a job killed before
its commit) are deleted by the collector once older than ``max(gc_grace, ORPHAN_AGE)``; their
names carry the time they were written for that.
"""

from __future__ import annotations

import secrets
import time

import msgspec

PREFIX = "staged/"
ORPHAN_AGE = 6 * 3600.0  # seconds before an uncommitted staged object may be collected


class StagedObject(msgspec.Struct, kw_only=True):
    """The messages whose payloads lie in staged object ``key``, as columns (one entry per
    message; an absent column means the default for every message)."""

    key: str
    size: int  # bytes of the object
    offsets: list[int]
    sizes: list[int]
    priorities: list[int] | None = None
    delays: list[float] | None = None
    groups: list[str | None] | None = None
    dedup_ids: list[str | None] | None = None
    attributes: list[dict[str, str] | None] | None = None
    tenants: list[str | None] | None = None
    origin: str = "the staged data"  # where the rows came from, for error messages
    first_row: int = 0  # the row number of the first message within ``origin``
    rows: list[int] | None = None  # each message's row number, if they do not follow on

    def __len__(self) -> int:
        return len(self.offsets)

    def row(self, index: int) -> str:
        """Names message ``index`` for an error message."""
        rows = self.rows
        number = rows[index] if rows is not None and index < len(rows) else self.first_row + index
        return f"row {number} of {self.origin}"


def job_prefix(job: str) -> str:
    """Where the staged objects of job ``job`` are written."""
    return f"{PREFIX}{job}/"


def object_key(job: str, name: str, now: float | None = None) -> str:
    """A fresh staged object name in job ``job``; it records when it was written."""
    millis = int((time.time() if now is None else now) * 1000)
    return f"{job_prefix(job)}{millis:013d}-{name}-{secrets.token_hex(4)}"


def written_at(key: str) -> float | None:
    """When staged object ``key`` was written (unix seconds), or None if not such a name."""
    if not key.startswith(PREFIX):
        return None
    stamp = key.rpartition("/")[2].partition("-")[0]
    return int(stamp) / 1000 if len(stamp) == 13 and stamp.isdigit() else None
