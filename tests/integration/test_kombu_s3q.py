"""s3q's kombu transport (``s3q.celery``) through kombu alone, against a broker in this process
(real HTTP and WebSockets) or embedded queues: delivery by priority, acks that complete,
publish batches that are one commit, a wrong token refused, single gets, sizes and purges,
rejects with and without requeue, leases renewed while held and given back when a consumer
closes, a broker without subscriptions long-polled, an ``eta`` beyond the queue's
``max_delay``, a payload that is not kombu's, and two connections of one process sharing an
embedded queue."""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_harness import TOKEN, Broker
from kombu import Connection, Exchange, Queue
from kombu.message import Message

import s3q.celery  # noqa: F401  (registers s3q:// with kombu)
from s3q.client import AuthError, connect

NAME = "jobs"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    with Broker(f"file://{tmp_path}/store", tokens={TOKEN}) as b:
        yield b


def url_of(broker: Broker, token: str = TOKEN) -> str:
    return f"s3q://:{token}@127.0.0.1:{broker.port}/"


def jobs(name: str = NAME) -> Queue:
    return Queue(name, Exchange(name), name)


def publish(conn: Connection, body: Any, name: str = NAME, **kwargs: Any) -> None:
    queue = jobs(name)
    conn.Producer().publish(
        body, exchange=queue.exchange, routing_key=name, declare=[queue], **kwargs
    )


class Consuming:
    """A kombu consumer of ``queue`` on ``conn``, collecting what it is delivered."""

    def __init__(self, conn: Connection, queue: Queue, prefetch: int = 100) -> None:
        self.conn = conn
        self.got: list[tuple[Any, Message]] = []
        self.consumer = conn.Consumer(queue, callbacks=[self._got], prefetch_count=prefetch)
        self.consumer.consume()

    def _got(self, body: Any, message: Message) -> None:
        self.got.append((body, message))

    def until(self, count: int, timeout: float = 20.0) -> list[Any]:
        """Drain events until ``count`` messages came (the bodies)."""
        deadline = time.monotonic() + timeout
        while len(self.got) < count:
            assert time.monotonic() < deadline, f"got {len(self.got)} of {count}"
            with contextlib.suppress(TimeoutError):
                self.conn.drain_events(timeout=0.5)
        return [body for body, _ in self.got]

    def nothing_for(self, seconds: float) -> None:
        """Drain events for ``seconds``: nothing more may come."""
        before = len(self.got)
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            with contextlib.suppress(TimeoutError):
                self.conn.drain_events(timeout=left)
        assert len(self.got) == before, [body for body, _ in self.got[before:]]


def stats(broker: Broker, name: str = NAME) -> Any:
    with connect(broker.url, token=TOKEN) as client:
        return client.queue(name).stats()


def test_messages_come_by_priority_and_acks_complete_them(broker: Broker) -> None:
    with Connection(url_of(broker)) as conn:
        for i in range(10):
            publish(conn, {"i": i}, priority=i % 3 * 100)
        consuming = Consuming(conn, jobs())
        bodies = consuming.until(10)
        assert [b["i"] % 3 for b in bodies] == [2] * 3 + [1] * 3 + [0] * 4
        assert [b["i"] for b in bodies if b["i"] % 3 == 0] == [0, 3, 6, 9]  # FIFO within one
        for _, message in consuming.got:
            message.ack()
        consuming.consumer.cancel()
    after = stats(broker)
    assert (after.completed, after.pending, after.processing) == (10, 0, 0)


def test_a_publish_batch_is_one_commit(broker: Broker) -> None:
    with Connection(url_of(broker)) as conn:
        publish(conn, "first")  # (the queue made)
        before = stats(broker).commits
        producer = conn.Producer()
        with producer.batch():
            for i in range(200):
                producer.publish({"i": i}, routing_key=NAME)
        assert stats(broker).commits - before == 1
        assert stats(broker).pending == 201


def test_a_wrong_token_is_refused(broker: Broker) -> None:
    with Connection(url_of(broker, "wrong")) as conn, pytest.raises(AuthError):
        conn.connect()


def test_get_size_and_purge(broker: Broker) -> None:
    with Connection(url_of(broker)) as conn:
        queue = jobs().bind(conn.default_channel)
        assert queue.get() is None  # (no queue yet: nothing, no error)
        for i in range(3):
            publish(conn, i)
        assert queue.queue_declare().message_count == 3
        got = queue.get()
        assert got is not None and got.payload == 0
        got.ack()
        assert stats(broker).completed == 1
        assert queue.purge() == 2
        assert queue.queue_declare().message_count == 0


def test_a_reject_with_requeue_comes_back_and_one_without_fails(broker: Broker) -> None:
    with Connection(url_of(broker)) as conn:
        publish(conn, "again")
        consuming = Consuming(conn, jobs())
        consuming.until(1)
        consuming.got.pop()[1].reject(requeue=True)
        assert consuming.until(1) == ["again"]  # back at once, not after its lease
        consuming.got.pop()[1].reject(requeue=False)
        consuming.nothing_for(0.3)
    assert stats(broker).retry == 1  # failed: s3q retries it after its backoff


def test_a_reject_without_requeue_may_complete(broker: Broker) -> None:
    options = {"reject_without_requeue": "complete"}
    with Connection(url_of(broker), transport_options=options) as conn:
        publish(conn, "drop")
        consuming = Consuming(conn, jobs())
        consuming.until(1)
        consuming.got.pop()[1].reject(requeue=False)
        consuming.consumer.cancel()
    after = stats(broker)
    assert (after.completed, after.retry, after.pending) == (1, 0, 0)


def test_a_held_lease_is_renewed_and_a_closed_consumer_gives_it_back(broker: Broker) -> None:
    options = {"visibility_timeout": 1.0}
    with Connection(url_of(broker), transport_options=options) as conn:
        publish(conn, "held")
        holder = Consuming(conn, jobs())
        holder.until(1)
        with Connection(url_of(broker), transport_options=options) as other:
            waiting = Consuming(other, jobs())
            waiting.nothing_for(3.0)  # three leases: renewed, never delivered again
            assert len(holder.got) == 1
            holder.consumer.cancel()
            conn.close()  # unacked: given back at once
            assert waiting.until(1, timeout=5.0) == ["held"]
            waiting.got[0][1].ack()
    assert stats(broker).completed == 1


def test_a_broker_without_subscriptions_is_long_polled(tmp_path: Path) -> None:
    with (
        Broker(f"file://{tmp_path}/store", websockets=False) as b,
        Connection(f"s3q://127.0.0.1:{b.port}/") as conn,
    ):
        consuming = Consuming(conn, jobs(), prefetch=2)
        for i in range(5):
            publish(conn, i)
        assert sorted(consuming.until(2)) == [0, 1]
        consuming.nothing_for(0.5)  # the prefetch: no more until an ack
        for count in (4, 5):
            for _, message in consuming.got:
                if not message.acknowledged:
                    message.ack()
            consuming.until(count)
        assert sorted(body for body, _ in consuming.got) == [0, 1, 2, 3, 4]


def test_an_eta_beyond_the_queues_max_delay_waits_that_long(broker: Broker) -> None:
    with connect(broker.url, token=TOKEN) as client:
        client.queue(NAME).configure(max_delay=1.0)
    with Connection(url_of(broker)) as conn:
        consuming = Consuming(conn, jobs())
        sent = time.monotonic()
        eta = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=30)
        publish(conn, "later", headers={"eta": eta.isoformat()})
        assert stats(broker).delayed == 1
        assert consuming.until(1) == ["later"]
        assert 1.0 - 0.1 <= time.monotonic() - sent < 10  # the queue's longest: the worker holds


def test_a_payload_that_is_not_kombus_is_failed(broker: Broker) -> None:
    with connect(broker.url, token=TOKEN) as client:
        q = client.queue(NAME)
        q.configure(max_attempts=1)
        q.enqueue(b"\x00 not a kombu message")
    with Connection(url_of(broker)) as conn:
        consuming = Consuming(conn, jobs())
        publish(conn, "good")
        assert consuming.until(1) == ["good"]
        consuming.got[0][1].ack()
    with connect(broker.url, token=TOKEN) as client:
        (dead,) = client.queue(NAME).dead_letters()
    assert "not a kombu message" in (dead.last_error or "")


def test_connections_of_one_process_share_an_embedded_queue(tmp_path: Path) -> None:
    url = f"s3q+file://{tmp_path}/store"
    with Connection(url) as consumer_side, Connection(url) as producer_side:
        consuming = Consuming(consumer_side, jobs())
        for i in range(20):
            publish(producer_side, i)
        assert sorted(consuming.until(20)) == list(range(20))
        for _, message in consuming.got:
            message.ack()
    with Connection(url) as again:  # closed and opened again: nothing left
        assert jobs().bind(again.default_channel).queue_declare().message_count == 0
