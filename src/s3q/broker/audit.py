"""The broker's audit trail: one JSON line per refused call and per admin action (and, with
``--audit-all``, per call), to a file or to standard output.

A line holds the time, the principal, the kind of credential it showed, the source address,
the action class, the operation, the queue, the outcome (``refused``, ``ok`` or the error's
class), why a refused call was refused, and the request id. Never a token, a secret, a
signature or a payload: nothing of a request's headers or body but what is listed.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import sys
from typing import IO

log = logging.getLogger("s3q.broker")

#: ``--audit-log`` value that writes the trail to standard output
STDOUT = "-"


class Audit:
    """The trail, written to ``target`` (a file, appended to; :data:`STDOUT`: standard output).
    ``everything``: a line for every call, not only refusals and admin actions."""

    def __init__(self, target: str, everything: bool = False) -> None:
        self.target, self.everything = target, everything
        self._out: IO[str] | None = None
        self._open()

    def _open(self) -> None:
        if self.target == STDOUT:
            self._out = sys.stdout
        else:
            self._out = open(self.target, "a", encoding="utf-8", buffering=1)  # noqa: SIM115

    def reopen(self) -> None:
        """Open the file again (after a rotation moved it away: on SIGHUP)."""
        if self.target != STDOUT:
            self.close()
            self._open()

    def close(self) -> None:
        out, self._out = self._out, None
        if out is not None and out is not sys.stdout:
            out.close()

    def record(
        self,
        *,
        principal: str | None,
        credential: str,
        source: str | None,
        action: str | None,
        operation: str,
        queue: str | None,
        outcome: str,
        request_id: str,
        reason: str | None = None,
    ) -> None:
        """One line of the trail."""
        entry = {
            "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
            "principal": principal,
            "credential": credential,
            "source": source,
            "action": action,
            "operation": operation,
            "queue": queue,
            "outcome": outcome,
            "reason": reason,
            "request_id": request_id,
        }
        out = self._out
        if out is None:
            return
        try:
            out.write(json.dumps(entry, separators=(",", ":")) + "\n")
            if out is sys.stdout:
                with contextlib.suppress(ValueError):
                    out.flush()
        except (OSError, ValueError) as exc:  # a full disk: the calls go on, the log says so
            log.error("the audit trail %s cannot be written: %s", self.target, exc)
