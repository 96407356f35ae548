"""The dashboard's figures as the broker reckons them: the spend rate and the latency window."""

from __future__ import annotations

import pytest

from s3q.broker.metrics import LatencyWindow, SpendRate, percentile
from s3q.prices import FREE, MONTH, S3, Prices, named_prices, of_store


def test_spend_rate() -> None:
    """A month at the rate of the last ``span`` seconds: since the start while that is
    shorter, then over the newest sample at least ``span`` old."""
    now = [0.0]
    rate = SpendRate(span=60, clock=lambda: now[0])
    now[0] = 10.0
    assert rate.per_month(1.0) == pytest.approx(1.0 / 10 * MONTH)
    now[0] = 40.0
    assert rate.per_month(4.0) == pytest.approx(4.0 / 40 * MONTH)
    now[0] = 100.0  # the sample at 40 s is the newest at least 60 s old
    assert rate.per_month(10.0) == pytest.approx(6.0 / 60 * MONTH)
    now[0] = 1000.0  # idle since: the spend did not move
    assert rate.per_month(10.0) == 0.0


def test_latency_window() -> None:
    now = [1000.0]
    window = LatencyWindow(span=60, step=10, per_step=50, clock=lambda: now[0])
    assert window.summary()["count"] == 0
    for i in range(1, 101):
        window.record(i / 1000)
    now[0] += 10
    window.record(0.5)
    summary = window.summary()
    assert summary["count"] == 101
    first, second = summary["series"]
    assert (first["t"], first["count"], second["t"]) == (1000, 100, 1010)
    assert 0.001 <= first["p50"] <= first["p99"] <= 0.1  # a sample of 50 of the 100
    assert second["p50"] == second["p99"] == 0.5
    now[0] += 55  # the first step is out of the window
    assert [s["t"] for s in window.summary()["series"]] == [1010]
    now[0] += 60
    assert window.summary()["series"] == []
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.99) == 4.0


def test_the_prices_a_broker_reckons_with() -> None:
    """The store's own unless named: S3's list prices on an object store, nothing on a local
    directory or in memory; a price named alone comes with S3's for the other."""
    assert of_store(charges=True) == S3 and of_store(charges=False) == FREE
    assert named_prices(None, None) is None
    assert named_prices(0.01, None) == Prices(put=0.01, get=S3.get)
    assert of_store(charges=False, prices=Prices(put=1.0, get=0.0)).put == 1.0
