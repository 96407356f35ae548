"""Counters and histograms a request updates at the cost of a dict lookup: no lock, no call
into ``prometheus_client`` per update. They are plain dicts and lists on the event loop's
thread, turned into metric families when ``/metrics`` is scraped (:class:`Tallies`, a
collector of the broker's registry). The series a request or a commit touches live here; the
rest of the broker's series are ``prometheus_client``'s own (:mod:`.metrics`)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["DEFAULT_BUCKETS", "Count", "Spread", "Tallies"]

#: prometheus_client's default buckets (seconds)
DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)

Labels = tuple[str, ...]


class Count:
    """A counter by label values: ``count.values[labels] += 1`` is all an update costs."""

    def __init__(self, name: str, doc: str, labels: Sequence[str]) -> None:
        self.name, self.doc, self.labels = name, doc, list(labels)
        self.values: dict[Labels, float] = {}

    def add(self, labels: Labels, amount: float = 1.0) -> None:
        values = self.values
        values[labels] = values.get(labels, 0.0) + amount

    def family(self) -> Metric:
        family = CounterMetricFamily(self.name, self.doc, labels=self.labels)
        for labels, value in self.values.items():
            family.add_metric(list(labels), value)
        return family


class Spread:
    """A histogram by label values: an observation finds its bucket by bisection."""

    def __init__(
        self, name: str, doc: str, labels: Sequence[str], buckets: Sequence[float] = DEFAULT_BUCKETS
    ) -> None:
        self.name, self.doc, self.labels = name, doc, list(labels)
        self.bounds = tuple(float(b) for b in buckets)
        #: per label values: the count of each bucket (the last: above every bound), then the
        #: sum of the observations
        self.rows: dict[Labels, list[float]] = {}

    def observe(self, labels: Labels, value: float) -> None:
        row = self.rows.get(labels)
        if row is None:
            row = self.rows[labels] = [0.0] * (len(self.bounds) + 2)
        row[bisect_left(self.bounds, value)] += 1
        row[-1] += value

    def forget(self, labels: Labels) -> None:
        """Drop the series of ``labels`` (its queue closed here)."""
        self.rows.pop(labels, None)

    def family(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.doc, labels=self.labels)
        for labels, row in self.rows.items():
            cumulative, total = [], 0.0
            for bound, count in zip(self.bounds, row, strict=False):
                total += count
                cumulative.append((_le(bound), total))
            cumulative.append(("+Inf", total + row[-2]))
            family.add_metric(list(labels), cumulative, row[-1])
        return family


def _le(bound: float) -> str:
    return repr(bound) if bound != int(bound) else f"{bound:.1f}"


class Tallies(Collector):
    """The collector of ``series`` for a prometheus_client registry."""

    def __init__(self, series: Iterable[Count | Spread]) -> None:
        self.series = list(series)

    def collect(self) -> Iterator[Metric]:
        for one in self.series:
            yield one.family()
