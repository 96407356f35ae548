"""What the broker logs of its requests: a summary line a minute, not a line each.

A line per request (uvicorn's access log) costs about 135 µs of broker CPU, more than the rest
of a single enqueue's work; it is off unless asked for (``s3q serve --access-log``). Instead,
at ``info``, the broker writes one line a period (60 s) with the native API and SQS requests it
answered in it, by outcome::

    s3q.broker requests in the last 60 s: 5210 (ok 5190, ReceiptExpired 18, StoreError 2)
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

log = logging.getLogger("s3q.broker")

SUMMARY_EVERY = 60.0  # seconds between summary lines


class RequestTally:
    """The requests answered since the last summary, by outcome (``ok`` or an error's name)."""

    def __init__(self) -> None:
        self.outcomes: Counter[str] = Counter()

    def taken(self) -> Counter[str]:
        """The tally so far, and a new one begun."""
        taken, self.outcomes = self.outcomes, Counter()
        return taken


def summary(outcomes: Counter[str], seconds: float) -> str:
    """One summary line: the requests of ``seconds`` by outcome, ok first, then the most
    frequent."""
    ok = outcomes.get("ok", 0)
    rest = sorted(((n, o) for o, n in outcomes.items() if o != "ok"), key=lambda x: (-x[0], x[1]))
    parts = [f"ok {ok}", *(f"{o} {n}" for n, o in rest)]
    return f"requests in the last {seconds:g} s: {sum(outcomes.values())} ({', '.join(parts)})"


async def summarize(tally: RequestTally, every: float = SUMMARY_EVERY) -> None:
    """Log a summary line each ``every`` seconds in which requests were answered."""
    while True:
        await asyncio.sleep(every)
        outcomes = tally.taken()
        if outcomes:
            log.info(summary(outcomes, every))


def show(level: str) -> None:
    """Let the broker's own log lines (``s3q.*``) through at ``level`` to standard error, as
    uvicorn does its own, unless the program configured logging for them."""
    logger = logging.getLogger("s3q")
    logger.setLevel(level.upper())
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s %(message)s"))
        logger.addHandler(handler)
