"""`s3q bench` runs end to end on a tiny workload and reports every figure it promises.

(Speed itself is measured by running the benchmark, not by tests: see docs/benchmarks.md.)
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import child_env

PHASES = ("enqueue", "dequeue+complete", "mixed")
FIGURES = (
    "messages",
    "seconds",
    "msg_per_s",
    "mib_per_s",
    "puts_per_msg",
    "gets_per_msg",
    "dollars_per_million",
    "bytes_written_per_msg",
    "commits",
    "peak_rss_mib",
)


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "s3q.cli", "bench", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env(),
    )


def test_bench_json_reports_every_phase_and_figure(tmp_path: object) -> None:
    done = run_bench("--messages", "3000", "--size", "200", "--batch", "100", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["command"].startswith("s3q bench")
    assert [p["phase"] for p in report["phases"]] == list(PHASES)
    for phase in report["phases"]:
        assert phase["messages"] == 3000, phase
        assert set(FIGURES) <= set(phase), phase
        seconds = phase["seconds"]  # rounded to 0.1 ms; the rates come from the unrounded time
        assert seconds > 0, phase
        assert phase["msg_per_s"] == pytest.approx(3000 / seconds, rel=0.0001 / seconds + 0.001)
        assert phase["mib_per_s"] == pytest.approx(
            phase["msg_per_s"] * 200 / 2**20, rel=0.0001 / seconds + 0.001, abs=0.01
        )
        # every phase writes: its commits are log objects, each a PUT and bytes on the store
        assert phase["commits"] >= 1, phase
        assert round(phase["puts_per_msg"] * 3000) >= phase["commits"], phase  # 6 decimals
        assert phase["bytes_written_per_msg"] > 0, phase
        assert phase["gets_per_msg"] >= 0, phase  # reads may all come from the payload cache
        assert 10 < phase["peak_rss_mib"] < 4096, phase  # a Python process's, in MiB
        assert set(phase["latency_ms"]) == {"p50", "p95", "p99", "max"}
        assert 0 < phase["latency_ms"]["p50"] <= phase["latency_ms"]["max"]
    enqueue = report["phases"][0]
    assert enqueue["puts_per_msg"] <= 0.02, "batches of 100 must not cost a PUT per message"
    for phase in report["phases"]:  # S3's list prices, from the counted requests
        expected = (phase["puts_per_msg"] * 0.005 + phase["gets_per_msg"] * 0.0004) * 1000
        assert phase["dollars_per_million"] == pytest.approx(expected, abs=0.001)
    assert enqueue["bytes_written_per_msg"] >= 200
    storage = report["storage"]
    assert storage["reopen_seconds"] > 0
    assert 0 < storage["objects_after_one_gc"] <= 10, storage


def test_bench_table_names_every_column_and_the_command() -> None:
    done = run_bench("--messages", "500", "--batch", "1", "--producers", "50", "--consumers", "2")
    assert done.returncode == 0, done.stderr
    for word in (
        "msg/s",
        "MiB/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "max ms",
        "PUT/msg",
        "GET/msg",
        "$/M msgs (S3)",
        "peak RSS MiB",
        "reopen with 500 pending",
        "command: s3q bench",
        *PHASES,
    ):
        assert word in done.stdout, word


def test_bench_rejects_bad_options_without_a_traceback() -> None:
    done = run_bench("--messages", "0")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "--messages" in done.stderr


def test_bench_through_a_broker_it_starts_with_a_paced_phase() -> None:
    done = run_bench(
        "--server",
        "--messages",
        "600",
        "--size",
        "100",
        "--batch",
        "50",
        "--producers",
        "8",
        "--rate",
        "600",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["config"]["server"] == "start"
    phases = [p["phase"] for p in report["phases"]]
    assert phases == [*PHASES, "paced enqueue 600/s"]
    for phase in report["phases"]:
        assert phase["messages"] == 600, phase
        # the figures come from the broker's writer: its commits and requests, its memory
        assert phase["commits"] > 0 and phase["puts_per_msg"] > 0 and phase["peak_rss_mib"] > 0
    paced = report["phases"][-1]
    # 600 single enqueues on a 600/s schedule take about a second, not the time of a burst
    assert paced["seconds"] >= 0.9
    # at most a commit per enqueue; besides the commits' PUTs, a checkpoint every hundred log
    # objects and a lease renewal or two
    assert paced["commits"] <= paced["messages"]
    assert paced["puts_per_msg"] <= 1.05
    assert report["storage"] is None  # the broker keeps its queue open: no reopen figures


def test_bench_rejects_a_broker_url_with_a_store() -> None:
    done = run_bench("--server", "http://127.0.0.1:9", "--store", "file:///tmp/x")
    assert done.returncode == 2
    assert "not both" in done.stderr and "Traceback" not in done.stderr
