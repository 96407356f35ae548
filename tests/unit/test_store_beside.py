"""Where a queue's broker leases lie: beside the queue, for each of its partitions too."""

from __future__ import annotations

from pathlib import Path

import pytest

from s3q.partitions.placement import url_of
from s3q.store import open_store

S3 = {"endpoint_url": "http://127.0.0.1:9", "region": "us-east-1", "allow_http": True}


@pytest.mark.parametrize("queue", ["s3://bucket/store/hot", "file:///{tmp}/store/hot"])
def test_every_partition_of_a_queue_finds_the_brokers_leases_beside_the_queue(
    queue: str, tmp_path: Path
) -> None:
    queue = queue.format(tmp=tmp_path.as_posix().lstrip("/"))
    options = S3 if queue.startswith("s3") else None
    beside = {open_store(url_of(queue, i), options).beside(".brokers").url for i in range(4)}
    assert beside == {queue.rpartition("/")[0] + "/.brokers"}
