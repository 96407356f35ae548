"""Fair delivery's start tags: a stretch's deliveries counted at once, to the same bits."""

from __future__ import annotations

import random

from s3q.index.shares import Shares


def test_many_deliveries_of_one_priority_count_as_each_one_would() -> None:
    rng = random.Random(7)
    for _ in range(500):
        one = Shares({0: rng.random() * 5, 3: rng.random()}, rng.random() * 4)
        many = Shares(dict(one.tags), one.vtime)
        for _ in range(5):
            priority, count = rng.choice([0, 1, 3, 9]), rng.randint(0, 1_500)
            one.served_all([priority] * count)
            many.served_many(priority, count)
            assert (many.tags, many.vtime) == (one.tags, one.vtime)  # (floats: the same bits)
