"""Which queues a broker holds open, and for how long: a read does not make a queue, a queue no
call uses is closed (its writer lease renewals stop) and reopened on the next call, and a
shutdown ends long polls with an empty answer. Brokers run in child processes (``spawn``), as
``s3q serve`` runs them; the clients are s3q's own."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import s3q
from s3q.broker import spawn
from s3q.client import QueueNotFound, connect


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"file://{tmp_path}/store"


@pytest.fixture
def start(store: str) -> Iterator[Callable[..., tuple[Any, str]]]:
    children: list[Any] = []

    def _start(**settings: Any) -> tuple[Any, str]:
        child, url = spawn(store, **settings)
        children.append(child)
        return child, url

    yield _start
    for child in children:
        if child.poll() is None:
            child.terminate()
        child.wait(30)


def until(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    """Wait for ``condition``, which the broker changes in its own process."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition never came"
        time.sleep(0.02)  # another process's state: polled


def test_reads_of_an_unknown_queue_answer_404_and_make_nothing(
    start: Callable[..., tuple[Any, str]], tmp_path: Path
) -> None:
    _, url = start()
    with connect(url) as client:
        ghost = client.queue("ghost")
        for read in (ghost.stats, ghost.peek, ghost.dead_letters, ghost.purge, ghost.cleanup):
            with pytest.raises(QueueNotFound, match="no queue named 'ghost'"):
                read()
        with pytest.raises(QueueNotFound):
            ghost.status("0" * 28)
        answer = httpx.get(f"{url}/v1/queues/ghost/stats")
        assert answer.status_code == 404 and answer.json()["error"] == "QueueNotFound"
        # a consumer may start before its producers: its poll waits, answers empty, makes nothing
        started = time.monotonic()
        assert ghost.dequeue(wait=0.5) == []
        assert time.monotonic() - started >= 0.45
        assert client.queues() == []
        assert not (tmp_path / "store" / "ghost").exists()
        # an enqueue makes the queue; then it reads as any other
        ghost.enqueue(b"first")
        assert ghost.stats().pending == 1
        assert client.queues() == ["ghost"]


def test_a_queue_of_the_store_opens_on_a_read(
    start: Callable[..., tuple[Any, str]], store: str
) -> None:
    with s3q.open(f"{store}/kept") as q:
        q.enqueue(b"from before")
    _, url = start()
    with connect(url) as client:
        assert client.queue("kept").stats().pending == 1


def test_an_idle_queue_is_closed_and_reopened_on_the_next_call(
    start: Callable[..., tuple[Any, str]], store: str
) -> None:
    _, url = start(idle_close=1.0)
    with connect(url) as client:
        q = client.queue("idle")
        q.enqueue(b"one")
        [message] = q.dequeue(visibility_timeout=300)
        q.enqueue(b"two")
        until(lambda: client.queues() == [])  # (listing the queues is no call on one)
        # its writer lease was released: another writer opens it at once
        with s3q.open(f"{store}/idle", lease_ttl=1.0) as embedded:
            assert embedded.stats().pending == 1
        # the next call reopens it, leases and receipts intact
        q.complete(message)
        stats = q.stats()
        assert (stats.pending, stats.processing, stats.completed) == (1, 0, 1)


def in_progress(url: str) -> float:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith("s3q_broker_requests_in_progress "):
            return float(line.split()[1])
    raise AssertionError("no s3q_broker_requests_in_progress in /metrics")


@pytest.mark.parametrize("name", ["made", "ghost"])
def test_shutdown_ends_long_polls_with_an_empty_answer(
    start: Callable[..., tuple[Any, str]], name: str
) -> None:
    """SIGTERM while a client waits 20 s on a dequeue (of a queue, or of a name not made yet):
    the poll answers [] at once and the broker exits cleanly, well within its grace period."""
    child, url = start()
    answers: list[Any] = []
    with connect(url) as client:
        if name == "made":
            client.queue(name).configure()
        poll = threading.Thread(target=lambda: answers.append(client.queue(name).dequeue(wait=20)))
        poll.start()
        until(lambda: in_progress(url) == 1)
        signalled = time.monotonic()
        child.send_signal(signal.SIGTERM)
        poll.join(30)
        assert answers == [[]]
        assert time.monotonic() - signalled < 5
        assert child.wait(30) in (0, -signal.SIGTERM)  # uvicorn ends by the signal it took
