"""What an error answer may tell a caller: the queue by its name, never where or how it is stored.

Below the broker, an error names its queue by the queue's store URL (``s3://bucket/prefix/q``,
``file:///srv/queues/q``), and a store's failure carries the store's own text (endpoints, paths,
object keys). An answer names the queue instead, and says of a failed store only that it failed;
the broker's log keeps the full text. An error that is not one of s3q's own (a bug) is answered
with nothing of it.
"""

from __future__ import annotations

import logging

from ..errors import OutcomeUnknown, StoreError, StoreFull, UnsupportedFormat

log = logging.getLogger("s3q.broker")

INTERNAL = "internal error: the broker's log has the details"


def message(exc: BaseException, queue: str | None, store_url: str) -> str:
    """The text of ``exc`` as a caller may see it (``queue``: the queue the call named;
    ``store_url``: where the broker's queues live)."""
    which = f" of queue {queue}" if queue else ""
    if isinstance(exc, StoreFull):
        log.warning("full store answered to a caller: %s", exc)
        return (
            f"the store{which} is full (no space left on the broker's disk): nothing was "
            "done; the same call succeeds once space is freed"
        )
    if isinstance(exc, StoreError) and not isinstance(exc, OutcomeUnknown | UnsupportedFormat):
        log.warning("store failure answered to a caller: %s", exc)
        return f"the store{which} failed; try again (the broker's log has the details)"
    # "s3://bucket/prefix/q..." names queue q; the base alone, the store
    base = store_url.rstrip("/")
    return str(exc).replace(base + "/", "").replace(base, "the store")
