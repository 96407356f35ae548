"""Principals on a running broker: the file read again when it changes and on SIGHUP (a bad
one refused, the grants before kept), open channels kept across a reload, the audit trail,
the command line's refusal of a bad file, and no secret in anything the broker writes or
answers (its log, error bodies, /metrics, the audit trail)."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from broker_harness import Broker, free_port
from click.testing import CliRunner
from grants import native, principal, sqs, subscribe

from s3q.broker import create_app
from s3q.broker.principals import InvalidPrincipals
from s3q.cli import main
from s3q.wire import subscriptions as frames

ALICE = "alice-secret-token-4242"
BOB = "bob-secret-token-4343"
CLUSTER = "cluster-secret-token-4444"
KEY, SECRET = "AKIDALICE", "alice-sqs-secret-4545"
OLD_KEY, OLD_SECRET = "AKIDOLD", "old-sqs-secret-4646"
SECRETS = (ALICE, BOB, CLUSTER, SECRET, OLD_SECRET)


def _file(path: Path, alice_queues: str, bob: str = "admin") -> None:
    path.write_text(
        principal(
            "alice",
            [{"allow": ["send", "receive"], "queues": alice_queues}],
            (ALICE,),
            {KEY: SECRET},
        )
        + principal("bob", [{"allow": bob, "queues": "*"}], (BOB,))
    )


def _eventually(check: Callable[[], bool], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.05)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[Broker, Path]]:
    path = tmp_path / "principals.toml"
    _file(path, "aaa")
    audit = tmp_path / "audit.log"
    with Broker(
        f"file://{tmp_path}/store", {CLUSTER}, principals=str(path), audit_log=str(audit)
    ) as b:
        yield b, path


def test_a_changed_file_takes_effect_and_a_bad_one_keeps_the_grants_in_force(
    broker: tuple[Broker, Path], caplog: pytest.LogCaptureFixture
) -> None:
    b, path = broker
    assert native(b.url, ALICE, "aaa", "send").status_code == 200
    assert native(b.url, ALICE, "bbb", "send").status_code == 403
    with httpx.Client(headers={"authorization": f"Bearer {ALICE}"}) as kept:  # one connection
        assert kept.get(b.url + "/v1/queues").status_code == 200
        _file(path, "bbb")
        _eventually(lambda: native(b.url, ALICE, "bbb", "send").status_code == 200)
        assert native(b.url, ALICE, "aaa", "send").status_code == 403
        assert kept.get(b.url + "/v1/queues").status_code == 200  # (not dropped)
    caplog.set_level(logging.ERROR, "s3q.broker")
    path.write_text(path.read_text() + "\n[principals.carol]\ntokens = [\n")
    _eventually(lambda: "principals not reloaded" in caplog.text)
    assert f"{path}:" in caplog.text and "not TOML" in caplog.text
    assert native(b.url, ALICE, "bbb", "send").status_code == 200  # the grants before
    assert native(b.url, ALICE, "aaa", "send").status_code == 403


def test_a_subscription_stays_open_across_a_reload_and_ends_when_its_grant_goes(
    broker: tuple[Broker, Path],
) -> None:
    from websockets.sync.client import connect

    b, path = broker
    assert native(b.url, CLUSTER, "aaa", "send").status_code == 200
    ws_url = b.url.replace("http://", "ws://") + "/v1/queues/aaa/subscribe"
    with connect(ws_url, additional_headers={"authorization": f"Bearer {ALICE}"}) as ws:
        ws.send(frames.encode(frames.Open(prefetch=10)))
        assert isinstance(frames.decode_server(ws.recv(timeout=10)), frames.Opened)
        pushed = frames.decode_server(ws.recv(timeout=10))
        assert isinstance(pushed, frames.Pushed)
        _file(path, "aaa", bob="read")  # a reload that keeps alice's grant
        _eventually(lambda: native(b.url, BOB, "x", "admin").status_code == 403)
        assert native(b.url, CLUSTER, "aaa", "send").status_code == 200
        assert isinstance(frames.decode_server(ws.recv(timeout=10)), frames.Pushed)  # still on
        _file(path, "zzz")  # alice may receive from aaa no more
        refused = frames.decode_server(ws.recv(timeout=10))
        assert isinstance(refused, frames.Refused) and refused.status == 403
        assert "may not receive queue aaa" in refused.error["message"]
    headers = {"authorization": f"Bearer {CLUSTER}"}
    _eventually(
        lambda: (
            "\ns3q_broker_subscriptions 0.0" in httpx.get(b.url + "/metrics", headers=headers).text
        )
    )
    stats = httpx.get(
        b.url + "/v1/queues/aaa/stats", headers={**headers, "accept": "application/json"}
    )
    assert stats.json()["processing"] == 0  # its leases given back


def test_the_audit_trail_has_refusals_and_admin_actions(broker: tuple[Broker, Path]) -> None:
    b, path = broker
    audit = path.parent / "audit.log"
    headers = {"content-type": "application/msgpack", "accept": "application/json"}
    assert native(b.url, CLUSTER, "aaa", "send").status_code == 200
    refused = httpx.post(
        b.url + "/v1/queues/aaa/purge", headers={**headers, "authorization": f"Bearer {ALICE}"}
    )
    allowed = httpx.post(
        b.url + "/v1/queues/aaa/purge", headers={**headers, "authorization": f"Bearer {BOB}"}
    )
    assert (refused.status_code, allowed.status_code) == (403, 200)
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    purges = [line for line in lines if line["operation"] == "purge"]
    assert [(p["principal"], p["outcome"], p["reason"]) for p in purges] == [
        ("alice", "refused", "not-granted"),
        ("bob", "ok", None),
    ]
    for entry in purges:
        assert entry["action"] == "admin" and entry["queue"] == "aaa"
        assert entry["credential"] == "bearer" and entry["source"] == "127.0.0.1"
        assert len(entry["request_id"]) == 16 and entry["time"].endswith("+00:00")
    assert not any(line["operation"] == "enqueue" for line in lines)  # allowed, not admin


def test_audit_all_writes_every_call(tmp_path: Path) -> None:
    path = tmp_path / "principals.toml"
    _file(path, "aaa")
    audit = tmp_path / "audit.log"
    store = f"file://{tmp_path}/store"
    with Broker(store, principals=str(path), audit_log=str(audit), audit_all=True) as b:
        assert native(b.url, ALICE, "aaa", "send").status_code == 200  # (the lean path)
        assert native(b.url, ALICE, "aaa", "receive").status_code == 200
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [(e["operation"], e["outcome"]) for e in lines] == [("enqueue", "ok"), ("dequeue", "ok")]


def test_no_secret_is_ever_written_or_answered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    path = tmp_path / "principals.toml"
    _file(path, "aaa")
    audit = tmp_path / "audit.log"
    ports = [free_port(), free_port()]
    peers = [f"http://127.0.0.1:{p}" for p in ports]
    store = f"file://{tmp_path}/store"
    options = {"tokens": {CLUSTER}, "sqs_keys": {OLD_KEY: OLD_SECRET}, "advertise": True}
    seen: list[str] = []
    with (
        Broker(
            store, principals=str(path), audit_log=str(audit), peers=peers, port=ports[0], **options
        ) as a,
        Broker(
            store, principals=str(path), audit_log=str(audit), peers=peers, port=ports[1], **options
        ) as b,
    ):
        for url in (a.url, b.url):  # a leads; b forwards
            for token in (ALICE, BOB, CLUSTER, ALICE[:-1], ALICE + "x", SECRET, None):
                for queue in ("aaa", "bbb"):
                    for action in ("send", "receive", "read", "admin"):
                        answer = native(url, token, queue, action)
                        seen.append(answer.text + str(answer.headers))
            for key, secret in (
                (KEY, SECRET),
                (OLD_KEY, OLD_SECRET),
                (KEY, ALICE),
                ("AKIDX", SECRET),
            ):
                for name, params in (
                    ("SendMessage", {"QueueUrl": f"{url}/000000000000/bbb", "MessageBody": "m"}),
                    ("ListQueues", {}),
                ):
                    for query in (False, True):
                        answer = sqs(url, key, secret, name, params, query=query)
                        seen.append(answer.text + str(answer.headers))
            for token in (ALICE, BOB[:-1]):
                seen.append(repr(subscribe(url, token, "bbb")))
            for token in (ALICE, BOB, CLUSTER, BOB + "x"):
                for doc in ("/metrics", "/dashboard/summary"):
                    answer = httpx.get(url + doc, headers={"authorization": f"Bearer {token}"})
                    seen.append(answer.text + str(answer.headers))
            metrics = httpx.get(url + "/metrics", headers={"authorization": f"Bearer {CLUSTER}"})
            assert (
                's3q_broker_refusals_total{principal="alice",reason="not-granted"}' in metrics.text
            )
            assert 'principal="",reason="bad-credential"' in metrics.text
        _file(path, "aaa")  # a reload, then a bad file holding secrets
        path.write_text(path.read_text().replace('"send"', f'"{SECRET}"'))
        _eventually(lambda: "principals not reloaded" in caplog.text)
    client_side = ("websockets.client", "httpx", "httpcore", "botocore", "urllib3")
    logged = [
        f"{r.name} {r.getMessage()} {r.exc_text or ''}"
        for r in caplog.records
        if not r.name.startswith(client_side)
    ]
    assert any(r.startswith("s3q.broker ") for r in logged)
    written = "\n".join([*seen, *logged, audit.read_text()])
    assert "AccessDenied" in written and "invalid bearer token" in written
    assert '"outcome":"refused"' in audit.read_text()
    for secret in SECRETS:
        assert secret not in written, secret


def test_serve_refuses_a_bad_file_before_it_starts(tmp_path: Path) -> None:
    path = tmp_path / "principals.toml"
    path.write_text('[principals.a]\ntokens = ["nope"]\n')
    with pytest.raises(InvalidPrincipals, match=r"principals.toml:2: principals.a.tokens: entry 1"):
        create_app(f"file://{tmp_path}/store", principals=path)


def test_the_command_line_refuses_a_bad_file_as_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "principals.toml"
    path.write_text(
        f'[principals.a]\nsqs_keys = [{{ id = "AK", secret = "{SECRET}" }}]\n'
        f'grants = [{{ allow = "{SECRET}", queues = "q" }}]\n'
    )
    store = f"file://{tmp_path}/store"
    for given, fault in (
        (str(path), "principals.toml:3: principals.a.grants: grant 1: action 1 is none of send"),
        (str(tmp_path / "none.toml"), "cannot be read"),
    ):
        result = CliRunner().invoke(
            main, ["serve", "--store", store, "--port", "0", "--principals", given]
        )
        assert result.exit_code == 2, result.output
        assert "Invalid value for '--principals'" in result.output and fault in result.output
        assert "Traceback" not in result.output and SECRET not in result.output


def test_sighup_reloads_the_file_and_the_command_line_writes_no_secret(tmp_path: Path) -> None:
    """``s3q serve`` in a child process: a change the watcher cannot see (same size, inode and
    time) takes effect on SIGHUP; its output (log and audit trail) holds no secret."""
    path = tmp_path / "principals.toml"
    _file(path, "aaa")
    (tmp_path / "tokens").write_text(CLUSTER + "\n")
    (tmp_path / "sqs").write_text(f"{OLD_KEY}:{OLD_SECRET}\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    out = (tmp_path / "out").open("wb")
    args = [
        "serve",
        "--store",
        f"file://{tmp_path}/store",
        "--port",
        str(port),
        "--log-level",
        "debug",
    ]
    args += [
        "--principals",
        str(path),
        "--token-file",
        str(tmp_path / "tokens"),
        "--sqs-credentials",
        str(tmp_path / "sqs"),
    ]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    child = subprocess.Popen(
        [sys.executable, "-m", "s3q.cli", *args], stdout=out, stderr=subprocess.STDOUT, env=env
    )
    try:
        _eventually(lambda: b"dashboard:" in (tmp_path / "out").read_bytes(), 30)
        assert native(url, ALICE, "aaa", "send").status_code == 200
        assert native(url, ALICE, "bbb", "send").status_code == 403
        assert native(url, ALICE + "x", "bbb", "send").status_code == 403
        stat = path.stat()
        with path.open("r+") as f:  # in place: the same inode and size
            text = f.read()
            f.seek(0)
            f.write(text.replace('"aaa"', '"bbb"'))
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        time.sleep(2.5)  # the watcher looked, and saw no change
        assert native(url, ALICE, "bbb", "send").status_code == 403
        child.send_signal(signal.SIGHUP)
        _eventually(lambda: native(url, ALICE, "bbb", "send").status_code == 200)
        path.write_text("[principals.alice]\ntokens = [1]\n")
        child.send_signal(signal.SIGHUP)
        _eventually(lambda: b"principals not reloaded" in (tmp_path / "out").read_bytes())
        assert native(url, ALICE, "bbb", "send").status_code == 200  # the grants before
        assert sqs(url, OLD_KEY, OLD_SECRET, "ListQueues", {}).status_code == 200
    finally:
        child.terminate()
        child.wait(20)
        out.close()
    written = (tmp_path / "out").read_text()
    assert f"{path}:2: principals.alice.tokens: entry 1" in written
    audit = [json.loads(line) for line in written.splitlines() if line.startswith("{")]
    assert {(e["principal"], e["outcome"]) for e in audit} >= {
        ("alice", "refused"),
        (None, "refused"),
    }
    for secret in SECRETS:
        assert secret not in written, secret
