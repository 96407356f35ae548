"""configure() and discard(): settings of an open queue, and dead letters removed for good."""

from __future__ import annotations

from pathlib import Path

import pytest
from broker_harness import Broker

import s3q
from s3q.client import connect


def test_configure_changes_settings_at_once_and_they_survive_reopen(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/q"
    with s3q.open(url) as q:
        settings = q.configure(visibility_timeout=7.0, attributes={"owner": "ops"})
        assert settings["visibility_timeout"] == 7.0
        assert settings["attributes"] == {"owner": "ops"}
        assert q.config.visibility_timeout == 7.0
        q.enqueue(b"x")
        [msg] = q.dequeue()
        assert q.status(msg.id) is s3q.MessageStatus.PROCESSING
    with s3q.open(url) as q:  # replayed from the log
        assert q.config.attributes == {"owner": "ops"}
        assert q.configure()["visibility_timeout"] == 7.0
        q.compact()  # a checkpoint holds the settings too
    with s3q.open(url) as q:
        assert q.config.attributes == {"owner": "ops"}
        assert q.config.visibility_timeout == 7.0


def test_configure_refuses_unknown_and_bad_settings(tmp_path: Path) -> None:
    with s3q.open(f"file://{tmp_path}/q") as q:
        with pytest.raises(s3q.InvalidConfig, match="lease_ttl"):
            q.configure(lease_ttl=3.0)
        with pytest.raises(s3q.InvalidConfig):
            q.configure(max_attempts=0)
        with pytest.raises(s3q.InvalidConfig):
            q.configure(attributes={"k": 1})
        assert q.config.max_attempts == 3


def test_discard_removes_dead_letters_only(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/q"
    with s3q.open(url, max_attempts=1) as q:
        q.enqueue(b"dead")
        live = q.enqueue(b"live")
        [msg] = q.dequeue()
        q.fail(msg, "boom")
        [dead] = q.dead_letters()
        with pytest.raises(s3q.MessageNotFound):
            q.discard([dead.id, live])
        assert len(q.dead_letters()) == 1
        assert q.discard([dead.id]) == 1
        assert q.dead_letters() == []
        with pytest.raises(s3q.MessageNotFound):
            q.status(dead.id)
        assert q.stats().pending == 1
    for _ in range(2):  # replayed from the log, then from a checkpoint
        with s3q.open(url) as q:
            assert q.dead_letters() == []
            stats = q.stats()
            assert (stats.pending, stats.dead) == (1, 0)
            q.compact()


def test_client_has_configure_and_discard(tmp_path: Path) -> None:
    with Broker(f"file://{tmp_path}/store") as broker, connect(broker.url) as client:
        q = client.queue("jobs.fifo")
        assert q.configure(max_attempts=1, attributes={"a": "b"})["max_attempts"] == 1
        q.enqueue(b"x")
        [msg] = q.dequeue()
        q.fail(msg)
        assert q.discard([msg.id]) == 1
        with pytest.raises(s3q.InvalidConfig):
            q.configure(nope=1)
        assert q.configure()["attributes"] == {"a": "b"}
