"""Retirement: on a queue with ``retention``, the messages that outlived it are removed, through
the log (a ``Retire`` operation), whatever their state, as SQS's MessageRetentionPeriod removes
them.

The writer asks the index what was enqueued at or before ``now - retention``
(``index.removal.retiring``: a look at two heaps when nothing is due, none at all on a queue
without retention) whenever it is about to choose messages (a dequeue, a lease, the reads,
which sweep first), to settle a lease (so a receipt of a retired message is stale), to locate
or purge messages, and to seal a batch for the store (so a queue only written to retires
too). An idle queue makes no request for it: what came due meanwhile is retired by its next
call, before that call sees it.
"""

from __future__ import annotations

from ..index import removal
from ..log.ops import Retire
from .commit import Batch
from .core import Core


def retire(core: Core) -> Batch | None:
    """Log a Retire of every message past the queue's retention, if any; the batch it rides."""
    retention = core.config.retention
    if not retention or core.closed or core.commit.halted is not None:
        return None
    now = core.clock()
    found = removal.retiring(core.state, now - retention)
    if found is None:
        return None
    mids, ranges = found
    core.tally.retired += len(mids) + sum(count for _, _, count in ranges)
    batch = core.commit.add(Retire(mids, now, ranges or None))
    core.notify()  # a group's next message may head it now
    return batch


def next_due(core: Core) -> float | None:
    """When a message may next come due for retirement (None: none can, or no retention),
    once ``retire`` has run: the queue's retention after the oldest enqueue the ages hold."""
    retention = core.config.retention
    if not retention:
        return None
    oldest = core.state.ages.oldest()
    return None if oldest is None else oldest + retention
