"""The broker's per-request series (s3q.broker.tallies): what a scrape shows is what
prometheus_client's own Counter and Histogram would show for the same updates."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from s3q.broker.tallies import Count, Spread, Tallies

BUCKETS = (0.01, 0.1, 1.0, 10.0)
VALUES = [0.0, 0.01, 0.05, 0.1, 0.1000001, 3.0, 10.0, 11.0, 250.0]


def _lines(registry: CollectorRegistry) -> set[str]:
    return {
        line
        for line in generate_latest(registry).decode().splitlines()
        if not line.startswith("#") and "_created" not in line
    }


def test_a_spread_and_a_count_expose_what_prometheus_client_would() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    spread = Spread("t_seconds", "doc", ("op",), BUCKETS)
    count = Count("t_ops", "doc", ("op", "outcome"))
    ours.register(Tallies([spread, count]))
    histogram = Histogram("t_seconds", "doc", ("op",), buckets=BUCKETS, registry=theirs)
    counter = Counter("t_ops", "doc", ("op", "outcome"), registry=theirs)
    for i, value in enumerate(VALUES):
        op = "a" if i % 2 else "b"
        spread.observe((op,), value)
        histogram.labels(op).observe(value)
        count.add((op, "ok"))
        counter.labels(op, "ok").inc()
    assert _lines(ours) == _lines(theirs)


def test_a_forgotten_series_is_gone_from_the_next_scrape() -> None:
    registry = CollectorRegistry()
    spread = Spread("t_seconds", "doc", ("queue",), BUCKETS)
    registry.register(Tallies([spread]))
    spread.observe(("q1",), 0.5)
    spread.observe(("q2",), 0.5)
    spread.forget(("q1",))
    text = generate_latest(registry).decode()
    assert 'queue="q2"' in text and 'queue="q1"' not in text
