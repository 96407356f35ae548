"""Queues written by earlier builds open with every message intact.

``tests/support/fixtures/queue-1813867`` was written by commit 1813867 (before the store-faults work
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
from conftest import SUPPORT_DIR

import s3q
from s3q.log import ids

FIXTURES = SUPPORT_DIR / "fixtures"


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
        # this build goes on in its own format: old and new messages side by side
        new = q.enqueue_batch([{"payload": p, "priority": 255} for p in (b"new 1", b"new 2")])
        q.complete(got[0])
    with s3q.open(
        f"file://{root}", clock=lambda: later + 7200, completed_retention=1e9, dedup_window=1e9
    ) as q:
        assert q.status(got[0].id) is s3q.MessageStatus.COMPLETED
        again = q.dequeue(100)
        assert [m.payload for m in again[:2]] == [b"new 1", b"new 2"]
        assert [m.id for m in again[:2]] == new
        assert {m.id for m in again[2:]} == set(expected) - {got[0].id}
    tail = max((root / "log").iterdir()).read_bytes()
    assert tail.endswith(b"S3Q4")  # (nothing retired: what format-4 builds read)


def payload_v2(name: str) -> bytes:
    i = int(name[1:])
    return b"v2 payload %d" % i + b"y" * (i * 13)


def test_a_queue_written_by_build_cd2f38b_opens_with_every_message_intact(
    tmp_path: Path,
) -> None:
    """Format 2 as its first builds wrote it: runs whose checkpoint held their sizes,
    completed messages as records, and a tail of log objects after the last checkpoint."""
    manifest = json.loads((FIXTURES / "queue-cd2f38b.json").read_text())
    root = shutil.copytree(FIXTURES / "queue-cd2f38b", tmp_path / "queue")
    later = manifest["written_at"] + 7200  # the leases it left (3600 s) have lapsed
    names = {mid: name for name, mid in manifest["ids"].items()}
    options = dict(completed_retention=1e9, dedup_window=1e9)
    with s3q.open(f"file://{root}", clock=lambda: later, **options) as q:
        stats = q.stats()
        assert stats.total_enqueued == manifest["total_enqueued"] == 43
        assert stats.completed == len(manifest["completed"]) == 4
        for mid in manifest["completed"]:
            assert q.status(mid) is s3q.MessageStatus.COMPLETED
        assert q.enqueue(b"again", dedup_id="d25") == manifest["ids"]["m25"]
        got = q.dequeue(100)
        expected = {mid: payload_v2(n) for mid, n in names.items()}
        for mid in [*manifest["completed"], manifest["ids"]["m32"]]:
            del expected[mid]  # m32 waits for m31, before it in group "g"
        assert {m.id: m.payload for m in got} == expected
        assert {m.id: m.attributes for m in got if names[m.id] in ("m20", "m29")} == {
            manifest["ids"]["m20"]: {"i": "20"},
            manifest["ids"]["m29"]: {"i": "29"},
        }
        q.complete_batch(got)
        [m32] = q.dequeue(10)
        assert (m32.id, m32.payload) == (manifest["ids"]["m32"], payload_v2("m32"))
    with s3q.open(f"file://{root}", clock=lambda: later + 1, **options) as q:
        stats = q.stats()
        assert (stats.completed, stats.processing, stats.pending) == (42, 1, 0)


def payload_v3(name: str) -> bytes:
    i = int(name[1:])
    return b"v3 payload %d" % i + b"z" * (i * 11)


def test_a_queue_written_by_build_eaadc93_opens_with_every_message_intact(
    tmp_path: Path,
) -> None:
    """Format 3 before fair delivery, buffered enqueues and tenants added their trailing
    fields (Append.tenants, Record.tenant and leased_at, RunSnap.tenant, Snapshot.shares,
    vtime, tenants and busy): a run, records, a payload beside the log, completions, a retry,
    leases, a checkpoint and a tail of log objects after it (``queue-eaadc93.json`` says how
    it was written). This build reads it, then goes on writing tenants beside its messages."""
    manifest = json.loads((FIXTURES / "queue-eaadc93.json").read_text())
    root = shutil.copytree(FIXTURES / "queue-eaadc93", tmp_path / "queue")
    later = manifest["written_at"] + 7200  # the leases it left (3600 s) have lapsed
    names = {mid: name for name, mid in manifest["ids"].items()}
    options = dict(completed_retention=1e9, dedup_window=1e9)
    with s3q.open(f"file://{root}", clock=lambda: later, **options) as q:
        stats = q.stats()
        assert stats.total_enqueued == manifest["total_enqueued"] == 43
        assert stats.completed == len(manifest["completed"]) == 4
        for mid in manifest["completed"]:
            assert q.status(mid) is s3q.MessageStatus.COMPLETED
        assert q.enqueue(b"again", dedup_id="d28") == manifest["ids"]["m28"]
        got = q.dequeue(100)
        expected = {mid: payload_v3(n) for mid, n in names.items() if n != "big"}
        expected[manifest["ids"]["big"]] = b"B" * 6000
        for mid in [*manifest["completed"], manifest["ids"]["m23"]]:
            del expected[mid]  # m23 waits for m22, before it in group "g"
        assert {m.id: m.payload for m in got} == expected
        assert {m.id: m.attributes for m in got if names[m.id] in ("m25", "m33")} == {
            manifest["ids"]["m25"]: {"i": "25"},
            manifest["ids"]["m33"]: {"i": "33"},
        }
        assert all(m.tenant is None for m in got)
        q.complete_batch(got)
        [m23] = q.dequeue(10)
        assert (m23.id, m23.payload) == (manifest["ids"]["m23"], payload_v3("m23"))
        new = q.enqueue(b"new", tenant="acme")
    with s3q.open(f"file://{root}", clock=lambda: later + 1, **options) as q:
        stats = q.stats()
        assert (stats.completed, stats.processing, stats.pending) == (42, 1, 1)
        [m] = q.dequeue()
        assert (m.id, m.payload, m.tenant) == (new, b"new", "acme")


def payload_v4(name: str) -> bytes:
    i = int(name[1:])
    return b"v4 payload %d" % i + b"w" * (i * 7)


def test_a_queue_written_by_build_51a21bd_opens_with_every_message_intact(
    tmp_path: Path,
) -> None:
    """Format 4, the last before retention: runs, records, a payload beside the log, a
    stretch of a run leased in one entry (4 of it completed together, one failed and leased
    again), a checkpoint holding the stretch's members as records, and a tail of log objects
    after it (``queue-51a21bd.json`` says how it was written, ``queue-51a21bd.py`` by what).
    This build reads it, then retires its messages once the queue is given a retention,
    writing format 5 beside format 4."""
    manifest = json.loads((FIXTURES / "queue-51a21bd.json").read_text())
    root = shutil.copytree(FIXTURES / "queue-51a21bd", tmp_path / "queue")
    later = manifest["written_at"] + 7200  # the leases it left (3600 s) have lapsed
    names = {mid: name for name, mid in manifest["ids"].items()}
    options = dict(completed_retention=1e9, dedup_window=1e9)
    with s3q.open(f"file://{root}", clock=lambda: later, **options) as q:
        stats = q.stats()
        assert stats.total_enqueued == manifest["total_enqueued"] == 42
        assert stats.completed == len(manifest["completed"]) == 4
        for mid in manifest["completed"]:
            assert q.status(mid) is s3q.MessageStatus.COMPLETED
        assert q.enqueue(b"again", dedup_id="d33") == manifest["ids"]["m33"]
        # the failed one was leased again on its last attempt, and that lease ran out
        [dead] = q.dead_letters()
        assert (dead.id, dead.payload, dead.attempts) == (manifest["failed"], payload_v4("m4"), 2)
        got = q.dequeue(100)
        expected = {mid: payload_v4(n) for mid, n in names.items()}
        expected[manifest["big"]] = b"B" * 6000
        for mid in [*manifest["completed"], manifest["failed"], manifest["ids"]["m32"]]:
            del expected[mid]  # m32 waits for m31, before it in group "g"
        assert {m.id: m.payload for m in got} == expected
        by_id = {m.id: m for m in got}
        assert by_id[manifest["ids"]["m34"]].attributes == {"i": "34"}
        assert by_id[manifest["ids"]["m35"]].tenant == "acme"
        assert {m.attempts for m in got if m.id in manifest["leased"]} == {2}
        q.release(got)
        q.configure(retention=3600.0)  # everything it holds is older than that
        stats = q.stats()
        assert (stats.pending, stats.processing, stats.dead, stats.retired) == (0, 0, 0, 38)
    with s3q.open(f"file://{root}", clock=lambda: later + 1, **options) as q:
        stats = q.stats()
        assert (stats.pending, stats.completed, stats.retired) == (0, 4, 0)
        new = q.enqueue(b"new")
        assert [(m.id, m.payload) for m in q.dequeue(10)] == [(new, b"new")]
    tails = {path.read_bytes()[-4:] for path in (root / "log").iterdir()}
    assert tails == {b"S3Q4", b"S3Q5"}


def test_this_build_writes_format_5_only_where_it_retires(tmp_path: Path) -> None:
    """A queue that never retires is written in format 4 (a format-4 build reads it: a
    downgrade keeps it); an object that retires messages is format 5."""
    now = [1000.0]
    with s3q.open(f"file://{tmp_path}/q", clock=lambda: now[0]) as q:
        q.enqueue(b"x")
        first = {p.name for p in (tmp_path / "q" / "log").iterdir()}
        for path in (tmp_path / "q").glob("*/*"):  # its log and any checkpoint
            assert path.read_bytes().endswith(b"S3Q4")
        q.configure(retention=60.0)
        now[0] += 61.0
        assert q.stats().retired == 1
    tails = {p.read_bytes()[-4:] for p in (tmp_path / "q" / "log").iterdir() if p.name not in first}
    assert b"S3Q5" in tails


def test_ids_name_the_queue_log_object_and_place_that_enqueued_each_message(
    tmp_path: Path,
) -> None:
    with s3q.open(f"file://{tmp_path}/q") as q, s3q.open(f"file://{tmp_path}/other") as other:
        first = q.enqueue_batch([b"a", b"b", b"c"])
        queue = first[0][: ids.QUEUE_DIGITS]
        places = [ids.where(mid, queue) for mid in first]
        seq = places[0][0] if places[0] else None
        assert places == [(seq, 0), (seq, 1), (seq, 2)]
        assert first == sorted(first)  # ids sort in enqueue order
        later = q.enqueue(b"d")
        assert later > first[-1]
        assert q.status(first[1]) is s3q.MessageStatus.PENDING
        # the same place in another queue is another message: the queue's id tells them apart
        mine = other.enqueue_batch([b"x", b"y", b"z"])
        assert mine[0][: ids.QUEUE_DIGITS] != queue
        with pytest.raises(s3q.MessageNotFound):
            other.status(first[1])
    with s3q.open(f"file://{tmp_path}/q") as q:  # reopened: the queue keeps its id
        assert q.enqueue(b"e")[: ids.QUEUE_DIGITS] == queue
    assert ids.where("0000018b2f3c4d5e" + "a1b2c3d4" + "000000000001", queue) is None  # format 1
    assert ids.where("not an id", queue) is None


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
