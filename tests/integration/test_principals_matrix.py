"""The hostile matrix of principals and grants: each kind of principal (a principals file's
bearer token and SQS key, and the older options' token and key, which have every grant) calls
each action class (send, receive, read, admin) on each route a call enters by (the native API's
generic stack and lean path, subscriptions, the SQS endpoint in JSON and in the query protocol,
the dashboard's API, the listing of queues, and calls forwarded through a second broker) on
queues inside and outside its grants. A call is allowed exactly when the grants say (a small
table written here, not the broker's evaluator), and every refused call leaves the store
byte for byte as it was.

Two brokers share one store: A leads every queue and holds the strict principals file; B,
whose file grants the same principal everything, answers through the generic stack only and
forwards to A. A call sent to B is therefore refused by A's grants or not at all: the leader
checks the original principal, not the broker that forwarded the call.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from broker_harness import Broker, free_port
from grants import ACTIONS, native, principal, snapshot, sqs, sqs_params, subscribe

from s3q.wire import subscriptions as frames

CLUSTER = "cluster-token-0123456789"
ALICE_TOKEN = "alice-token-abcdefghijk"
ALICE_KEY, ALICE_SECRET = "AKIDALICE", "alice-sqs-secret-xyz"
LEGACY_KEY, LEGACY_SECRET = "AKIDLEGACY", "legacy-sqs-secret-xyz"
QUEUES = ("in-1", "in-deny", "ops-1", "out-1")
STRICT = [
    {"allow": ["send", "receive", "read"], "queues": ["in-*"]},
    {"allow": "admin", "queues": "ops-*"},
    {"deny": "*", "queues": "in-deny*"},
]
LOOSE = [{"allow": "*", "queues": "*"}]


def granted(kind: str, queue: str, action: str) -> bool:
    """What the strict file grants alice, spelled out by hand; the older options' principals
    may do everything."""
    if kind == "legacy":
        return True
    if queue.startswith("in-deny"):
        return False
    if queue.startswith("in-"):
        return action in ("send", "receive", "read")
    return queue.startswith("ops-") and action == "admin"


class Cluster:
    def __init__(self, root: Path, a: Broker, b: Broker) -> None:
        self.root, self.a, self.b = root, a, b
        self.store = root / "store"

    def lean_taken(self) -> int:
        return int(self.a.server.config.loaded_app.app.state.lean.taken)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("matrix")
    keys = {ALICE_KEY: ALICE_SECRET}
    (root / "strict.toml").write_text(principal("alice", STRICT, (ALICE_TOKEN,), keys))
    (root / "loose.toml").write_text(principal("alice", LOOSE, (ALICE_TOKEN,), keys))
    ports = [free_port(), free_port()]
    peers = [f"http://127.0.0.1:{p}" for p in ports]
    common: dict[str, Any] = {
        "tokens": {CLUSTER},
        "sqs_keys": {LEGACY_KEY: LEGACY_SECRET},
        "advertise": True,
        "peers": peers,
        "checkpoint_interval": 3600.0,  # no checkpoint written behind a refused call's back
    }
    store = f"file://{root}/store"
    with (
        Broker(store, principals=str(root / "strict.toml"), port=ports[0], **common) as a,
        Broker(
            store, principals=str(root / "loose.toml"), port=ports[1], lean=False, **common
        ) as b,
    ):
        for queue in QUEUES:  # made by A, which leads them; known to the SQS endpoint
            made = sqs(a.url, LEGACY_KEY, LEGACY_SECRET, "CreateQueue", {"QueueName": queue})
            assert made.status_code == 200, made.text
            for _ in range(3):
                assert native(a.url, CLUSTER, queue, "send").status_code == 200
        yield Cluster(root, a, b)


BEARER_ROUTES = ("generic", "lean", "forwarded", "subscription", "dashboard", "listing")
SQS_ROUTES = ("sqs-json", "sqs-query", "sqs-forwarded")


def _cases() -> Iterator[tuple[str, str, str, str]]:
    for kind in ("file", "legacy"):
        for route in BEARER_ROUTES + SQS_ROUTES:
            if route == "subscription":
                actions: tuple[str, ...] = ("receive",)
            elif route in ("dashboard", "listing"):
                actions = ("read",)
            else:
                actions = ACTIONS
            for queue in QUEUES:
                for action in actions:
                    yield kind, route, queue, action


CASES = list(_cases())


def test_the_matrix_is_as_large_as_it_says() -> None:
    assert len(CASES) == 2 * 4 * (4 * 3 + 1 + 1 + 1 + 4 * 3)  # 216


def _refusal_names(text: str, queue: str, action: str, sqs_action: str | None) -> None:
    assert queue in text, text
    assert (sqs_action or action) in text, text


def _native(c: Cluster, route: str, token: str, queue: str, action: str) -> bool:
    url = c.b.url if route == "forwarded" else c.a.url
    before = c.lean_taken()
    answer = native(url, token, queue, action, chunked=route == "generic")
    if answer.status_code == 200:
        if route == "lean" and action != "read":  # (a GET is never the lean path's)
            assert c.lean_taken() == before + 1, "an allowed lean call went the generic way"
        return True
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"] == "AuthError"
    _refusal_names(answer.json()["message"], queue, action, None)
    return False


def _sqs(c: Cluster, route: str, kind: str, queue: str, action: str) -> bool:
    url = c.b.url if route == "sqs-forwarded" else c.a.url
    query = route == "sqs-query"
    key, secret = (ALICE_KEY, ALICE_SECRET) if kind == "file" else (LEGACY_KEY, LEGACY_SECRET)
    name, params = sqs_params(action, f"{url}/000000000000/{queue}", query)
    answer = sqs(url, key, secret, name, params, query=query)
    if answer.status_code == 200:
        return True
    assert answer.status_code == 403, answer.text
    assert "AccessDenied" in answer.text
    _refusal_names(answer.text, queue, action, name if route != "sqs-forwarded" else None)
    return False


def _subscription(c: Cluster, token: str, queue: str) -> bool:
    frame = subscribe(c.a.url, token, queue)
    if isinstance(frame, frames.Opened):
        _closed(c.a)  # its leases given back before the next case looks at the store
        return True
    assert isinstance(frame, frames.Refused), frame
    assert frame.status == 403 and frame.error["error"] == "AuthError"
    _refusal_names(frame.error["message"], queue, "receive", None)
    return False


def _closed(broker: Broker) -> None:
    headers = {"authorization": f"Bearer {CLUSTER}"}
    deadline = time.monotonic() + 10
    while (
        "\ns3q_broker_subscriptions 0.0"
        not in httpx.get(broker.url + "/metrics", headers=headers).text
    ):
        assert time.monotonic() < deadline, "a subscription stayed open"
        time.sleep(0.02)


def _listed(c: Cluster, route: str, token: str, queue: str) -> bool:
    headers = {"authorization": f"Bearer {token}"}
    if route == "dashboard":
        answer = httpx.get(c.a.url + "/dashboard/summary?history=1", headers=headers)
        assert answer.status_code == 200, answer.text
        names = [q["name"] for q in answer.json()["queues"]]
        assert set(answer.json()["history"]["queues"]) <= set(names)
        return queue in names
    answer = httpx.get(c.a.url + "/v1/queues", headers=headers)
    assert answer.status_code == 200, answer.text
    return queue in answer.json()["queues"]


@pytest.mark.parametrize(("kind", "route", "queue", "action"), CASES)
def test_a_call_is_allowed_exactly_when_granted_and_a_refused_one_changes_nothing(
    cluster: Cluster, kind: str, route: str, queue: str, action: str
) -> None:
    token = ALICE_TOKEN if kind == "file" else CLUSTER
    before = snapshot(cluster.store)
    if route in SQS_ROUTES:
        allowed = _sqs(cluster, route, kind, queue, action)
    elif route == "subscription":
        allowed = _subscription(cluster, token, queue)
    elif route in ("dashboard", "listing"):
        allowed = _listed(cluster, route, token, queue)
    else:
        allowed = _native(cluster, route, token, queue, action)
    assert allowed == granted(kind, queue, action), (kind, route, queue, action)
    if not allowed:
        assert snapshot(cluster.store) == before, "a refused call changed the store"
