"""What a stretch of history adds up to: dwell, processing and errors from events."""

from __future__ import annotations

from s3q.history.lives import summarize
from s3q.history.log_events import Event


def test_dwell_is_enqueue_to_first_lease_and_processing_last_lease_to_completion() -> None:
    events = [
        Event(1, 0, 100.0, "enqueued", "a"),
        Event(1, 0, 100.0, "enqueued", "b"),
        Event(2, 0, 102.0, "leased", "a", attempt=1),
        Event(3, 0, 103.0, "failed", "a", attempt=1, error="boom"),
        Event(4, 0, 110.0, "retried", "a", attempt=2),
        Event(5, 0, 111.5, "completed", "a"),
        Event(6, 0, 120.0, "purged", None),
    ]
    s = summarize(events)
    assert s.kinds == {"enqueued": 2, "leased": 1, "failed": 1, "retried": 1, "completed": 1,
                       "purged": 1}  # fmt: skip
    assert s.dwell == [2.0] and s.processing == [1.5]
    assert s.quantiles("dwell") == {"p50": 2.0, "p99": 2.0}
    assert s.errors == {"boom": 1} and (s.first_at, s.last_at) == (100.0, 120.0)
    assert summarize([]).quantiles("processing") == {"p50": None, "p99": None}
