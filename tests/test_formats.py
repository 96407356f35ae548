"""Queues written by earlier builds open with every message intact.

``tests/fixtures/queue-1813867`` was written by commit 1813867 (before the store-faults work
changed when checkpoints are taken and how the log is replayed): 41 messages with priorities,
dedup ids, a payload stored beside the log, completions, a failure, several checkpoints, and a
tail of log objects after the last one (the writer was killed, not closed). Its manifest
(``.json``) lists what was enqueued and completed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import s3q

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def payload(name: str) -> bytes:
    i = int(name[1:])
    return b"payload %d" % i + (b"x" * (i * 37) if i < 30 else b"")


def test_a_queue_written_by_build_1813867_opens_with_every_message_intact(
    tmp_path: Path,
) -> None:
    manifest = json.loads((FIXTURES / "queue-1813867.json").read_text())
    root = shutil.copytree(FIXTURES / "queue-1813867", tmp_path / "queue")
    later = manifest["written_at"] + 7200  # the leases it left (3600 s) have lapsed
    with s3q.open(
        f"file://{root}", clock=lambda: later, completed_retention=1e9, dedup_window=1e9
    ) as q:
        assert q.stats().total_enqueued == manifest["total_enqueued"] == 41
        for mid in manifest["completed"]:
            assert q.status(mid) is s3q.MessageStatus.COMPLETED
        expected = {mid: payload(name) for name, mid in manifest["ids"].items()}
        expected[manifest["big"]] = b"B" * 5000
        for mid in manifest["completed"]:
            del expected[mid]
        got = q.dequeue(100)
        assert {m.id: m.payload for m in got} == expected
        # the dedup ids are still remembered: enqueuing one again makes nothing new
        assert q.enqueue(b"again", dedup_id="d0") == manifest["ids"]["m0"]
        assert q.stats().total_enqueued == 41


def test_this_build_writes_format_1_whose_trailer_is_unchanged(tmp_path: Path) -> None:
    with s3q.open(f"file://{tmp_path}/q") as q:
        q.enqueue(b"x")
    for path in (tmp_path / "q" / "log").iterdir():
        assert path.read_bytes().endswith(b"S3Q1")


@pytest.mark.parametrize("kind", ["log", "checkpoint"])
def test_an_object_in_a_newer_format_is_refused_and_nothing_changes(
    tmp_path: Path, kind: str
) -> None:
    url = f"file://{tmp_path}/q"
    with s3q.open(url) as q:  # closing leaves a checkpoint behind
        q.enqueue(b"x")
    if kind == "log":  # as if no checkpoint were taken yet: the open reads every log object
        shutil.rmtree(tmp_path / "q" / "checkpoint")
    newest = max((tmp_path / "q" / kind).iterdir())
    data = newest.read_bytes()
    newest.write_bytes(data[:-1] + b"9")  # the format byte: the checksum covers the header only
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    with pytest.raises(s3q.UnsupportedFormat, match=r"format '9'.*upgrade s3q"):
        s3q.open(url)
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert after == before
    newest.write_bytes(data)  # and the queue opens again: the failed open kept no lock
    with s3q.open(url) as q:
        assert q.stats().pending == 1
