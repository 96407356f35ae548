"""Queue history: history retention keeps the log readable for its period, then lets it go."""

from __future__ import annotations

import asyncio
import datetime
import json
import math
import uuid
from pathlib import Path
from urllib.parse import urlencode

import hypothesis.strategies as st
import msgspec
import pytest
from attempts_work import ACTIONS, SETTINGS, attempts_read, deliveries
from click.testing import CliRunner
from conftest import SUPPORT_DIR, T0, FakeClock, StoreEnv
from hypothesis import HealthCheck, example, given, settings

import s3q
from s3q.cli import main
from s3q.history import log_events, timeline
from s3q.log import ids, ops, segment, stamps, tables
from s3q.store import Store, open_store


def _work(q: object, rounds: int) -> list[str]:
    """Messages enqueued, leased and completed, a log object or more each step: their ids."""
    sent: list[str] = []
    for r in range(rounds):
        sent += q.enqueue_batch([b"p%d-%d" % (r, i) for i in range(20)])  # type: ignore[attr-defined]
        q.complete_batch(q.dequeue(max_messages=20))  # type: ignore[attr-defined]
    return sent


def test_history_retention_keeps_log_objects_for_its_period_then_lets_them_go(
    durable_env: StoreEnv, clock: FakeClock
) -> None:
    q = durable_env.open(
        clock=clock, gc_grace=0.0, completed_retention=0.0, history_retention=3600.0
    )
    try:
        _work(q, 10)
        written = durable_env.log_seqs()
        report = q.compact()
        assert report.deleted_objects == 0 and report.history_objects >= len(written) - 2
        assert set(written) <= set(durable_env.log_seqs())  # every one still readable
        assert q.stats().history_objects == report.history_objects
        clock.advance(1800)
        written = durable_env.log_seqs()
        _work(q, 2)  # younger objects, written half an hour later
        younger = set(durable_env.log_seqs()) - set(written)
        clock.advance(1801)  # the first ones are past retention, the younger ones are not
        q.compact()
        left = set(durable_env.log_seqs())
        assert not left & set(written[:-2]), left
        assert younger <= left
        clock.advance(3601)
        q.compact()
        assert len(durable_env.log_seqs()) <= 3
    finally:
        q.close()


def test_without_history_retention_collection_deletes_at_once(
    durable_env: StoreEnv, clock: FakeClock
) -> None:
    """The default (0): garbage goes at the first pass, with no read of any log object."""
    q = durable_env.open(clock=clock, gc_grace=0.0, completed_retention=0.0)
    try:
        _work(q, 10)
        before = q.stats()
        report = q.compact()
        after = q.stats()
        assert report.deleted_objects >= 10 and report.history_objects == 0
        assert after.store_gets == before.store_gets
        assert len(durable_env.log_seqs()) <= 3
    finally:
        q.close()


async def _events(env: StoreEnv, first: int = 0) -> list[log_events.Event]:
    store = open_store(env.url, dict(env.options))
    try:
        return [e async for e in log_events.read(store, first)]
    finally:
        await store.close()


def test_history_tells_each_message_s_life(durable_env: StoreEnv, clock: FakeClock) -> None:
    """Every kind of event, read straight from the log with no writer open."""
    q = durable_env.open(clock=clock, max_attempts=2, retry_delay=5.0, retry_delay_max=5.0)
    try:
        a = q.enqueue(b"alpha", priority=7, tenant="t1", dedup_id="d-a")
        b, c = q.enqueue_batch([b"bb", b"ccc"])
        late = q.enqueue(b"later", delay=60.0, group="g")
        first = q.dequeue(max_messages=3)
        assert [m.id for m in first] == [a, b, c]
        q.fail(first[0], "boom")
        q.extend(first[1], 120.0)
        q.release([first[2]])
        clock.advance(10)
        again = q.dequeue(max_messages=1)
        assert again[0].id == a
        q.fail(again[0], "boom again")  # the last attempt: dead
        q.redrive([a])
        q.complete_batch([*q.dequeue(max_messages=1), first[1]])
        q.purge()
    finally:
        q.close()
    events = asyncio.run(_events(durable_env))
    life = [(e.kind, e.attempt, e.error) for e in events if e.id == a]
    assert life == [
        ("enqueued", None, None),
        ("leased", 1, None),
        ("failed", 1, "boom"),
        ("retried", 2, None),
        ("dead", 2, "boom again"),
        ("redriven", None, None),
        ("leased", 1, None),
        ("completed", None, None),
    ]
    enqueued = {e.id: e for e in events if e.kind == "enqueued"}
    assert (enqueued[a].priority, enqueued[a].tenant, enqueued[a].dedup_id) == (7, "t1", "d-a")
    assert enqueued[c].size == 3 and enqueued[late].group == "g"
    assert enqueued[late].visible_at == pytest.approx(enqueued[late].at + 60.0)
    by = {(e.id, e.kind): e for e in events}
    assert by[(b, "extended")].visible_at == pytest.approx(by[(b, "extended")].at + 120.0)
    assert (c, "released") in by and (b, "completed") in by
    assert by[(a, "failed")].visible_at == pytest.approx(by[(a, "failed")].at + 5.0)
    assert [e.kind for e in events if e.id is None] == ["purged"]
    positions = [(e.seq, e.op) for e in events]
    assert positions == sorted(positions)
    assert all(e.kind in log_events.KINDS for e in events)


async def _life(env: StoreEnv, mid: str) -> tuple[list[log_events.Event], int, int]:
    """A message's life, and the GETs and LISTs reading it took."""
    store = open_store(env.url, dict(env.options))
    try:
        found = await log_events.life(store, mid)
        return found, store.counts.gets, store.counts.lists
    finally:
        await store.close()


def test_a_life_by_id_reads_the_objects_of_that_life_not_the_whole_log(
    durable_env: StoreEnv, clock: FakeClock
) -> None:
    """The id names the log object that enqueued the message: a life is read from there, a few
    objects at a time, up to its completion, with no listing: the GETs are those of the objects
    of its life (and as many more at most), however long the log."""
    with durable_env.open(clock=clock, history_retention=3600.0) as q:
        sent = _work(q, 60)
        waiting = q.enqueue(b"never leased")
    total = len(durable_env.log_seqs())
    assert total >= 120
    for mid in (sent[0], sent[30 * 20 + 7], sent[-1]):
        events, gets, lists = asyncio.run(_life(durable_env, mid))
        assert [e.kind for e in events] == ["enqueued", "leased", "completed"], events
        spanned = events[-1].seq - events[0].seq + 1
        assert events[0].seq == ids.enqueued_by(mid)
        assert lists == 0 and gets <= 2 * spanned + 2, (gets, lists, spanned, total)
    # a life still going reads on to the log's end, which one listing confirms (obstore
    # counts no page for a listing that finds nothing)
    events, gets, lists = asyncio.run(_life(durable_env, waiting))
    assert [e.kind for e in events] == ["enqueued"]
    assert lists <= 1 and gets <= 5, (gets, lists)


def test_a_life_by_id_reads_past_log_objects_collected_in_its_middle(
    durable_env: StoreEnv, clock: FakeClock
) -> None:
    """Without history retention, collection takes log objects out of the middle of a long
    life: one listing finds where the log goes on (and one of the checkpoints tells the queue's
    id, its first log object being gone)."""
    q = durable_env.open(clock=clock, gc_grace=0.0, completed_retention=0.0)
    try:
        mid = q.enqueue(b"slow")
        (slow,) = q.dequeue(max_messages=1, visibility_timeout=3600.0)
        _work(q, 10)
        before = set(durable_env.log_seqs())
        assert q.compact().deleted_objects >= 10
        q.complete(slow)
    finally:
        q.close()
    left = set(durable_env.log_seqs())
    assert before - left and ids.enqueued_by(mid) in left
    events, _, lists = asyncio.run(_life(durable_env, mid))
    kinds = [e.kind for e in events]
    assert kinds[0] == "enqueued" and kinds[-1] == "completed" and lists == 2, events


def test_history_reads_stretch_leases_and_a_range(durable_env: StoreEnv) -> None:
    """Members of a run leased together (one stretch in the log) are each an event; a read
    from a later log object sees only what followed, and knows each lease's attempt though
    it did not read the enqueue (a stretch's members are untouched: their first)."""
    q = durable_env.open()
    try:
        sent = q.enqueue_batch([b"x%d" % i for i in range(50)])
        start = q.stats().log_seq + 1
        q.complete_batch(q.dequeue(max_messages=50))
    finally:
        q.close()
    leased = [e.id for e in asyncio.run(_events(durable_env)) if e.kind == "leased"]
    assert leased == sent
    later = asyncio.run(_events(durable_env, start))
    assert {e.kind for e in later} == {"leased", "completed"}
    assert [e.attempt for e in later if e.kind == "leased"] == [1] * 50


@pytest.mark.parametrize("build", ["1813867", "cd2f38b", "eaadc93", "51a21bd"])
def test_history_reads_logs_of_earlier_formats(build: str) -> None:
    """Formats 1 to 4 (queues written by earlier builds) read as events like today's."""
    root = SUPPORT_DIR / "fixtures" / f"queue-{build}"
    manifest = json.loads(root.with_suffix(".json").read_text())

    async def read() -> list[log_events.Event]:
        store = open_store(f"file://{root}")
        try:
            return [e async for e in log_events.read(store)]
        finally:
            await store.close()

    events = asyncio.run(read())
    enqueued = {e.id for e in events if e.kind == "enqueued"}
    assert enqueued == {
        *manifest["ids"].values(),
        *([manifest["big"]] if "big" in manifest else []),
    }
    assert set(manifest["completed"]) <= {e.id for e in events if e.kind == "completed"}
    assert {e.kind for e in events} >= {"enqueued", "leased", "completed", "failed"}


async def _stamps(env: StoreEnv) -> list[segment.Stamp]:
    store = open_store(env.url, dict(env.options))
    try:
        return [
            segment.stamp(await tables.tail(store, seq), segment.key(seq))
            for seq in await log_events.seqs(store)
        ]
    finally:
        await store.close()


def test_stamps_never_go_back_across_writers(durable_env: StoreEnv) -> None:
    """A writer whose clock runs behind the log's last stamp stamps no object before it, and
    says it keeps that rule (its token's mark)."""
    ahead = FakeClock(2_000_000_000.0)
    with durable_env.open(clock=ahead) as q:
        q.enqueue_batch([b"a", b"b"])
    with durable_env.open(clock=FakeClock(1_900_000_000.0)) as q:  # a slower host
        q.enqueue_batch([b"c"])
        q.complete_batch(q.dequeue(max_messages=3))
    found = asyncio.run(_stamps(durable_env))
    times = [s.at for s in found]
    assert times == sorted(times) and times[-1] >= 2_000_000_000.0
    assert all(stamps.marked(s.writer) for s in found)


def _spread(env: StoreEnv, clock: FakeClock, rounds: int) -> None:
    """``rounds`` log objects or more, ten seconds apart."""
    with env.open(clock=clock) as q:
        for r in range(rounds):
            q.enqueue_batch([b"r%d-%d" % (r, i) for i in range(5)], durability="durable")
            clock.advance(10)


def test_a_time_window_finds_its_log_objects_by_binary_search(
    durable_env: StoreEnv, clock: FakeClock
) -> None:
    """The log objects of a window hold every event in it, and finding them reads a few
    headers, not every object: the rest are skipped whole."""
    _spread(durable_env, clock, 120)
    since, until = T0 + 300, T0 + 400

    async def main() -> tuple[list[int], int, int]:
        store = open_store(durable_env.url, dict(durable_env.options))
        try:
            seqs = await log_events.seqs(store)
            before = store.counts.gets
            chosen, _ = await timeline.window(store, seqs, since, until)
            return chosen, store.counts.gets - before, len(seqs)
        finally:
            await store.close()

    chosen, gets, total = asyncio.run(main())
    assert len(chosen) <= 14 and total >= 120, (chosen, total)
    assert gets <= 3 * math.ceil(math.log2(total)) + 2, gets
    events = asyncio.run(_events(durable_env))
    inside = {(e.seq, e.op, e.id) for e in events if since <= e.at <= until}
    assert len(inside) >= 50 and {seq for seq, _, _ in inside} <= set(chosen)


def test_replay_enqueues_a_period_s_messages_once(
    durable_env: StoreEnv, clock: FakeClock, tmp_path: Path
) -> None:
    """``s3q replay``: the messages enqueued in the period, of the tenant asked for, copied
    into another queue with their payloads and fields; run again, nothing doubles."""
    with durable_env.open(clock=clock) as q:
        q.enqueue_batch([{"payload": b"early", "tenant": "a"}])
        clock.advance(100)
        q.enqueue_batch(
            [
                {"payload": b"one", "tenant": "a", "priority": 7, "attributes": {"k": "v"}},
                {"payload": b"two", "tenant": "b"},
                {"payload": b"x" * 300_000, "tenant": "a"},  # an object of its own
            ]
        )
        q.complete_batch(q.dequeue(max_messages=10))
    target = (tmp_path / "target").as_uri()
    start = datetime.datetime.fromtimestamp(T0 + 50, datetime.UTC).isoformat()
    query = urlencode(
        {k: str(v).lower() if v is True else v for k, v in durable_env.options.items()}
    )
    source = f"{durable_env.url}?{query}" if query else durable_env.url
    args = ["replay", source, "--into", target, "--since", start, "--tenant", "a", "--json"]
    for replayed, deduplicated in ((2, 0), (0, 2)):  # run again: the copies are there already
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        answer = json.loads(result.output)
        assert (answer["replayed"], answer["deduplicated"]) == (replayed, deduplicated)
    with s3q.open(target) as q:
        got = q.dequeue(max_messages=10)
    assert sorted(m.payload[:3] for m in got) == [b"one", b"xxx"]
    one = next(m for m in got if m.payload == b"one")
    assert (one.priority, one.tenant, one.attributes) == (7, "a", {"k": "v"})
    assert one.dedup_id is not None and one.dedup_id.startswith("replay:")


def test_replay_refuses_a_bad_time_without_a_traceback(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["replay", "q", "--into", "t", "--since", "yesterday", "--store", str(tmp_path)]
    )
    assert result.exit_code == 2 and "'yesterday' is neither a duration" in result.output
    assert "Traceback" not in result.output


STEPS = ("release", "extend", "fail", "expire", "redrive")


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(st.sampled_from(STEPS), min_size=1, max_size=10))
@example(steps=["release", "fail", "fail", "fail", "redrive", "fail"])  # (the case)
@example(steps=["expire", "expire", "expire", "release", "extend"])
def test_the_attempt_in_the_history_is_the_queue_s_own_count(
    tmp_path: Path, steps: list[str]
) -> None:
    """For every delivery, failure and death of a message, whatever came before (releases,
    which give the attempt back, extensions, failures, leases run out, redrives), the
    history's ``attempt`` is ``Message.attempts`` at that delivery (a release made the next
    delivery read ``retried`` one too high: ``dead`` at attempt 4 with ``max_attempts=3``)."""
    clock = FakeClock()
    url = f"file://{tmp_path}/{uuid.uuid4().hex}/q"
    q = s3q.open(url, clock=clock, max_attempts=3, retry_delay=1.0, retry_delay_max=1.0)
    expected: list[tuple[str, int]] = []  # (kind, attempt) of each event with an attempt
    try:
        mid = q.enqueue(b"m")
        for step in steps:
            clock.advance(2.0)  # (past any retry delay)
            if q.status(mid) is s3q.MessageStatus.DEAD:
                q.redrive([mid])
                continue
            [m] = q.dequeue(1, visibility_timeout=30)
            expected.append(("retried" if m.attempts > 1 else "leased", m.attempts))
            if step == "release":
                q.release(m)
            elif step == "extend":
                q.extend(m, 30)
                q.complete(m)
                break
            elif step == "fail":
                dead = q.fail(m, "no") is None
                expected.append(("dead" if dead else "failed", m.attempts))
            elif step == "expire":
                clock.advance(31.0)
                if m.attempts == 3:  # a lease run out on the last attempt: dead
                    q.peek(1)  # (the writer buries it when it next looks)
                    expected.append(("dead", m.attempts))
            elif step == "redrive":
                q.fail(m, "no")
                expected.append(("dead" if m.attempts == 3 else "failed", m.attempts))
    finally:
        q.close()
    store = open_store(url)
    try:
        events = asyncio.run(_all(store))
    finally:
        asyncio.run(store.close())
    got = [(e.kind, e.attempt) for e in events if e.id == mid and e.attempt is not None]
    assert got == expected, (steps, [(e.kind, e.attempt) for e in events if e.id == mid])


async def _all(store: Store) -> list[log_events.Event]:
    return [e async for e in log_events.read(store, 0)]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    plan=st.lists(
        st.lists(st.sampled_from(ACTIONS), min_size=1, max_size=4), min_size=1, max_size=6
    ),
    messages=st.integers(1, 4),
    sizes=st.lists(st.integers(1, 9), min_size=1, max_size=4),
)
@example(  # fails, runs out, is redriven and fails again across tasks of one log object each
    plan=[["fail", "release"], ["expire"], ["fail"], ["redrive"], ["fail"]], messages=3, sizes=[1]
)
def test_every_task_of_a_split_read_gives_each_delivery_the_queue_s_attempt(
    tmp_path: Path, plan: list[list[str]], messages: int, sizes: list[int]
) -> None:
    """The Spark read's tasks each read their own consecutive log objects, however the log is
    split (``sizes``, cycled: log objects per task): every delivery, failure and death they
    give carries ``Message.attempts`` at that delivery, whatever came before it in the log
    objects of other tasks (its enqueue, earlier deliveries, releases, failures, leases run
    out, redrives)."""
    from s3q.spark import history_read  # (pyspark's data source classes: no session needed)

    clock = FakeClock()
    url = f"file://{tmp_path}/{uuid.uuid4().hex}/q"
    q = s3q.open(url, clock=clock, **SETTINGS)
    try:
        expected = deliveries(q, clock, plan, messages)
    finally:
        q.close()
    store = open_store(url)
    try:
        seqs = asyncio.run(log_events.seqs(store))
        queue = asyncio.run(log_events.queue_id(store))
    finally:
        asyncio.run(store.close())
    assert seqs == list(range(1, len(seqs) + 1))  # (all of the log: history_retention)
    ranges, at, turn = [], 0, 0
    while at < len(seqs):
        size = sizes[turn % len(sizes)]
        ranges.append(seqs[at : at + size])
        at, turn = at + size, turn + 1
    rows: list[dict[str, object]] = []
    for i, part in enumerate(ranges):
        task = history_read.LogRange(i, queue, part, history_read.Window(), strict=True)
        for batch in history_read.read_range(open_store(url), task, payloads=False):
            rows += batch.to_pylist()
    delivered = {mid: seen for mid, seen in expected.items() if seen}
    assert attempts_read(rows) == delivered, (plan, [len(r) for r in ranges])
    earlier = asyncio.run(_read_as_earlier_builds_wrote(url, queue))  # (they carried none)
    assert attempts_read(earlier) == delivered, plan


async def _read_as_earlier_builds_wrote(url: str, queue: str) -> list[dict[str, object]]:
    """The whole log's events, its operations stripped of the attempts they carry, as builds
    before them wrote them: counted by the reader from each message's enqueue on."""
    store = open_store(url)
    reader = log_events.Reader(queue)
    rows: list[dict[str, object]] = []
    try:
        for seq in await log_events.seqs(store):
            header = segment.decode(await store.get(segment.key(seq)), segment.key(seq))
            header.ops = [_carrying_none(op) for op in header.ops]
            rows += [msgspec.structs.asdict(e) for e in reader.events(header)]
    finally:
        await store.close()
    return rows


def _carrying_none(op: ops.AnyOp) -> ops.AnyOp:
    if isinstance(op, ops.Lease | ops.Bury):
        return msgspec.structs.replace(op, attempts=None)
    if isinstance(op, ops.Fail):
        return msgspec.structs.replace(op, attempt=0)
    return op
