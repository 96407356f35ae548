"""The ``s3q`` command line, run for real as a subprocess against a store in a temporary dir.

Every command is exercised with its ``--json`` output parsed, and every kind of error must end
with a one-line message, the documented exit code (1: s3q/runtime error, 2: usage error) and no
traceback.
"""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cli_runner import cli, data, failed, ok
from conftest import child_env, free_port

import s3q
from s3q.log import ids


def start_cli(store: str, *args: str) -> subprocess.Popen[str]:
    """``python -m s3q.cli ARGS`` running on ``store``; a crash at exit says what crashed.

    The child hears Ctrl-C (SIGINT) as a terminal's foreground process does, even when the
    suite itself runs in the background of a shell, which starts it with SIGINT ignored."""
    env = {**child_env(), "S3Q_STORE": store, "PYTHONFAULTHANDLER": "1", "LIBC_FATAL_STDERR_": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "s3q.cli", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def counts(tmp_path: Path, name: str = "q") -> dict[str, Any]:
    return dict(data(cli(tmp_path, "stats", name, "--json")))


# --------------------------------------------------------------------------- enqueue


def test_enqueue_one_message_with_options_and_read_it_back(tmp_path: Path) -> None:
    low = ok(cli(tmp_path, "enqueue", "q", "low")).strip()
    high = ok(
        cli(
            tmp_path,
            "enqueue",
            "q",
            "high [bold]",
            "--priority",
            "9",
            "--group",
            "g",
            "-a",
            "k=v",
            "-a",
            "x=",
        )
    ).strip()
    later = data(cli(tmp_path, "enqueue", "q", "later", "--delay", "600", "--json"))
    assert later["enqueued"] == 1 and len(later["ids"]) == 1
    assert later["queue"] == str(tmp_path / "store" / "q")
    assert len(low) == ids.LENGTH and low != high

    peeked = data(cli(tmp_path, "peek", "q", "--json"))["messages"]
    assert [m["id"] for m in peeked] == [high, low]  # priority first; the delayed one waits
    assert peeked[0]["payload"] == "high [bold]"
    assert peeked[0]["priority"] == 9 and peeked[0]["group"] == "g"
    assert peeked[0]["attributes"] == {"k": "v", "x": ""}
    assert data(cli(tmp_path, "status", "q", later["ids"][0], "--json"))["status"] == "delayed"
    table = ok(cli(tmp_path, "peek", "q"))
    assert "high [bold]" in table and low in table  # user text is not taken as markup


def test_enqueue_dedup_id_returns_the_first_id(tmp_path: Path) -> None:
    first = ok(cli(tmp_path, "enqueue", "q", "a", "--dedup-id", "d1")).strip()
    again = ok(cli(tmp_path, "enqueue", "q", "b", "--dedup-id", "d1")).strip()
    assert first == again
    assert counts(tmp_path)["pending"] == 1


def test_enqueue_stdin_each_line_a_message(tmp_path: Path) -> None:
    done = cli(tmp_path, "enqueue", "q", "--stdin", "--json", input="one\ntwo\r\n\nthree\n")
    assert data(done)["enqueued"] == 4  # the empty line is a message too
    quiet = cli(tmp_path, "enqueue", "q", "--stdin", "-q", "--priority", "3", input="x\ny\n")
    assert ok(quiet).strip() == "2"
    payloads = [m["payload"] for m in data(cli(tmp_path, "peek", "q", "--json"))["messages"]]
    assert payloads == ["x", "y", "one", "two", "", "three"]


def test_enqueue_file_in_batches_with_every_field(tmp_path: Path) -> None:
    lines = [json.dumps({"payload": f"m{i}"}) for i in range(2500)]
    lines[0] = json.dumps(
        {
            "payload_base64": base64.b64encode(b"\xff\x00bin").decode(),
            "priority": 7,
            "attributes": {"a": "b"},
            "dedup_id": "only-once",
        }
    )
    lines[1] = json.dumps({"payload": "grouped", "group": "g", "delay": 0, "priority": 7})
    lines.insert(2, "   ")  # blank lines are skipped
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert ok(cli(tmp_path, "enqueue", "q", "--file", str(path), "--quiet")).strip() == "2500"
    assert counts(tmp_path)["pending"] == 2500

    got = data(cli(tmp_path, "dequeue", "q", "-n", "2", "--json"))["messages"]
    binary, grouped = got
    assert binary["payload_encoding"] == "base64"
    assert base64.b64decode(binary["payload"]) == b"\xff\x00bin"
    assert binary["attributes"] == {"a": "b"} and binary["dedup_id"] == "only-once"
    assert grouped["payload"] == "grouped" and grouped["group"] == "g"
    assert grouped["payload_encoding"] == "utf-8"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('{"payload": "x"', "not valid JSON"),
        ('["x"]', "expected a JSON object"),
        ('{"payload": 5}', '"payload" must be a string'),
        ('{"priority": 1}', '"payload"'),
        ('{"payload": "x", "priority": 300}', "priority"),
        ('{"payload": "x", "delay": -1}', "delay"),
        ('{"payload": "x", "colour": "red"}', "unknown key(s) colour"),
        ('{"payload": "x", "attributes": {"a": 1}}', "attributes"),
        ('{"payload_base64": "***"}', "base64"),
    ],
)
def test_enqueue_file_bad_line_names_it_and_enqueues_nothing(
    tmp_path: Path, line: str, reason: str
) -> None:
    ok(cli(tmp_path, "enqueue", "q", "before"))
    good = [json.dumps({"payload": f"m{i}"}) for i in range(1500)]  # more than one batch
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([*good, line, *good]) + "\n")
    done = cli(tmp_path, "enqueue", "q", "--file", str(path))
    failed(done, 1, "bad.jsonl line 1501", reason, "nothing was enqueued")
    assert counts(tmp_path)["total_enqueued"] == 1


def test_enqueue_unreadable_file_is_a_one_line_error(tmp_path: Path) -> None:
    failed(cli(tmp_path, "enqueue", "q", "--file", "missing.jsonl"), 1, "missing.jsonl")
    failed(cli(tmp_path, "enqueue", "q", "--file", str(tmp_path)), 1, "directory")
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"payload": "ok"}\n\xff\xfe\n')
    failed(cli(tmp_path, "enqueue", "q", "--file", str(path)), 1, "line 2")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ((), ("exactly one of PAYLOAD",)),
        (("x", "--stdin"), ("exactly one of PAYLOAD",)),
        (("--stdin", "--dedup-id", "d"), ("--dedup-id",)),
        (("x", "--priority", "256"), ("--priority",)),
        (("x", "--delay", "-1"), ("--delay",)),
        (("x", "-a", "novalue"), ("KEY=VALUE",)),
    ],
)
def test_enqueue_usage_errors_exit_2(tmp_path: Path, args: tuple[str, ...], words: Any) -> None:
    failed(cli(tmp_path, "enqueue", "q", *args), 2, *words)


# --------------------------------------------------------------------------- dequeue, peek


def test_dequeue_leases_and_ack_completes(tmp_path: Path) -> None:
    first, second = ok(cli(tmp_path, "enqueue", "q", "--stdin", input="a\nb\n")).split()

    human = cli(tmp_path, "dequeue", "q")
    out = ok(human)
    assert first in out and "receipt" in out and "a" in out
    assert "delivered again" in human.stderr
    assert data(cli(tmp_path, "status", "q", first, "--json"))["status"] == "processing"

    acked = data(cli(tmp_path, "dequeue", "q", "-n", "5", "--ack", "--json"))
    assert acked["acked"] is True
    [msg] = acked["messages"]
    assert msg["id"] == second and msg["payload"] == "b" and msg["attempts"] == 1
    assert msg["receipt"].startswith(second)
    assert ok(cli(tmp_path, "status", "q", second)).strip() == "completed"

    empty = cli(tmp_path, "dequeue", "q", "--json")
    assert data(empty) == {"queue": str(tmp_path / "store" / "q"), "messages": [], "acked": False}
    assert ok(cli(tmp_path, "dequeue", "q")) == ""


def test_dequeue_visibility_timeout_and_wait_redeliver(tmp_path: Path) -> None:
    mid = ok(cli(tmp_path, "enqueue", "q", "job")).strip()
    got = data(cli(tmp_path, "dequeue", "q", "--visibility-timeout", "0.5", "--json"))
    assert got["messages"][0]["attempts"] == 1
    again = data(cli(tmp_path, "dequeue", "q", "--wait", "20", "--ack", "--json"))  # lease lapses
    assert [(m["id"], m["attempts"]) for m in again["messages"]] == [(mid, 2)]
    failed(cli(tmp_path, "dequeue", "q", "--visibility-timeout", "0"), 2, "visibility-timeout")


def test_peek_does_not_lease(tmp_path: Path) -> None:
    ids = ok(cli(tmp_path, "enqueue", "q", "--stdin", input="1\n2\n3\n")).split()
    first = data(cli(tmp_path, "peek", "q", "-n", "2", "--json"))["messages"]
    assert [m["id"] for m in first] == ids[:2]
    assert all(m["receipt"] is None and m["attempts"] == 0 for m in first)
    assert data(cli(tmp_path, "peek", "q", "-n", "2", "--json"))["messages"] == first
    assert counts(tmp_path)["pending"] == 3


# --------------------------------------------------------------------------- stats, status


def test_stats_table_json_and_watch(tmp_path: Path) -> None:
    ok(cli(tmp_path, "enqueue", "q", "--stdin", input="a\nb\n"))
    figures = counts(tmp_path)
    assert figures["pending"] == 2 and figures["total_enqueued"] == 2
    assert set(figures) >= {"queue", "delayed", "processing", "retry", "completed", "dead"}
    table = ok(cli(tmp_path, "stats", "q"))
    assert "pending" in table and "dead" in table
    failed(cli(tmp_path, "stats", "q", "--watch", "--json"), 2, "--watch")

    proc = start_cli(str(tmp_path / "store"), "stats", "q", "--watch", "0.5")
    try:
        assert proc.stdout is not None
        seen = 0
        while seen < 2:  # two refreshes: the queue is reopened each time
            line = proc.stdout.readline()
            assert line, proc.stderr.read() if proc.stderr else ""
            seen += "Ctrl-C stops" in line
        # the queue is free for others between refreshes (a try may meet a refresh)
        tries = [cli(tmp_path, "enqueue", "q", "c")]
        while tries[-1].returncode != 0 and len(tries) < 10:
            assert "QueueLocked" in tries[-1].stderr, tries[-1].stderr
            tries.append(cli(tmp_path, "enqueue", "q", "c"))
        ok(tries[-1])
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_status_unknown_id_and_missing_queue(tmp_path: Path) -> None:
    ok(cli(tmp_path, "enqueue", "q", "a"))
    failed(cli(tmp_path, "status", "q", "nosuchid"), 1, "MessageNotFound", "nosuchid")
    failed(cli(tmp_path, "status", "q", "nosuchid", "--json"), 1, "MessageNotFound")
    for command in (("stats",), ("peek",), ("dequeue",), ("dlq", "list"), ("purge", "--yes")):
        failed(cli(tmp_path, *command, "nosuch"), 1, "no queue at", "nosuch")
    assert not (tmp_path / "store" / "nosuch").exists()  # a typo creates nothing


# --------------------------------------------------------------------------- dead letters


def test_dlq_list_and_redrive(tmp_path: Path) -> None:
    ids = ok(cli(tmp_path, "enqueue", "q", "--stdin", input="d1\nd2\nd3\n")).split()
    for _ in range(3):  # three deliveries whose leases lapse: out of attempts (default 3)
        ok(cli(tmp_path, "dequeue", "q", "-n", "10", "--visibility-timeout", "0.05"))
        time.sleep(0.1)
    listed = data(cli(tmp_path, "dlq", "list", "q", "--json"))["messages"]
    assert [m["id"] for m in listed] == ids
    assert all(m["attempts"] == 3 and "lease expired" in m["last_error"] for m in listed)
    assert len(data(cli(tmp_path, "dlq", "list", "q", "-n", "1", "--json"))["messages"]) == 1
    table = ok(cli(tmp_path, "dlq", "list", "q"))
    assert "lease expired" in table and ids[0] in table

    assert data(cli(tmp_path, "dlq", "redrive", "q", ids[0], "--json"))["redriven"] == 1
    assert ok(cli(tmp_path, "status", "q", ids[0])).strip() == "pending"
    failed(cli(tmp_path, "dlq", "redrive", "q", ids[0]), 1, "MessageNotFound")
    assert ok(cli(tmp_path, "dlq", "redrive", "q")).strip() == "redrove 2 message(s)"
    assert data(cli(tmp_path, "dlq", "list", "q", "--json"))["messages"] == []
    figures = counts(tmp_path)
    assert figures["pending"] == 3 and figures["dead"] == 0


# --------------------------------------------------------------------------- create


def saved_settings(tmp_path: Path, name: str = "q") -> dict[str, Any]:
    """The settings in force of queue ``name`` of the test's store, read through the API."""
    with s3q.open(str(tmp_path / "store" / name)) as q:
        return dict(q.configure())


def test_create_partitioned_queue_with_settings(tmp_path: Path) -> None:
    made = data(
        cli(tmp_path, "create", "q", "--partitions", "3", "--set", "max_attempts=5", "--json")
    )
    assert made == {
        "queue": str(tmp_path / "store" / "q"),
        "created": True,
        "partitions": 3,
        "settings": {"max_attempts": 5, "partitions": 3},
    }
    figures = counts(tmp_path)
    assert len(figures["partitions"]) == 3 and figures["total_enqueued"] == 0
    assert saved_settings(tmp_path)["max_attempts"] == 5
    text = ok(cli(tmp_path, "create", "plain", "--set", "delivery=fair"))
    assert text.strip() == (
        f"created queue {tmp_path / 'store' / 'plain'}: partitions 1, delivery fair"
    )


def test_create_again_with_the_same_settings_says_it_existed(tmp_path: Path) -> None:
    args = ("create", "q", "--partitions", "3", "--set", "visibility_timeout=60")
    assert data(cli(tmp_path, *args, "--json"))["created"] is True
    again = data(cli(tmp_path, *args, "--json"))
    assert again["created"] is False and again["partitions"] == 3
    assert again["settings"] == {"visibility_timeout": 60, "partitions": 3}
    assert ok(cli(tmp_path, *args)).startswith("queue existed ")
    assert len(counts(tmp_path)["partitions"]) == 3


def test_create_refuses_other_partitions_once_a_message_was_enqueued(tmp_path: Path) -> None:
    ok(cli(tmp_path, "create", "q", "--set", "max_attempts=4"))
    ok(cli(tmp_path, "enqueue", "q", "x"))
    error = failed(
        cli(tmp_path, "create", "q", "--partitions", "2", "--set", "max_attempts=9"),
        1,
        "InvalidConfig",
        "has partitions=1, not 2",
        "never changed after",
    )
    assert "Traceback" not in error
    figures = counts(tmp_path)
    assert figures["partitions"] == [] and figures["pending"] == 1
    settings = saved_settings(tmp_path)
    assert settings["partitions"] == 1 and settings["max_attempts"] == 4  # nothing changed


def test_create_refuses_a_bad_setting(tmp_path: Path) -> None:
    failed(
        cli(tmp_path, "create", "q", "--set", "max_attempts=many"),
        1,
        "InvalidConfig: max_attempts must be an integer",
        "'many'",
    )
    failed(cli(tmp_path, "create", "q", "--set", "lease_ttl=5"), 1, "not a setting saved")
    failed(cli(tmp_path, "create", "q", "--partitions", "65"), 1, "partitions must be")
    assert not (tmp_path / "store" / "q").exists()  # nothing was created


# --------------------------------------------------------------------------- purge


def test_purge_needs_yes_without_a_terminal(tmp_path: Path) -> None:
    ok(cli(tmp_path, "enqueue", "q", "--stdin", input="a\nb\n"))
    failed(cli(tmp_path, "purge", "q"), 2, "--yes")
    assert counts(tmp_path)["pending"] == 2
    assert data(cli(tmp_path, "purge", "q", "--yes", "--json"))["purged"] == 2
    assert counts(tmp_path)["pending"] == 0
    assert ok(cli(tmp_path, "purge", "q", "-y")).strip() == "purged 0 message(s)"


# --------------------------------------------------------------------------- addressing, errors


def test_full_queue_url_and_store_option(tmp_path: Path) -> None:
    url = (tmp_path / "elsewhere" / "jobs").as_uri()
    mid = ok(cli(tmp_path, "enqueue", url, "x")).strip()
    assert ok(cli(tmp_path, "status", url, mid)).strip() == "pending"
    other = str(tmp_path / "other-store")
    ok(cli(tmp_path, "enqueue", "--store", other, "nested/jobs", "y"))
    assert (tmp_path / "other-store" / "nested" / "jobs").is_dir()
    assert data(cli(tmp_path, "stats", "nested/jobs", "--store", other, "--json"))["pending"] == 1
    for bad in ("../up", "/abs", "a//b", "a/"):
        failed(cli(tmp_path, "stats", bad), 2, "not a queue name")


def test_locked_queue_is_a_one_line_error(tmp_path: Path) -> None:
    ok(cli(tmp_path, "enqueue", "q", "a"))
    hold = (
        "import sys, s3q; q = s3q.open(sys.argv[1]); print('ready', flush=True); "
        "sys.stdin.read(); q.close()"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(tmp_path / "store" / "q")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        failed(cli(tmp_path, "stats", "q"), 1, "QueueLocked")
        failed(cli(tmp_path, "enqueue", "q", "b", "--json"), 1, "QueueLocked")
    finally:
        holder.communicate(timeout=30)
    assert holder.returncode == 0
    assert counts(tmp_path)["total_enqueued"] == 1


def test_unreachable_store_is_a_one_line_store_error(tmp_path: Path) -> None:
    options = (
        f"?endpoint_url=http://127.0.0.1:{free_port()}&allow_http=true"
        "&access_key_id=x&secret_access_key=y&region=us-east-1"
    )
    started = time.monotonic()
    # a refused connection is transient: tried again for the store's patience, then said
    failed(cli(tmp_path, "stats", "s3://bucket/q" + options, "--json"), 1, "TransientError")
    failed(
        cli(tmp_path, "enqueue", "--store", "s3://bucket/prefix" + options, "q", "x"),
        1,
        "TransientError",
        "s3://bucket/prefix/q",  # the queue name goes into the path, before the query
    )
    assert time.monotonic() - started < 60


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize(
    "command",
    [("stats", "q", "--watch", "0.5"), ("dequeue", "q", "--wait", "20", "--json")],
    ids=["stats-watch", "dequeue-wait"],
)
def test_a_signal_stops_a_long_running_command_and_frees_its_queue(
    tmp_path: Path, moto_server: Any, s3_bucket: str, sig: signal.Signals, command: tuple[str, ...]
) -> None:
    """On S3, where a lease not given back blocks the next writer for its ttl: Ctrl-C or SIGTERM
    ends the command at once, without a traceback, and its queue opens at once afterwards."""
    prefix = f"sig-{tmp_path.name}"
    store = (
        f"s3://{s3_bucket}/{prefix}?endpoint_url={moto_server.endpoint}&allow_http=true"
        "&access_key_id=testing&secret_access_key=testing&region=us-east-1"
    )
    ok(cli(tmp_path, "enqueue", "--store", store, "q", "later", "--delay", "600"))
    proc = start_cli(store, *command)
    try:
        # the command holds the queue: its lease object names its pid
        s3, key = moto_server.client(), f"{prefix}/q/writer.lease"
        deadline = time.monotonic() + 60
        while (
            f"pid {proc.pid} ".encode()
            not in s3.get_object(Bucket=s3_bucket, Key=key)["Body"].read()
        ):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)  # polling another process's store writes: no event to await
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in err, err
    assert proc.returncode in (0, 1), err  # the watch ends as asked; a dequeue is "Aborted!"
    # the lease was given back: another writer opens the queue at once, and nothing was leased
    ok(cli(tmp_path, "enqueue", "--store", store, "q", "next"))
    figures = data(cli(tmp_path, "stats", "--store", store, "q", "--json"))
    assert (figures["delayed"], figures["pending"], figures["processing"]) == (1, 1, 0)


def test_help_and_demo_still_work(tmp_path: Path) -> None:
    out = ok(cli(tmp_path, "--help"))
    for command in ("enqueue", "dequeue", "peek", "stats", "status", "dlq", "purge", "demo"):
        assert command in out
    assert "redrive" in ok(cli(tmp_path, "dlq", "--help"))
    demo = ok(cli(tmp_path, "demo", "--messages", "300", "--store", str(tmp_path / "d")))
    assert "processed" in demo and "dead letters" in demo


def test_s3_store_in_option_and_credentials_not_printed(
    tmp_path: Path, moto_server: Any, s3_bucket: str
) -> None:
    options = moto_server.store_options()
    store = (
        f"s3://{s3_bucket}/cli-{tmp_path.name}?endpoint_url={options['endpoint_url']}"
        "&allow_http=true&access_key_id=testing&secret_access_key=hush&region=us-east-1"
    )
    sent = data(cli(tmp_path, "enqueue", "--store", store, "jobs", "over-s3", "--json"))
    assert sent["queue"] == f"s3://{s3_bucket}/cli-{tmp_path.name}/jobs"
    got = data(cli(tmp_path, "dequeue", "--store", store, "jobs", "--ack", "--json"))
    assert [m["payload"] for m in got["messages"]] == ["over-s3"]
    table = ok(cli(tmp_path, "stats", "--store", store, "jobs"))
    assert "hush" not in table and "completed" in table


# --------------------------------------------------------------------------- serve


def _serve_and_call(store: str, *args: str) -> str:
    """Start ``s3q serve`` with ``args``, make one request, stop it: what it logged (the access
    log goes to standard output, the rest to standard error)."""
    import httpx

    port = free_port()
    proc = start_cli(store, "serve", "--port", str(port), *args)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("dashboard:"):
                break
        else:
            raise AssertionError(f"the broker did not start: {proc.communicate()}")
        assert httpx.get(f"http://127.0.0.1:{port}/v1/queues").status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    return out + err


def test_serve_logs_a_line_per_request_only_when_asked(tmp_path: Path) -> None:
    """The access log (a line per request, ~135 µs of broker CPU each) is off by default; at
    info the broker logs its life (and a summary of the requests each minute)."""
    store = f"file://{tmp_path}/s"
    default = _serve_and_call(store)
    assert "GET /v1/queues" not in default and "INFO" in default, default
    assert '"GET /v1/queues HTTP/1.1" 200' in _serve_and_call(store, "--access-log")
    quiet = _serve_and_call(store, "--log-level", "warning", "--access-log")
    assert "GET /v1/queues" not in quiet and "INFO" not in quiet, quiet


def test_serve_refuses_an_unknown_log_level(tmp_path: Path) -> None:
    error = failed(cli(tmp_path, "serve", "--log-level", "loud"), 2)
    assert "'loud' is not one of" in error, error


def test_serve_takes_a_lease_ttl(tmp_path: Path, moto_server: Any, s3_bucket: str) -> None:
    """``--lease-ttl``: on an object store the broker's lease, which the leases of the queues
    it leads ride on, runs that long past its last renewal (10 s without it)."""
    from s3q.client import Client

    prefix = f"ttl-{tmp_path.name}"
    store = (
        f"s3://{s3_bucket}/{prefix}?endpoint_url={moto_server.endpoint}&allow_http=true"
        "&access_key_id=testing&secret_access_key=testing&region=us-east-1"
    )
    port = free_port()
    proc = start_cli(store, "serve", "--port", str(port), "--lease-ttl", "45")
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("dashboard:"):
                break
        else:
            raise AssertionError(f"the broker did not start: {proc.communicate()}")
        with Client(f"http://127.0.0.1:{port}") as client:
            client.queue("q").enqueue(b"x")
        s3 = moto_server.client()
        listed = s3.list_objects_v2(Bucket=s3_bucket, Prefix=f"{prefix}/.brokers/")
        [key] = [o["Key"] for o in listed.get("Contents", [])]
        lease = json.loads(s3.get_object(Bucket=s3_bucket, Key=key)["Body"].read())
        assert 45 / 2 < lease["expires_at"] - time.time() <= 45, lease
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def test_serve_refuses_a_bad_lease_ttl(tmp_path: Path) -> None:
    for bad in ("0", "-3", "nan", "inf", "soon"):
        error = failed(cli(tmp_path, "serve", "--lease-ttl", bad), 2)
        assert "--lease-ttl" in error and "a number of seconds > 0" in error, error
