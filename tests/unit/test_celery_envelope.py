"""s3q's kombu transport without I/O: kombu messages as s3q payloads and back (bodies of text
and of bytes, priorities, Celery's ``eta`` as a delay), kombu queue names as s3q's, and the
broker URLs and options a connection is given."""

from __future__ import annotations

import base64
import datetime
from typing import Any

import msgspec
import pytest

from s3q.celery.envelope import decoded, delay_of, outgoing, priority_of, queue_name
from s3q.celery.place import place_of
from s3q.errors import InvalidConfig

NOW = 1_700_000_000.0


def message(body: Any, priority: Any = None, **headers: Any) -> dict[str, Any]:
    """A message as kombu's virtual channel hands it to ``_put``."""
    return {
        "body": body,
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": headers,
        "properties": {
            "body_encoding": None,
            "delivery_tag": "a-publish-time-uuid",
            "delivery_info": {"exchange": "celery", "routing_key": "celery"},
            "priority": priority,
        },
    }


@pytest.mark.parametrize("body", ['{"args": [1, 2]}', b'{"args": [1, 2]}'])
def test_a_text_body_travels_as_text(body: str | bytes) -> None:
    out = outgoing(message(body))
    assert msgspec.json.decode(out.payload)["body"] == '{"args": [1, 2]}'  # readable as stored
    back = decoded(out.payload, "receipt-1", redelivered=False)
    assert back["body"] == '{"args": [1, 2]}'
    assert back["properties"]["body_encoding"] is None


def test_a_binary_body_travels_in_base64_and_comes_back_whole() -> None:
    raw = bytes(range(256))
    out = outgoing(message(raw))
    back = decoded(out.payload, "receipt-1", redelivered=True)
    assert back["properties"]["body_encoding"] == "base64"
    assert base64.b64decode(back["body"]) == raw


def test_the_delivery_tag_is_the_receipt_and_redelivery_is_said() -> None:
    out = outgoing(message("{}"))
    back = decoded(out.payload, "q.1.2~token", redelivered=True)
    assert back["properties"]["delivery_tag"] == "q.1.2~token"
    assert back["properties"]["delivery_info"] == {
        "exchange": "celery",
        "routing_key": "celery",
        "redelivered": True,
    }


@pytest.mark.parametrize(
    "payload",
    [b"not json", b"[1, 2]", b'{"body": "x"}', b'{"properties": 3}'],
)
def test_a_payload_that_is_not_a_kombu_message_is_refused(payload: bytes) -> None:
    with pytest.raises(ValueError, match="not a kombu message"):
        decoded(payload, "r", redelivered=False)


def test_a_base64_body_that_is_not_base64_is_refused() -> None:
    bad = message("!!! not base64 !!!")
    bad["properties"]["body_encoding"] = "base64"
    with pytest.raises(ValueError, match="base64"):
        decoded(msgspec.json.encode(bad), "r", redelivered=False)


@pytest.mark.parametrize(
    ("priority", "expected"),
    [(None, 0), (0, 0), (9, 9), (255, 255), (300, 255), (-3, 0), ("7", 7), ("high", 0)],
)
def test_priorities_are_s3qs_higher_first(priority: Any, expected: int) -> None:
    assert priority_of(message("{}", priority)) == expected
    assert outgoing(message("{}", priority)).priority == expected


def test_eta_is_a_delay_from_now() -> None:
    at = datetime.datetime.fromtimestamp(NOW + 42.5, datetime.UTC)
    assert delay_of(message("{}", eta=at.isoformat()), now=NOW) == pytest.approx(42.5)
    other_zone = at.astimezone(datetime.timezone(datetime.timedelta(hours=5)))
    assert delay_of(message("{}", eta=other_zone.isoformat()), now=NOW) == pytest.approx(42.5)
    naive_local = datetime.datetime.fromtimestamp(NOW + 10)  # no zone: local time
    assert delay_of(message("{}", eta=naive_local.isoformat()), now=NOW) == pytest.approx(10)
    assert outgoing(message("{}", eta=at.isoformat()), now=NOW).delay == pytest.approx(42.5)


@pytest.mark.parametrize("eta", [None, "", "yesterday", 12, "2000-01-01T00:00:00+00:00"])
def test_no_eta_a_past_one_or_an_unreadable_one_is_no_delay(eta: Any) -> None:
    assert delay_of(message("{}", eta=eta), now=NOW) == 0.0
    assert delay_of({"body": "{}"}, now=NOW) == 0.0


def test_kombu_queue_names_become_s3q_names() -> None:
    assert queue_name("celery") == "celery"
    assert queue_name("celery.pidbox") == "celery-pidbox"
    assert queue_name("a b/c:d") == "a-b-c-d"
    assert queue_name("tasks", prefix="app1_") == "app1_tasks"
    long_a, long_b = queue_name("x" * 100 + "a"), queue_name("x" * 100 + "b")
    assert len(long_a) == len(long_b) == 80 and long_a != long_b


def test_broker_urls() -> None:
    place = place_of("s3q://127.0.0.1:9000/", {})
    assert place.brokers == ("http://127.0.0.1:9000",) and place.token is None
    assert not place.embedded
    assert place_of("s3q://broker/", {}).brokers == ("http://broker:8765",)
    tokened = place_of("s3q://:sekrit@a:1,b:2/", {})
    assert tokened.brokers == ("http://a:1", "http://b:2") and tokened.token == "sekrit"
    assert place_of("s3q://:sekrit@a:1/", {"token": "other"}).token == "other"
    assert place_of("https://broker.example/", {}).brokers == ("https://broker.example",)
    assert "sekrit" not in tokened.describe()


def test_the_token_may_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("S3Q_TOKEN", "from-env")
    assert place_of("s3q://a:1/", {}).token == "from-env"
    assert place_of("s3q://:in-url@a:1/", {}).token == "in-url"


def test_store_urls_are_embedded() -> None:
    place = place_of("file:///var/queues", {})
    assert place.embedded and place.store == "file:///var/queues" and not place.brokers
    assert place_of("s3://bucket/prefix?region=eu-west-1", {}).store == (
        "s3://bucket/prefix?region=eu-west-1"
    )


@pytest.mark.parametrize(
    "url", ["s3q://a:1/some-queue", "s3q://a:1/?x=1", "s3q:///", "relative/path"]
)
def test_urls_this_transport_cannot_use_are_refused(url: str) -> None:
    with pytest.raises(InvalidConfig):
        place_of(url, {})
