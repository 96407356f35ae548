"""The time each log object is stamped with (its header's ``at``): never below the object
before it, so the stamps of a log are non-decreasing in its sequence numbers and a reader finds
the log objects of a time window by binary search over their headers (``s3q.history.timeline``).

A writer's clock may step back (NTP) or run behind the clock of the writer before it (another
host): each stamp is the clock, or the stamp before it if that is later. A new writer starts
from the last stamp its recovery read (the last log object replayed, else the checkpoint's
time). The operations of an object read the writer's clock as they join the batch that the
object is stamped when it stops filling, so with a clock that does not step back, every
event of object ``N`` lies between the stamps of objects ``N - 1`` and ``N``.

Writers that keep this rule say so in every header they write: their token ends with
:data:`MARK`. No format changes: the token is an opaque string to every reader, and a log
object written by an older build (no mark) is read without the guarantee.
"""

from __future__ import annotations

from collections.abc import Callable

MARK = ".t"  # the end of the token of a writer whose stamps never go back


def marked(writer: str) -> bool:
    """Whether the writer of a log object (its header's ``writer``) keeps the rule."""
    return writer.endswith(MARK)


class Stamps:
    """The stamps of one writer: ``clock()``, never below the stamp before."""

    def __init__(self, clock: Callable[[], float], floor: float = 0.0) -> None:
        self.clock = clock
        self.last = floor

    def after(self, at: float) -> None:
        """A log object stamped ``at`` precedes the next stamp (read while recovering)."""
        self.last = max(self.last, at)

    def __call__(self) -> float:
        self.last = max(self.last, self.clock())
        return self.last
