"""Reads of one writer's queue that change nothing but expired leases: a message's status, the
queue's counts (``stats``), and a look at the next deliverable messages (``peek``).

Each read first buries the leases that ran out on their last attempt (``Leasing.sweep``), so
what it reports as dead is dead.
"""

from __future__ import annotations

from ..errors import MessageNotFound
from ..index.records import DONE
from ..message import Message, MessageStatus, QueueStats
from .core import Core
from .leasing import Leasing
from .payloads import Payloads, message


class Reads:
    """Answers what one writer's queue holds."""

    def __init__(self, core: Core, leasing: Leasing, payloads: Payloads) -> None:
        self.core = core
        self.leasing = leasing
        self.payloads = payloads

    async def status(self, mid: str) -> MessageStatus:
        core = self.core
        core.check()
        await self.leasing.sweep()
        rec = await self.leasing.find(mid)
        now, retention = core.clock(), core.config.completed_retention
        if rec is None:
            at = core.state.completed_at(mid)
            if at is not None and at + retention > now:
                return MessageStatus.COMPLETED
        elif rec.state != DONE or rec.finished_at + retention > now:
            return core.state.status(rec, now)
        raise MessageNotFound(f"no message {mid!r} in queue {core.store.url}")

    async def stats(self) -> QueueStats:
        core = self.core
        core.check()
        await self.leasing.sweep()
        now, state, commit, tally = core.clock(), core.state, core.commit, core.tally
        counts = state.counts(now, core.config.completed_retention)
        quiet = state.quiet_counts(now)
        store = core.store.counts
        return QueueStats(
            pending=counts[MessageStatus.PENDING],
            delayed=counts[MessageStatus.DELAYED],
            processing=counts[MessageStatus.PROCESSING],
            retry=counts[MessageStatus.RETRY],
            completed=counts[MessageStatus.COMPLETED],
            dead=counts[MessageStatus.DEAD],
            total_enqueued=state.total_enqueued,
            commits=commit.commits,
            mean_ops_per_commit=commit.ops_committed / commit.commits if commit.commits else 0.0,
            store_requests=store.requests,
            store_puts=store.puts,
            store_gets=store.gets,
            store_bytes_written=store.bytes_written,
            store_errors=store.errors,
            store_retries=store.retries,
            log_seq=commit.durable,
            commit_waits=commit.waits,
            store_lists=store.lists,
            store_deletes=store.deletes,
            buffered_answers=tally.buffered_answers,
            buffered_acks=tally.buffered_acks,
            deliveries_by_priority=dict(sorted(tally.deliveries.items())),
            noisy_tenants=quiet.noisy_tenants,
            quiet_visible=quiet.visible,
            quiet_in_flight=quiet.in_flight,
            quiet_delayed=quiet.delayed,
            quiet_oldest_age=quiet.oldest_age,
            deliveries_noisy=tally.deliveries_noisy,
            deliveries_quiet=tally.deliveries_quiet,
            history_objects=core.horizon.held,
            queue_id=state.queue,
            retired=tally.retired,
        )

    async def peek(self, limit: int) -> list[Message]:
        core = self.core
        core.check()
        await self.leasing.sweep()  # a lease run out on its last attempt is dead, not next
        await self.leasing.fill(core.state.wanted(limit, core.fair))
        recs = core.state.peek(core.clock(), limit, core.config.max_attempts, core.fair)
        payloads = await self.payloads.of(recs)
        return [message(rec, p, receipt=False) for rec, p in zip(recs, payloads, strict=True)]
