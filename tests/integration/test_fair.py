"""Fair delivery across priorities (``delivery="fair"``): each priority with messages gets
deliveries in proportion to its weight, priority + 1; none starves; the shares are folded from
the log, so a reopened queue goes on where it was.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from broker_harness import Broker
from conftest import StoreEnv

import s3q
from s3q.client import connect


def fill(q: Any, counts: dict[int, int]) -> None:
    for priority, count in counts.items():
        q.enqueue_batch([{"payload": b"p%d" % priority, "priority": priority}] * count)


def delivered(q: Any, n: int, batch: int = 10) -> list[int]:
    """The priorities of the next ``n`` deliveries, completed as they come."""
    out: list[int] = []
    while len(out) < n:
        got = q.dequeue(max_messages=min(batch, n - len(out)))
        assert got, "the queue ran dry"
        q.complete_batch(got)
        out.extend(m.priority for m in got)
    return out


def test_priorities_share_deliveries_by_weight(env: StoreEnv) -> None:
    """Priorities 0, 1 and 3 (weights 1, 2 and 4), all backlogged: 700 deliveries split
    100, 200 and 400, and within every 7 deliveries each gets its share."""
    with env.open(delivery="fair") as q:
        fill(q, {0: 1000, 1: 1000, 3: 1000})
        order = delivered(q, 700, batch=25)
        assert q.stats().deliveries_by_priority == {0: 100, 1: 200, 3: 400}
    assert Counter(order) == {0: 100, 1: 200, 3: 400}
    for start in range(0, 700, 7):
        assert Counter(order[start : start + 7]) == {0: 1, 1: 2, 3: 4}, start


def test_a_steady_high_priority_stream_starves_nothing(env: StoreEnv) -> None:
    """A priority 9 producer keeps ten messages ahead of the consumer; one message waits at
    priority 0. Strict delivery never reaches it; fair delivery delivers it within the first
    11 deliveries (weights 10 and 1)."""
    for delivery, reached in (("strict", False), ("fair", True)):
        with env.sibling().open(delivery=delivery) as q:
            fill(q, {0: 1})
            seen: list[int] = []
            for _ in range(30):
                fill(q, {9: 10})
                seen.extend(delivered(q, 10))
            assert (0 in seen) is reached, delivery
            if reached:
                assert seen.index(0) < 11


def test_a_priority_that_was_idle_gets_its_share_not_a_burst(env: StoreEnv) -> None:
    """Priority 3 alone for 100 deliveries; then priority 0 messages arrive: they get one in
    every 5 from then on (weights 4 and 1), not the 100 deliveries they missed."""
    with env.open(delivery="fair") as q:
        fill(q, {3: 300})
        assert set(delivered(q, 100)) == {3}
        fill(q, {0: 100})
        order = delivered(q, 50, batch=5)
    assert Counter(order) == {3: 40, 0: 10}


def test_shares_are_folded_from_the_log_across_reopens_and_checkpoints(env: StoreEnv) -> None:
    """The order of deliveries is the same whether the queue stays open, or is closed and
    reopened (replaying the log) or checkpointed and reopened (from the checkpoint)."""
    counts = {0: 40, 2: 40, 5: 40}
    with env.open(delivery="fair") as q:
        fill(q, counts)
        straight = delivered(q, 60, batch=3)
    for compact in (False, True):
        other = env.sibling()
        with other.open(delivery="fair") as q:
            fill(q, counts)
            first = delivered(q, 30, batch=3)
            if compact:
                q.compact()
        with other.open() as q:
            assert q.config.delivery == "fair"
            assert first + delivered(q, 30, batch=3) == straight, compact


def test_peek_shows_the_fair_order(env: StoreEnv) -> None:
    with env.open(delivery="fair") as q:
        fill(q, {0: 20, 4: 20})
        delivered(q, 7)
        ahead = [m.id for m in q.peek(12)]
        assert [m.id for m in q.dequeue(max_messages=12)] == ahead


def test_delivery_must_be_strict_or_fair(env: StoreEnv) -> None:
    with pytest.raises(s3q.InvalidConfig, match="delivery must be 'strict' or 'fair'"):
        s3q.open(env.url, **env.options, delivery="random")
    with env.open() as q:
        assert q.config.delivery == "strict"
        assert q.configure(delivery="fair")["delivery"] == "fair"


def test_a_broker_queue_configured_fair_shares_and_says_so(tmp_path: Path) -> None:
    """Configured through the native API; stats and /metrics count deliveries by priority."""
    with Broker(f"file://{tmp_path}/store") as broker, connect(broker.url) as client:
        q = client.queue("jobs")
        assert q.configure(delivery="fair")["delivery"] == "fair"
        fill(q, {0: 50, 4: 50})
        assert Counter(delivered(q, 30)) == {0: 5, 4: 25}
        assert q.stats().deliveries_by_priority == {0: 5, 4: 25}
        metrics = httpx.get(broker.url + "/metrics").text
        assert 's3q_queue_deliveries{priority="0",queue="jobs"} 5.0' in metrics
