"""Queue history: history retention keeps the log readable for its period, then lets it go."""

from __future__ import annotations

from conftest import FakeClock, StoreEnv


def _work(q: object, rounds: int) -> list[str]:
    """Messages enqueued, leased and completed, a log object or more each step: their ids."""
    sent: list[str] = []
    for r in range(rounds):
        sent += q.enqueue_batch([b"p%d-%d" % (r, i) for i in range(20)])  # type: ignore[attr-defined]
        q.complete_batch(q.dequeue(max_messages=20))  # type: ignore[attr-defined]
    return sent


def test_history_retention_keeps_log_objects_for_its_period_then_lets_them_go(
    durable_env: StoreEnv, clock: FakeClock
) -> None:
    q = durable_env.open(
        clock=clock, gc_grace=0.0, completed_retention=0.0, history_retention=3600.0
    )
    try:
        _work(q, 10)
        written = durable_env.log_seqs()
        report = q.compact()
        assert report.deleted_objects == 0 and report.history_objects >= len(written) - 2
        assert set(written) <= set(durable_env.log_seqs())  # every one still readable
        assert q.stats().history_objects == report.history_objects
        clock.advance(1800)
        written = durable_env.log_seqs()
        _work(q, 2)  # younger objects, written half an hour later
        younger = set(durable_env.log_seqs()) - set(written)
        clock.advance(1801)  # the first ones are past retention, the younger ones are not
        q.compact()
        left = set(durable_env.log_seqs())
        assert not left & set(written[:-2]), left
        assert younger <= left
        clock.advance(3601)
        q.compact()
        assert len(durable_env.log_seqs()) <= 3
    finally:
        q.close()


def test_without_history_retention_collection_deletes_at_once(
    durable_env: StoreEnv, clock: FakeClock
) -> None:
    """The default (0): garbage goes at the first pass, with no read of any log object."""
    q = durable_env.open(clock=clock, gc_grace=0.0, completed_retention=0.0)
    try:
        _work(q, 10)
        before = q.stats()
        report = q.compact()
        after = q.stats()
        assert report.deleted_objects >= 10 and report.history_objects == 0
        assert after.store_gets == before.store_gets
        assert len(durable_env.log_seqs()) <= 3
    finally:
        q.close()
