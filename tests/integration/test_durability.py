"""Crash durability: every acknowledged operation survives a SIGKILL of the writer.

A child process works on a queue and prints each acknowledged operation; the test kills it at a
random moment (after reading 1..200 lines), reopens the queue and checks the printed operations.
"""

from __future__ import annotations

import os
import random
import signal
from collections import Counter

import pytest
from conftest import LineReader, StoreEnv, drain, open_after_crash, spawn_child
from crash import _kill_after_random_lines

import s3q

S = s3q.MessageStatus
ROUNDS = 20


PARALLEL = 2  # rounds run two at a time: each spends most of its time waiting on I/O


def _rounds(base: StoreEnv, one_round, seed: int, rounds: int = ROUNDS, **kw) -> None:
    """Run ``rounds`` independent rounds, each on a fresh queue with its own random generator."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(PARALLEL) as pool:
        futures = [
            pool.submit(one_round, base.sibling(), n, random.Random(seed * 1000 + n), **kw)
            for n in range(rounds)
        ]
        for f in futures:
            f.result()


def _enqueue_round(env: StoreEnv, round_no: int, rng: random.Random, partitions: int = 1) -> None:
    proc = spawn_child("child_enqueue.py", env, max_attempts=3, partitions=partitions)
    lines = _kill_after_random_lines(proc, LineReader(proc), rng)
    acked = dict(line.split(" ", 1) for line in lines)
    assert len(acked) == len(lines), "the child printed an id twice"

    q, _clock = open_after_crash(env)
    try:
        for mid in acked:
            assert q.status(mid) is S.PENDING, (round_no, mid)
        msgs = drain(q)
        counts = Counter(m.id for m in msgs)
        assert all(c == 1 for c in counts.values()), "a message is in the queue twice"
        payload_counts = Counter(m.payload for m in msgs)
        dup = [p for p, c in payload_counts.items() if c > 1]
        assert not dup, f"round {round_no}: payloads enqueued twice: {dup[:5]}"
        by_id = {m.id: m.payload for m in msgs}
        for mid, payload in acked.items():
            assert by_id.get(mid) == payload.encode(), (round_no, mid)
        assert q.stats().total_enqueued == len(msgs)
    finally:
        q.close()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_acknowledged_enqueues_survive_sigkill(durable_env: StoreEnv) -> None:
    _rounds(durable_env, _enqueue_round, seed=0xE5C + len(durable_env.kind))


N_COMPLETE = 400


def _complete_round(env: StoreEnv, round_no: int, rng: random.Random, partitions: int = 1) -> None:
    n = N_COMPLETE
    with env.open(partitions=partitions) as q:
        all_ids = q.enqueue_batch([f"m{i}".encode() for i in range(n)])
    proc = spawn_child("child_complete.py", env, visibility_timeout=30.0)
    lines = _kill_after_random_lines(proc, LineReader(proc), rng)
    done = [line for line in lines if line != "empty"]
    assert len(done) == len(set(done)), "the child completed a message twice"
    assert set(done) <= set(all_ids)

    q, clock = open_after_crash(env)
    try:
        for mid in done:
            assert q.status(mid) is S.COMPLETED, (round_no, mid)
        st = q.stats()
        assert st.completed >= len(done)
        assert st.pending + st.processing + st.completed == n, st
        assert st.total_enqueued == n
        # nothing completed comes back, now or after every lease the child held lapsed
        first = drain(q)
        if first:
            q.complete_batch(first)
        clock.advance(31)
        second = drain(q)
        redelivered = {m.id for m in first} | {m.id for m in second}
        assert not redelivered & set(done), f"round {round_no}: completed ids redelivered"
        ids = [m.id for m in first] + [m.id for m in second]
        assert len(ids) == len(set(ids))
        finished = {mid for mid in all_ids if q.status(mid) is S.COMPLETED}
        assert set(ids) | finished == set(all_ids)
    finally:
        q.close()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_acknowledged_completions_survive_sigkill(durable_env: StoreEnv) -> None:
    _rounds(durable_env, _complete_round, seed=0xC0 + len(durable_env.kind))


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_partitioned_queues_acknowledged_enqueues_survive_sigkill(durable_env: StoreEnv) -> None:
    """Each partition has a writer of its own: whichever ones the kill cut mid-commit, every
    enqueue answered is in its partition, once."""
    seed = 0x9A + len(durable_env.kind)
    _rounds(durable_env, _enqueue_round, seed, rounds=8, partitions=3)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_partitioned_queues_acknowledged_completions_survive_sigkill(
    durable_env: StoreEnv,
) -> None:
    seed = 0x9C + len(durable_env.kind)
    _rounds(durable_env, _complete_round, seed, rounds=8, partitions=3)


def _run_and_kill(env: StoreEnv, scenario: str, **options) -> dict:
    import json

    proc = spawn_child("child_ops.py", env, scenario, **options)
    reader = LineReader(proc)
    line = reader.next()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    for f in (proc.stdin, proc.stdout, proc.stderr):
        f.close()
    return json.loads(line)


def test_every_operation_kind_survives_sigkill(durable_env: StoreEnv) -> None:
    out = _run_and_kill(durable_env, "ops", max_attempts=1)
    ids = out["ids"]
    q, _clock = open_after_crash(durable_env, max_attempts=1)
    try:
        assert q.status(ids["a"]) is S.COMPLETED
        assert q.status(ids["b"]) is S.DEAD
        [dead] = q.dead_letters()
        assert (dead.id, dead.last_error) == (ids["b"], "err-b")
        assert q.status(ids["c"]) is S.PROCESSING  # extended by 5000 s
        assert q.status(ids["d"]) is S.PENDING  # redriven
        assert q.status(ids["e"]) is S.PENDING
        assert q.enqueue(b"again", dedup_id="k") == ids["e"]
        got = q.dequeue(max_messages=10)
        assert sorted(m.id for m in got) == sorted([ids["d"], ids["e"]])
        assert {m.id: m.attempts for m in got}[ids["d"]] == 1
        q.complete(out["receipt_c"])  # the lease survived with its receipt
        assert q.status(ids["c"]) is S.COMPLETED
    finally:
        q.close()


def test_cleanup_survives_sigkill(durable_env: StoreEnv) -> None:
    out = _run_and_kill(durable_env, "cleanup", completed_retention=0.0)
    assert out["pruned"] == 1
    q, _clock = open_after_crash(durable_env, completed_retention=0.0)
    try:
        with pytest.raises(s3q.MessageNotFound):
            q.status(out["id"])
        assert q.cleanup() == 0, "a pruned record came back after the crash"
    finally:
        q.close()


def test_purge_survives_sigkill(durable_env: StoreEnv) -> None:
    out = _run_and_kill(durable_env, "purge")
    assert out["purged"] == 3
    q, _clock = open_after_crash(durable_env)
    try:
        for mid in out["ids"]:
            with pytest.raises(s3q.MessageNotFound):
                q.status(mid)
        st = q.stats()
        assert (st.pending, st.processing, st.total_enqueued) == (0, 0, 3)
        assert q.purge() == 0
    finally:
        q.close()
