"""The PySpark data source ``s3q`` on a real local SparkSession (master local[2])."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from attempts_work import ACTIONS, ATTEMPTED, SETTINGS, attempts_read, deliveries
from conftest import SUPPORT_DIR, T0, FakeClock, FileEnv, StoreEnv, child_env

import s3q

os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import s3q.spark
from s3q.partitions.placement import home, split_key

# one worker runs them all (pytest-xdist, --dist loadgroup): one JVM, not one per worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = (
        SparkSession.builder.master("local[2]")
        .appName("s3q-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    s3q.spark.register(session)
    yield session
    session.stop()


@pytest.fixture
def file_env(tmp_path: Path) -> Iterator[StoreEnv]:
    env = FileEnv(tmp_path)
    yield env
    env.close_all()


def with_store(reader: Any, env: StoreEnv) -> Any:
    """A DataFrameReader or Writer with ``env``'s store options."""
    for name, value in env.options.items():
        reader = reader.option(name, str(value).lower() if isinstance(value, bool) else value)
    return reader


def staged(env: StoreEnv) -> list[str]:
    """Staged payload objects, in every partition (an aborted job's empty marker is left for
    the collector)."""
    keys = [k for k in list(env.keys()) if split_key(k)[1].startswith("staged/")]
    markers = [k for k in keys if "-abort-marker-" in k]
    assert all(env.read(k) == b"" for k in markers)
    return [k for k in keys if k not in markers]


def stats(env: StoreEnv) -> Any:
    q = env.open()
    try:
        return q.stats()
    finally:
        q.close()


def every_column(spark: SparkSession, rows: int, partitions: int = 2) -> DataFrame:
    """Rows whose columns all derive from their number, so a read can check each one."""
    i = F.col("id")
    return spark.range(0, rows, numPartitions=partitions).select(
        F.concat(F.lit("payload-"), i.cast("string")).cast("binary").alias("payload"),
        (i % 256).cast("int").alias("priority"),
        F.when(i % 10 == 0, F.lit(600.0)).otherwise(F.lit(0.0)).alias("delay"),
        F.when(i % 100 == 0, F.concat(F.lit("g"), (i % 3).cast("string"))).alias("group"),
        F.concat(F.lit("d"), i.cast("string")).alias("dedup_id"),
        F.create_map(F.lit("n"), i.cast("string"), F.lit("kind"), F.lit("test")).alias(
            "attributes"
        ),
        F.when(i % 7 == 0, F.concat(F.lit("t"), (i % 2).cast("string"))).alias("tenant"),
    )


# ------------------------------------------------------------------------------- batch


def test_write_then_read_round_trip_every_column(
    spark: SparkSession, durable_env: StoreEnv
) -> None:
    rows = 100_000
    with_store(every_column(spark, rows).write.format("s3q").mode("append"), durable_env).save(
        durable_env.url
    )
    assert len(durable_env.log_keys()) == 2, "the writer's open, then one commit for every row"
    assert 1 <= len(staged(durable_env)) <= 4, "one staged object per task, not one per row"

    table = with_store(spark.read.format("s3q"), durable_env).load(durable_env.url).toArrow()
    assert table.num_rows == rows
    got = table.to_pylist()
    assert len({r["id"] for r in got}) == rows
    for r in got:
        n = int(dict(r["attributes"])["n"])
        assert r["payload"] == f"payload-{n}".encode()
        assert r["priority"] == n % 256
        assert r["status"] == ("delayed" if n % 10 == 0 else "pending")
        assert r["group"] == (f"g{n % 3}" if n % 100 == 0 else None)
        assert r["dedup_id"] == f"d{n}"
        assert dict(r["attributes"]) == {"n": str(n), "kind": "test"}
        assert r["attempts"] == 0 and r["last_error"] is None
        assert r["tenant"] == (f"t{n % 2}" if n % 7 == 0 else None)

    dead = with_store(spark.read.format("s3q").option("status", "dead"), durable_env)
    assert dead.load(durable_env.url).count() == 0
    q = durable_env.open()
    (first,) = q.dequeue()
    assert first.priority == 255 and first.payload == b"payload-255"
    q.close()


def test_a_partitioned_queue_is_read_whole_by_a_snapshot_and_a_stream(
    spark: SparkSession, file_env: StoreEnv
) -> None:
    """A queue of three partitions: the snapshot plans every partition's messages (runs and
    records, their objects under ``partitions/<i>/``), and a stream consumes them all."""
    with file_env.open(partitions=3) as q:
        sent = {}
        for i in range(3):  # a run in each partition, and records (grouped) besides
            payloads = [b"r%d-%d" % (i, k) for k in range(50)]
            sent.update(zip(q.enqueue_batch(payloads), payloads, strict=True))
        for k in range(30):
            sent[q.enqueue(b"g%d" % k, group=f"g{k % 5}")] = b"g%d" % k
        assert len({mid[:8] for mid in sent}) == 3
    table = with_store(spark.read.format("s3q"), file_env).load(file_env.url).toArrow()
    assert {r["id"]: r["payload"] for r in table.to_pylist()} == sent

    out = file_env.root / "out"
    query = (
        with_store(spark.readStream.format("s3q"), file_env)
        .load(file_env.url)
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(file_env.root / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    got = spark.read.parquet(str(out)).select("id", "payload").toArrow().to_pylist()
    assert {r["id"]: r["payload"] for r in got} == sent
    assert stats(file_env).completed == len(sent)


def test_a_failed_task_leaves_the_queue_unchanged(spark: SparkSession, file_env: StoreEnv) -> None:
    q = file_env.open()
    q.enqueue_batch([b"before"] * 10)
    q.close()
    before = stats(file_env)

    @F.udf("binary")
    def explode_on_4000(n: int) -> bytes:
        if n == 4000:
            raise RuntimeError("boom at 4000")
        return b"x" * 100

    df = spark.range(0, 5000, numPartitions=2).select(explode_on_4000("id").alias("payload"))
    writer = df.write.format("s3q").mode("append").option("stageBytes", 10_000)
    with pytest.raises(Exception, match="boom at 4000"):
        writer.save(file_env.url)
    after = stats(file_env)
    assert (
        (after.pending, after.total_enqueued)
        == (before.pending, before.total_enqueued)
        == (
            10,
            10,
        )
    )
    assert staged(file_env) == [], "abort deletes every staged object"


def test_a_bad_priority_fails_the_job_naming_the_row(
    spark: SparkSession, file_env: StoreEnv
) -> None:
    i = F.col("id")
    df = spark.range(0, 3000, numPartitions=2).select(
        i.cast("string").alias("payload"),
        F.when(i == 2345, F.lit(300)).otherwise(F.lit(1)).alias("priority"),
    )
    with pytest.raises(Exception) as caught:
        df.write.format("s3q").mode("append").save(file_env.url)
    text = str(caught.value)
    assert "row 845 of partition 1: priority must be an integer from 0 to 255, got 300" in text
    assert stats(file_env).total_enqueued == 0
    assert staged(file_env) == []


def test_snapshot_read_while_the_writer_and_gc_run(spark: SparkSession, file_env: StoreEnv) -> None:
    """A reader sees a consistent snapshot while the writer enqueues, completes, checkpoints
    and collects garbage beside it: reads go on until the collector has deleted objects."""
    # a Spark read takes seconds on a machine the parallel suite saturates: with a grace of
    # 3 s every read there outlived it and found objects gone (as documented), so none
    # counted; 10 s keeps reads within it, and the collector still deletes within the test
    grace = 10.0
    q = file_env.open(gc_grace=grace, checkpoint_ops=500, completed_retention=0.0)
    stop, started = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    deleted = [0]

    def churn() -> None:
        try:
            n = 0
            while not stop.is_set():
                q.enqueue_batch(
                    [
                        {"payload": f"p{n + k}".encode(), "attributes": {"n": str(n + k)}}
                        for k in range(300)
                    ]
                )
                n += 300
                q.complete_batch(q.dequeue(max_messages=200))
                started.set()
                if n % 3000 == 0:
                    deleted[0] += q.compact().deleted_objects
        except BaseException as exc:  # reported by the test
            errors.append(exc)
            started.set()

    thread = threading.Thread(target=churn)
    thread.start()
    reads = expired = 0
    deadline = time.monotonic() + 120
    try:
        assert started.wait(60)
        while reads < 3 or not deleted[0]:
            assert time.monotonic() < deadline, (
                f"in 120 s: {reads} reads whole, {expired} outlived gc_grace, "
                f"{deleted[0]} objects deleted"
            )
            assert not errors, errors
            began = time.monotonic()
            try:
                rows = spark.read.format("s3q").load(file_env.url).toArrow().to_pylist()
            except Exception as exc:
                # a read slower than gc_grace (a loaded machine) may find an object gone,
                # as documented; one within it never does
                if "SnapshotExpired" in str(exc) and time.monotonic() - began >= grace:
                    expired += 1
                    continue
                raise
            assert rows, "the queue always holds messages here"
            assert len({r["id"] for r in rows}) == len(rows)
            for r in rows:
                assert r["payload"] == f"p{dict(r['attributes'])['n']}".encode()
                assert r["status"] in ("pending", "processing")
            reads += 1
    finally:
        stop.set()
        thread.join()
        q.close()
    assert not errors, errors


# --------------------------------------------------------------------------- streaming


# the longest of them (two child drivers): on a worker of its own, beside the others
@pytest.mark.xdist_group("spark-kill")
def test_streaming_read_survives_a_driver_kill(spark: SparkSession, file_env: StoreEnv) -> None:
    """kill -9 of the query's process mid-stream, then a restart from its checkpoint: the
    Parquet sink holds every message exactly once and the queue ends empty."""
    total = 3000
    q = file_env.open(max_attempts=20)
    q.enqueue_batch([f"m{i}".encode() for i in range(total)])
    q.close()
    work = Path(str(file_env.path) + "-spark")
    out, checkpoint = work / "out", work / "checkpoint"
    args = [sys.executable, str(SUPPORT_DIR / "child_spark_consume.py"), file_env.url]
    args += [str(out), str(checkpoint), str(total)]

    first = subprocess.Popen(
        args, env=child_env(), stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        commits = checkpoint / "commits"
        deadline = time.monotonic() + 180
        # Polling the child's checkpoint directory: no event crosses the process boundary.
        while not (commits.exists() and len(list(commits.iterdir())) >= 3):
            assert first.poll() is None, "the query ended before it was killed"
            assert time.monotonic() < deadline, "no micro-batch committed within 180 s"
            time.sleep(0.05)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the Python driver, its JVM and its workers
        first.wait()
    delivered = spark.read.parquet(str(out)).count()
    assert 0 < delivered < total, f"killed after {delivered} of {total}: not mid-stream"

    second = subprocess.run(args, env=child_env(), capture_output=True, text=True, timeout=280)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "done" in second.stdout

    rows = spark.read.parquet(str(out)).select("id", "payload").collect()
    payloads = sorted(r.payload for r in rows)
    assert len(rows) == total, f"{len(rows) - len({r.id for r in rows})} duplicate(s)"
    assert payloads == sorted(f"m{i}".encode() for i in range(total))
    after = stats(file_env)
    assert (after.pending, after.processing, after.retry, after.dead) == (0, 0, 0, 0)
    assert after.completed == total
    assert not [k for k in list(file_env.keys()) if k.startswith("spark/")], "manifests remain"
    shutil.rmtree(work, ignore_errors=True)


@pytest.mark.parametrize("partitions", [1, 3])
def test_streaming_write_replay_enqueues_nothing_twice(
    spark: SparkSession, file_env: StoreEnv, tmp_path: Path, partitions: int
) -> None:
    """A micro-batch Spark replays enqueues nothing twice; in a queue of three partitions each
    batch (its rows grouped five ways) commits in several, each with its own token."""
    file_env.open(partitions=partitions).close()
    source, checkpoint = tmp_path / "source", tmp_path / "checkpoint"
    for part in range(3):
        spark.range(part * 100, part * 100 + 100, numPartitions=1).select(
            F.col("id").cast("string").alias("payload"),
            F.concat(F.lit("g"), (F.col("id") % 5).cast("string")).alias("group"),
        ).write.parquet(str(source / f"part={part}"))

    def run() -> None:
        query = (
            spark.readStream.schema("payload string, group string, part int")
            .option("maxFilesPerTrigger", 1)
            .parquet(str(source))
            .select("payload", "group")
            .writeStream.format("s3q")
            .option("checkpointLocation", str(checkpoint))
            .start(file_env.url)
        )
        query.processAllAvailable()
        query.stop()

    run()
    assert stats(file_env).total_enqueued == 300
    objects = staged(file_env)
    assert len({split_key(k)[0] for k in objects}) == min(partitions, 3)
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):  # as if the driver died before logging it
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    run()  # Spark replays batch ``last`` into the sink
    assert (checkpoint / "commits" / str(last)).exists(), "Spark did not replay the batch"
    after = stats(file_env)
    assert after.total_enqueued == 300
    assert sorted(staged(file_env)) == sorted(objects), "the replay's staged objects are deleted"
    q = file_env.open()
    payloads: list[bytes] = []
    while taken := q.dequeue(max_messages=1000, per_group=10):
        payloads += [m.payload for m in taken]
        q.complete_batch(taken)
    q.close()
    assert sorted(payloads) == sorted(str(i).encode() for i in range(300))


def test_a_write_to_a_partitioned_queue_spreads_its_tasks_and_places_its_keys(
    spark: SparkSession, file_env: StoreEnv
) -> None:
    """Each task stages its rows under the partitions they go to: a row with a group in its
    group's partition (in order), one with a dedup id in that id's, the others in the task's
    own; every partition commits its part."""
    file_env.open(partitions=3).close()
    i = F.col("id")
    df = spark.range(0, 3000, numPartitions=4).select(
        F.concat(F.lit("p"), i.cast("string")).cast("binary").alias("payload"),
        F.when(i % 3 == 0, F.concat(F.lit("g"), (i % 4).cast("string"))).alias("group"),
        F.when(i % 3 == 1, F.concat(F.lit("d"), i.cast("string"))).alias("dedup_id"),
    )
    with_store(df.write.format("s3q").mode("append"), file_env).save(file_env.url)
    table = with_store(spark.read.format("s3q"), file_env).load(file_env.url).toArrow()
    rows = table.to_pylist()
    assert len(rows) == 3000
    with file_env.open() as q:
        ids_of = q.stats().queue_id.split(",")
    where = {r["payload"]: ids_of.index(r["id"][:8]) for r in rows}
    for r in rows:
        key = r["group"] if r["group"] is not None else r["dedup_id"]
        if key is not None:
            assert where[r["payload"]] == home(key, 3), r
    plain = {where[r["payload"]] for r in rows if r["group"] is None and r["dedup_id"] is None}
    assert plain == {0, 1, 2}, "four tasks, each in its turn's partition: all three used"
    for g in range(4):  # a group's messages lie in the order written (ids tell the log's)
        mine = sorted((r["id"], int(r["payload"][1:])) for r in rows if r["group"] == f"g{g}")
        numbers = [n for _, n in mine]
        assert numbers == sorted(numbers) and len(numbers) == 250, g
    assert {split_key(k)[0] for k in staged(file_env)} == {0, 1, 2}


def test_commit_refused_by_a_held_queue_deletes_the_staged_objects(file_env: StoreEnv) -> None:
    """The driver's commit meets a live writer: nothing is enqueued, nothing is left staged;
    once a commit was attempted with an unknown outcome, abort leaves the objects alone."""
    import pyarrow as pa

    from s3q.spark.batch_write import BatchWriter
    from s3q.spark.options import parse

    writer = BatchWriter(parse({"path": file_env.url}))
    batch = pa.RecordBatch.from_pydict({"payload": [b"a", b"bb", b"ccc"]})
    staged_message = writer.write(iter([batch]))
    assert len(staged(file_env)) == 1
    holder = file_env.open()
    with pytest.raises(s3q.QueueLocked):
        writer.commit([staged_message])
    assert staged(file_env) == []
    assert holder.stats().total_enqueued == 0

    again = BatchWriter(parse({"path": file_env.url}))
    message = again.write(iter([batch]))
    from s3q.spark.options import run
    from s3q.spark.stage import mark_committing

    run(mark_committing(again.options, again.job))  # as if a commit's answer was lost
    again.abort([message])
    assert len(staged(file_env)) == 2, "the object and the commit marker stay for the collector"
    holder.close()


def test_streaming_read_through_a_broker(spark: SparkSession, tmp_path: Path) -> None:
    """With option broker, the broker leases and completes; executors read the payloads the
    driver wrote beside each manifest."""
    from broker_harness import Broker

    from s3q.client import connect

    store = (tmp_path / "store").as_uri()
    with Broker(store) as broker, connect(broker.url) as client:
        remote = client.queue("jobs")
        remote.enqueue_batch([{"payload": f"b{i}".encode(), "priority": i % 3} for i in range(500)])
        query = (
            spark.readStream.format("s3q")
            .option("broker", broker.url)
            .option("maxMessagesPerBatch", 200)
            .load(f"{store}/jobs")
            .select("id", "payload", "priority")
            .writeStream.format("memory")
            .queryName("through_broker")
            .start()
        )
        query.processAllAvailable()
        query.stop()
        rows = spark.sql("SELECT * FROM through_broker").collect()
        assert sorted(r.payload for r in rows) == sorted(f"b{i}".encode() for i in range(500))
        assert {int(r.payload[1:]) % 3 == r.priority for r in rows} == {True}
        after = remote.stats()
        assert (after.pending, after.processing, after.completed) == (0, 0, 500)
    leftovers = [p for p in (tmp_path / "store" / "jobs").rglob("*") if "spark" in p.parts]
    assert [p for p in leftovers if p.is_file()] == [], "manifests and their data are deleted"


def test_stream_source_completes_messages_a_crashed_driver_leased_again(
    file_env: StoreEnv,
) -> None:
    """The batch reached the sink, but a driver that died had leased its messages again: the
    next driver cannot complete them with the batch's receipts. It remembers them, and when
    they come back completes them instead of emitting them in a new batch."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from s3q.spark.options import parse
    from s3q.spark.stream_read import ConsumeReader

    q = file_env.open()
    q.enqueue_batch([f"o{i}".encode() for i in range(5)])
    q.close()
    options = parse({"path": file_env.url, "visibilityTimeout": "300"})

    first = ConsumeReader(options)
    assert first.latestOffset({"n": 0}, ReadMaxRows(10)) == {"n": 1}
    (manifest,) = first._manifests.values()
    first.stop()  # as if the driver died with batch 1 in the sink

    q = file_env.open()  # a later driver re-leases them, then dies before recording it
    for receipt in manifest.receipts:
        q.extend(receipt, 0)
    again = q.dequeue(max_messages=10, visibility_timeout=300)
    assert len(again) == 5
    q.close()

    second = ConsumeReader(options)
    assert second.latestOffset({"n": 1}, ReadMaxRows(10)) == {"n": 1}, "nothing new to emit"
    second.stop()

    q = file_env.open()
    assert q.stats().processing == 5
    for message in again:
        q.extend(message, 0)  # their leases run out
    q.close()

    third = ConsumeReader(options)
    assert third.latestOffset({"n": 1}, ReadMaxRows(10)) == {"n": 1}, "owed, not emitted"
    third.stop()
    q = file_env.open()
    after = q.stats()
    q.close()
    assert (after.completed, after.pending, after.processing) == (5, 0, 0)
    assert not [k for k in list(file_env.keys()) if k.startswith("spark/")]


def test_writes_through_the_broker_that_leads_the_queue(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Option broker: executors stage into the store, the broker's writer commits them, while
    the broker keeps serving the queue (a direct commit would find the queue locked)."""
    from broker_harness import Broker

    from s3q.client import connect

    store = (tmp_path / "store").as_uri()
    source, checkpoint = tmp_path / "source", tmp_path / "checkpoint"
    spark.range(0, 50, numPartitions=1).select(
        F.col("id").cast("string").alias("payload")
    ).write.parquet(str(source))
    with Broker(store) as broker, connect(broker.url) as client:
        remote = client.queue("loads")
        remote.enqueue(b"already there")  # the broker leads the queue from here on
        every_column(spark, 2_000).write.format("s3q").option("broker", broker.url).mode(
            "append"
        ).save(f"{store}/loads")
        assert remote.stats().total_enqueued == 2_001

        def stream() -> None:
            query = (
                spark.readStream.schema("payload string")
                .parquet(str(source))
                .writeStream.format("s3q")
                .option("broker", broker.url)
                .option("checkpointLocation", str(checkpoint))
                .start(f"{store}/loads")
            )
            query.processAllAvailable()
            query.stop()

        stream()
        assert remote.stats().total_enqueued == 2_051
        last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
        for name in (str(last), f".{last}.crc"):  # as if the driver died before logging it
            (checkpoint / "commits" / name).unlink(missing_ok=True)
        stream()  # the replayed batch carries the same commit token: nothing twice
        assert (checkpoint / "commits" / str(last)).exists(), "Spark did not replay the batch"
        assert remote.stats().total_enqueued == 2_051
        live = {m.payload for m in remote.peek(limit=10_000)}
        assert {str(i).encode() for i in range(50)} <= live
    staged_files = [p for p in (tmp_path / "store" / "loads").rglob("*") if p.is_file()]
    assert not [p for p in staged_files if "marker" in p.name], "commit markers are deleted"


def test_runs_reach_the_executors_as_stretches_read_from_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver plans untouched messages as run pieces, reading no table; each piece reads
    its members' sizes, dedup ids and attributes from the log. Split runs, and a run whose
    front was taken, come out whole and in order."""
    import asyncio

    from s3q import snapshot
    from s3q.log import tables
    from s3q.spark import pieces

    monkeypatch.setattr(pieces, "PARTITION_ROWS", 7)
    url = f"file://{tmp_path}/q"
    with s3q.open(url) as q:
        first = q.enqueue_batch([b"p%d" % i + b"." * i for i in range(20)])
        q.dequeue(3)  # the front of the first run becomes records
        tagged = [
            {"payload": b"d%d" % i, "dedup_id": f"k{i}", "attributes": {"i": str(i)}}
            for i in range(9)
        ]
        second = q.enqueue_batch(tagged)
    loaded = asyncio.run(snapshot.load(s3q.store.open_store(url)))
    appends = tables.appends
    monkeypatch.setattr(tables, "appends", _refuse)
    runs = list(pieces.run_pieces(loaded.state))
    monkeypatch.setattr(tables, "appends", appends)
    assert [r.count for r in runs] == [7, 7, 3, 7, 2]
    batches = list(pieces.read(lambda _: s3q.store.open_store(url), list(runs)))
    rows = [row for batch in batches for row in batch.to_pylist()]
    assert [row["id"] for row in rows] == first[3:] + second
    assert [row["payload"] for row in rows[:2]] == [b"p3...", b"p4...."]
    assert rows[-1]["dedup_id"] == "k8" and dict(rows[-1]["attributes"]) == {"i": "8"}
    assert {row["status"] for row in rows} == {"pending"}


def test_many_small_runs_are_read_with_a_few_gets(tmp_path: Path) -> None:
    """Single enqueues of alternating priorities, gathered into a few log objects, make a run
    of every message: the executor reads each log object's table once and joins the stretches
    of one object into one GET, not one per run."""
    import asyncio

    from s3q import snapshot
    from s3q.spark import pieces

    url = f"file://{tmp_path}/q"
    n = 3_000

    async def load() -> list[str]:
        q = await s3q.open_async(url)
        try:
            return await asyncio.gather(*(q.enqueue(b"m%d" % i, priority=i % 2) for i in range(n)))
        finally:
            await q.close()

    sent = asyncio.run(load())
    loaded = asyncio.run(snapshot.load(s3q.store.open_store(url)))
    runs = list(pieces.run_pieces(loaded.state))
    objects = len({run.seq for run in runs})
    assert len(runs) == n and objects < 100, "one run per message: the case this test is about"
    store = s3q.store.open_store(url)
    batches = list(pieces.read(lambda _: store, list(runs)))
    gets = store.counts.gets
    assert gets <= 3 * objects, f"{gets} GETs for {n} one-message runs in {objects} objects"
    rows = [row for batch in batches for row in batch.to_pylist()]
    assert sorted(row["id"] for row in rows) == sorted(sent)
    assert all(row["payload"] == b"m%d" % sent.index(row["id"]) for row in rows[:50])
    assert {row["priority"] for row in rows} == {0, 1}


def test_a_bulk_write_of_alternating_priorities_is_one_run_each(
    spark: SparkSession, file_env: StoreEnv
) -> None:
    """A staged object's rows are committed with each priority's together: a run per
    priority, delivered in priority order and, within one, in the order written."""
    from s3q import snapshot
    from s3q.spark import pieces

    df = spark.range(0, 1_000, numPartitions=1).select(
        F.concat(F.lit("m"), F.col("id").cast("string")).cast("binary").alias("payload"),
        (F.col("id") % 4).cast("int").alias("priority"),
    )
    with_store(df.write.format("s3q").mode("append"), file_env).save(file_env.url)
    import asyncio

    loaded = asyncio.run(snapshot.load(s3q.store.open_store(file_env.url)))
    assert len(list(pieces.run_pieces(loaded.state))) == 4
    q = file_env.open()
    try:
        got = [m.payload for m in q.dequeue(max_messages=1_000)]
    finally:
        q.close()
    want = [b"m%d" % i for p in (3, 2, 1, 0) for i in range(1_000) if i % 4 == p]
    assert got == want


async def _refuse(*_: Any) -> Any:
    raise AssertionError("a table was read on the driver")


@pytest.mark.parametrize("through", ["embedded", "broker"])
def test_available_now_reads_what_was_there_and_stops(
    spark: SparkSession, tmp_path: Path, through: str
) -> None:
    """trigger(availableNow=True) over more messages than a batch holds: every message that
    was in the queue when the query started reaches the sink once, in batches of
    maxMessagesPerBatch, and the query stops on its own. Through a broker, messages enqueued
    while the query runs (by its first batch, at a higher priority) are left for the next run."""
    from broker_harness import Broker

    from s3q.client import connect

    store = (tmp_path / "store").as_uri()
    url = f"{store}/jobs"
    with s3q.open(url) as q:
        q.enqueue_batch([f"m{i}".encode() for i in range(2500)])
    seen: list[bytes] = []
    batches: list[int] = []
    with contextlib.ExitStack() as stack:
        reader = spark.readStream.format("s3q").option("maxMessagesPerBatch", 1000)
        later: Any = None
        if through == "broker":
            broker = stack.enter_context(Broker(store))
            later = stack.enter_context(connect(broker.url)).queue("jobs")
            reader = reader.option("broker", broker.url)

        def each(frame: DataFrame, batch: int) -> None:
            rows = frame.select("payload").collect()
            seen.extend(bytes(r.payload) for r in rows)
            batches.append(len(rows))
            if later is not None and batch == 0:
                later.enqueue_batch([{"payload": b"later", "priority": 9}] * 5)

        query = reader.load(url).writeStream.foreachBatch(each).trigger(availableNow=True).start()
        assert query.awaitTermination(180), "the availableNow query did not stop on its own"
        assert query.exception() is None
        assert sorted(seen) == sorted(f"m{i}".encode() for i in range(2500))
        assert max(batches) <= 1000 and len([b for b in batches if b]) >= 3
        if later is not None:
            after = later.stats()
            assert (after.pending, after.processing, after.completed) == (5, 0, 2500)
    if later is None:
        # the source's process closes its queue as the query stops, perhaps a moment after
        deadline = time.monotonic() + 60
        while True:
            try:
                q = s3q.open(url)
                break
            except s3q.QueueLocked:
                assert time.monotonic() < deadline, "the stopped query still holds the queue"
                time.sleep(0.1)  # another process's close: no event to await
        with q:
            after = q.stats()
            assert (after.pending, after.processing, after.completed) == (0, 0, 2500)


@pytest.mark.xdist_group("spark-connect")  # its own JVMs, in a child: a group of its own
def test_the_data_source_under_spark_connect(tmp_path: Path) -> None:
    """Under Spark Connect (a remote session, as on Databricks serverless), a DataFrame write
    enqueues, a read sees the messages, and an availableNow stream over more messages than a
    batch holds drains each exactly once and stops on its own."""
    url = (tmp_path / "store").as_uri() + "/jobs"
    rows, batch = 1200, 500
    done = subprocess.run(
        [sys.executable, str(SUPPORT_DIR / "child_spark_connect.py"), url, str(rows), str(batch)],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    expected = sorted(f"m{i}" for i in range(rows))
    assert seen["connect"], "the session was not a Spark Connect session"
    assert seen["snapshot"] == expected and seen["snapshot_status"] == ["pending"]
    assert seen["stopped"] and seen["failure"] is None
    assert sorted(seen["drained"]) == expected
    assert seen["history_enqueued"] == rows and seen["lives"] == {"completed": rows}
    assert max(seen["batches"]) <= batch and len([b for b in seen["batches"] if b]) >= 3
    with s3q.open(url) as q:
        after = q.stats()
        assert (after.pending, after.processing, after.completed) == (0, 0, rows)


def _history_of_work(env: StoreEnv) -> tuple[FakeClock, list[str]]:
    """A queue with 40 log objects or more, ten seconds apart: enqueues of two tenants,
    leases, completions, and a failure that dies."""
    clock = FakeClock()
    sent: list[str] = []
    with env.open(clock=clock, max_attempts=1, history_retention=1e6) as q:
        for r in range(20):
            sent += q.enqueue_batch(
                [{"payload": b"m%d-%d" % (r, i), "tenant": "ab"[i % 2]} for i in range(4)]
            )
            clock.advance(10)
            got = q.dequeue(max_messages=4)
            q.complete_batch(got[:3])
            q.fail(got[3], "boom")
            clock.advance(10)
    return clock, sent


def test_history_read_one_row_per_event_with_time_and_kind_pushed_down(
    spark: SparkSession, file_env: StoreEnv
) -> None:
    """Every event, payloads on request; a time filter plans only the log objects of its
    window (one partition each here), and a kind filter keeps only that kind."""
    _, sent = _history_of_work(file_env)
    base = with_store(spark.read.format("s3q").option("history", "true"), file_env)
    events = base.load(file_env.url)
    kinds = dict(events.groupBy("kind").count().collect())
    assert (kinds["enqueued"], kinds["leased"], kinds["completed"], kinds["dead"]) == (
        80,
        80,
        60,
        20,
    )
    with_payloads = base.option("payloads", "true").load(file_env.url)
    enq = (
        with_payloads.where(F.col("kind") == "enqueued").select("id", "payload", "tenant").collect()
    )
    assert sorted(r.id for r in enq) == sorted(sent)
    assert {bytes(r.payload)[:1] for r in enq} == {b"m"} and {r.tenant for r in enq} == {"a", "b"}
    every = base.option("objectsPerPartition", "1").load(file_env.url)
    since = datetime.datetime.fromtimestamp(T0 + 100, datetime.UTC)
    until = datetime.datetime.fromtimestamp(T0 + 140, datetime.UTC)
    window = every.where((F.col("at") >= F.lit(since)) & (F.col("at") < F.lit(until)))
    all_parts = every.rdd.getNumPartitions()
    parts = window.rdd.getNumPartitions()
    assert parts <= 12 and 6 * parts < all_parts, (parts, all_parts)
    rows = window.collect()
    expected = [r for r in events.collect() if since <= r.at.astimezone(datetime.UTC) < until]
    assert sorted((r.seq, r.op, r.id) for r in rows) == sorted(
        (r.seq, r.op, r.id) for r in expected
    )
    dead = every.where(F.col("kind") == "dead").select("error", "attempt").collect()
    assert len(dead) == 20 and {r.error for r in dead} == {"boom"}


def test_history_lives_and_a_replay_through_the_sink(
    spark: SparkSession, file_env: StoreEnv, tmp_path: Path
) -> None:
    """``s3q.spark.lives``: one row per message with its times and final status; and the
    documented replay: history with payloads written to the sink with dedup ids, twice, once."""
    _history_of_work(file_env)
    events = with_store(spark.read.format("s3q").option("history", "true"), file_env)
    lives = s3q.spark.lives(events.load(file_env.url)).collect()
    assert len(lives) == 80
    by_status: dict[str, int] = {}
    for life in lives:
        by_status[life.status] = by_status.get(life.status, 0) + 1
        assert life.attempts == 1 and life.dwell == 10.0 and life.tenant in ("a", "b")
        if life.status == "completed":
            assert life.processing == 0.0 and life.latency == 10.0 and life.dead_at is None
        else:
            assert life.last_error == "boom" and life.dead_at is not None
    assert by_status == {"completed": 60, "dead": 20}
    target = (tmp_path / "again").as_uri()
    replay = (
        events.option("payloads", "true")
        .load(file_env.url)
        .where((F.col("kind") == "enqueued") & (F.col("tenant") == "a"))
        .select(
            "payload",
            "priority",
            "tenant",
            F.concat(F.lit("replay:"), F.col("id")).alias("dedup_id"),
        )
    )
    for _ in range(2):
        replay.write.format("s3q").mode("append").save(target)
    with s3q.open(target) as q:
        assert q.stats().pending == 40


def test_history_read_tells_retirements_and_lives_end_with_them(
    spark: SparkSession, file_env: StoreEnv
) -> None:
    """Messages a queue's ``retention`` removed, in every state, are one ``retired`` row each
    (a run's members and a stretch's from one range each in the log), and their lives end
    ``retired``."""
    clock = FakeClock()
    with file_env.open(clock=clock, retention=60.0, max_attempts=1, history_retention=1e6) as q:
        old = q.enqueue_batch([b"old %d" % i for i in range(10)])
        old.append(q.enqueue(b"later", delay=600.0))
        leased = q.dequeue(max_messages=3, visibility_timeout=600.0)  # a stretch
        q.fail(leased[0], "boom")  # dead
        clock.advance(61)
        young = q.enqueue(b"young")  # the commit that carries it retires the old ones
    events = with_store(spark.read.format("s3q").option("history", "true"), file_env)
    retired = events.load(file_env.url).where(F.col("kind") == "retired").collect()
    assert sorted(r.id for r in retired) == sorted(old)
    assert {r.at.timestamp() for r in retired} == {T0 + 61}
    lives = {life.id: life.status for life in s3q.spark.lives(events.load(file_env.url)).collect()}
    assert lives == {**dict.fromkeys(old, "retired"), young: "pending"}


def test_history_read_covers_every_partition(spark: SparkSession, file_env: StoreEnv) -> None:
    """A queue of three partitions: the history read plans each partition's log, and each
    event names the partition whose log holds it."""
    with file_env.open(partitions=3) as q:
        sent = [q.enqueue(b"m%d" % k) for k in range(9)]  # (in turn: three in each)
        for message in q.dequeue(9):
            q.complete(message)
        parts = q.stats().queue_id.split(",")
    events = with_store(spark.read.format("s3q").option("history", "true"), file_env)
    rows = events.load(file_env.url).where(F.col("id").isNotNull()).toArrow().to_pylist()
    assert {r["partition"] for r in rows} == {0, 1, 2}
    assert all(parts[r["partition"]] == r["id"][:8] for r in rows)
    kinds = {(r["id"], r["kind"]) for r in rows}
    for kind in ("enqueued", "leased", "completed"):
        assert {mid for mid, k in kinds if k == kind} == set(sent), kind


def test_history_refuses_bad_options(spark: SparkSession, file_env: StoreEnv) -> None:
    _history_of_work(file_env)
    reader = with_store(spark.read.format("s3q"), file_env)
    with pytest.raises(Exception, match=r"s3q\.spark\.lives"):
        reader.option("history", "lives").load(file_env.url).collect()
    with pytest.raises(Exception, match="option payloads must be true or false"):
        reader.option("history", "true").option("payloads", "yes").load(file_env.url).collect()


def _history_stream(
    spark: SparkSession, env: StoreEnv, checkpoint: Path, out: Path, **options: str
) -> Any:
    """The history as a stream into Parquet, one availableNow run: the stopped query."""
    reader = with_store(spark.readStream.format("s3q").option("history", "true"), env)
    for name, value in options.items():
        reader = reader.option(name, value)
    query = (
        reader.load(env.url)
        .writeStream.format("parquet")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(out))
    )
    with contextlib.suppress(Exception):  # a failed query raises here: its exception() tells
        assert query.awaitTermination(180), "the availableNow query did not stop on its own"
    return query


def _events_once(spark: SparkSession, out: Path) -> list[tuple[int, int, str, str]]:
    """The events a stream landed, each checked to be there once."""
    landed = [(r.seq, r.op, r.id, r.kind) for r in spark.read.parquet(str(out)).collect()]
    twice = {e for e in landed if landed.count(e) > 1}
    assert not twice, f"landed more than once: {sorted(twice)[:5]}"
    return sorted(landed)


def test_history_stream_lands_each_event_once_across_runs(
    spark: SparkSession, file_env: StoreEnv, tmp_path: Path
) -> None:
    """readStream over the history into Parquet with availableNow, in batches of a few log
    objects; more work; the same checkpoint again: every event of the log exactly once, and
    the offsets are log positions."""
    clock, _ = _history_of_work(file_env)
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "events"
    options = {"maxObjectsPerBatch": "7", "objectsPerPartition": "3"}
    query = _history_stream(spark, file_env, checkpoint, out, **options)
    assert query.exception() is None
    assert len(query.recentProgress) >= 5, "batches of 7 of the 40 log objects or more"
    first = _events_once(spark, out)
    with file_env.open(clock=clock, history_retention=1e6) as q:
        for _ in range(3):
            q.enqueue_batch([{"payload": b"late", "tenant": "c"}] * 5)
            q.complete_batch(q.dequeue(max_messages=5))
    query = _history_stream(spark, file_env, checkpoint, out, **options)
    assert query.exception() is None
    landed = _events_once(spark, out)
    every = with_store(spark.read.format("s3q").option("history", "true"), file_env)
    expected = sorted((r.seq, r.op, r.id, r.kind) for r in every.load(file_env.url).collect())
    assert landed == expected and len(landed) > len(first) + 30
    batches = [int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()]
    last = json.loads((checkpoint / "offsets" / str(max(batches))).read_text().splitlines()[-1])
    assert last == {"seq": max(file_env.log_seqs()) + 1}


def test_history_stream_tails_every_partition_with_an_offset_each(
    spark: SparkSession, file_env: StoreEnv, tmp_path: Path
) -> None:
    """A queue of three partitions: the stream's offsets hold a log position per partition,
    and every event of every partition lands once, across two runs."""
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "events"
    with file_env.open(partitions=3) as q:
        for k in range(9):
            q.enqueue(b"m%d" % k)
    options = {"maxObjectsPerBatch": "2"}
    assert _history_stream(spark, file_env, checkpoint, out, **options).exception() is None
    with file_env.open() as q:
        q.complete_batch(q.dequeue(9))
    assert _history_stream(spark, file_env, checkpoint, out, **options).exception() is None
    landed = [
        (r.partition, r.seq, r.op, r.id, r.kind) for r in spark.read.parquet(str(out)).collect()
    ]
    assert len(landed) == len(set(landed)), "an event landed twice"
    every = with_store(spark.read.format("s3q").option("history", "true"), file_env)
    expected = [
        (r.partition, r.seq, r.op, r.id, r.kind) for r in every.load(file_env.url).collect()
    ]
    assert sorted(landed) == sorted(expected)
    assert {p for p, *_ in landed} == {0, 1, 2}
    batches = [int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()]
    last = json.loads((checkpoint / "offsets" / str(max(batches))).read_text().splitlines()[-1])
    ends = [max(file_env.log_seqs()) + 1] + [
        1 + max(partitions_log_seqs(file_env, i)) for i in (1, 2)
    ]
    assert last == {"seq": ends[0], "partitions": ends[1:]}


def partitions_log_seqs(env: StoreEnv, index: int) -> list[int]:
    """The log objects of partition ``index`` of ``env``'s queue."""
    prefix = f"partitions/{index}/log/"
    return [int(k[len(prefix) :]) for k in list(env.keys()) if k.startswith(prefix)]


def test_history_stream_names_a_gap_the_collector_made(
    spark: SparkSession, file_env: StoreEnv, tmp_path: Path
) -> None:
    """Without history_retention the collector deletes log objects a stream has not read yet:
    the next run fails naming them; with failOnDataLoss false it goes on past them."""
    clock = FakeClock()
    settings = {"clock": clock, "gc_grace": 0.0, "completed_retention": 0.0}

    def work(q: Any) -> None:
        for _ in range(6):
            q.enqueue_batch([b"m"] * 4)
            q.complete_batch(q.dequeue(max_messages=4))

    with file_env.open(**settings) as q:
        work(q)
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "events"
    assert _history_stream(spark, file_env, checkpoint, out).exception() is None
    read_to = max(file_env.log_seqs()) + 1
    with file_env.open(**settings) as q:
        work(q)
        clock.advance(10)
        assert q.compact().deleted_objects > 0
        kept = q.enqueue_batch([b"kept"] * 3)
    left = file_env.log_seqs()
    assert read_to not in left and max(left) > read_to, (read_to, left)
    failed = _history_stream(spark, file_env, checkpoint, out).exception()
    assert failed is not None, "a stream past collected log objects went on silently"
    assert f"log objects {read_to} to " in str(failed), str(failed)[-2000:]
    assert "were collected before this read reached them" in str(failed)
    assert "failOnDataLoss" in str(failed)
    query = _history_stream(spark, file_env, checkpoint, out, failOnDataLoss="false")
    assert query.exception() is None
    landed = _events_once(spark, out)
    assert {mid for _, _, mid, kind in landed if kind == "enqueued"} >= set(kept)


def test_a_history_read_over_collected_log_objects_names_them(
    spark: SparkSession, file_env: StoreEnv
) -> None:
    """Without history_retention the collector deletes log objects between those it keeps
    (an enqueue kept for a payload still pending, the leases after it gone): a batch read of
    the history across them fails naming them, rather than tell wrong lives in silence; a read
    of the window after them, or with failOnDataLoss false, reads what is left."""
    clock = FakeClock()
    with file_env.open(clock=clock, gc_grace=0.0, completed_retention=0.0) as q:
        q.enqueue_batch([b"stays"] * 2)  # pending: this log object is kept for its payloads
        for _ in range(6):  # (higher priority: these go first, "stays" stays)
            q.enqueue_batch([{"payload": b"m", "priority": 5}] * 4)
            q.complete_batch(q.dequeue(max_messages=4, wait=0))
        clock.advance(10)
        assert q.compact().deleted_objects > 0
        q.enqueue(b"after")
    left = file_env.log_seqs()
    assert left != list(range(left[0], left[-1] + 1)), left  # a hole between kept objects

    def history(**options: str) -> Any:
        reader = spark.read.format("s3q").option("history", "true")
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load(file_env.url)

    with pytest.raises(Exception) as failed:
        history().collect()
    assert "were collected before this read reached them" in str(failed.value)
    assert "failOnDataLoss" in str(failed.value)
    rows = history(failOnDataLoss="false", payloads="true").collect()
    assert {r["payload"] for r in rows if r["kind"] == "enqueued"} >= {b"stays", b"after"}


def test_every_delivery_in_a_history_read_has_the_queue_s_attempt(
    spark: SparkSession, file_env: StoreEnv
) -> None:
    """With the default options (tasks of 64 log objects), every delivery, failure and death
    of a queue whose messages' lives cross many tasks carries ``Message.attempts`` at that
    delivery: none is null, ``retried`` is every redelivery, whichever task read it."""
    rng = random.Random(50)
    plan = [[rng.choice(ACTIONS) for _ in range(7)] for _ in range(12)]
    clock = FakeClock()
    with file_env.open(clock=clock, **SETTINGS) as q:
        expected = deliveries(q, clock, plan, 50)
    seqs = file_env.log_seqs()
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) > 3 * 64, len(seqs)
    events = with_store(spark.read.format("s3q").option("history", "true"), file_env)
    read = events.load(file_env.url)
    assert read.rdd.getNumPartitions() == -(-len(seqs) // 64)
    rows = read.where(F.col("kind").isin(*ATTEMPTED)).select("seq", "op", "kind", "id", "attempt")
    got = attempts_read([r.asDict() for r in rows.collect()])
    assert got == expected
    assert sum(kind == "retried" for seen in got.values() for kind, _ in seen) > 100


def test_history_stream_refuses_a_bad_start(
    spark: SparkSession, file_env: StoreEnv, tmp_path: Path
) -> None:
    _history_of_work(file_env)
    query = _history_stream(
        spark, file_env, tmp_path / "ck", tmp_path / "out", startingOffsets="yesterday"
    )
    assert "option startingOffsets must be 'earliest' or a log position" in str(query.exception())


def test_the_queue_history_example_draws_its_chart(tmp_path: Path) -> None:
    """examples/queue_history.py at a tiny size: a queue with tenants and failures, its
    history read in Spark, a valid PNG."""
    out = tmp_path / "history.png"
    done = subprocess.run(
        [
            sys.executable,
            str(SUPPORT_DIR.parent.parent / "examples" / "queue_history.py"),
            (tmp_path / "store").as_uri() + "/orders",
            "--minutes",
            "8",
            "--out",
            str(out),
        ],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "failed" in done.stdout and "payment gateway timeout" in done.stdout, done.stdout
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) > 20_000
    assert data[-8:-4] == b"IEND"
