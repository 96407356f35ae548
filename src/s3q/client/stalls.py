"""A broker that stops answering in the middle of a call (paused, its host frozen): while a
client that knows other brokers awaits an answer, it asks the broker every ``PROBE_EVERY``
seconds whether it still answers at all (``GET /v1/cluster``, served without the store); a
probe left unanswered for ``STALL_TIMEOUT`` seconds ends the call with :class:`BrokerStalled`,
and the queue's calls go to the next broker. A paused process's socket still accepts
connections and requests, so neither a refused connection nor a short timeout would tell."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from socket import socket
from typing import TypeVar

from urllib3.util.wait import wait_for_read

T = TypeVar("T")

PROBE_EVERY = 1.0  # seconds an answer is awaited before (and between) probes of its broker
STALL_TIMEOUT = 1.5  # seconds a probe may take before its broker counts as stalled


class BrokerStalled(Exception):
    """The broker a call was sent to stopped answering before the call's answer came."""


# -- the blocking client (.transport): a request waits for its answer's first byte in slices,
# probing between them, when its thread is inside ``watching``

_probes = threading.local()


@contextmanager
def watching(probe: Callable[[], bool]) -> Iterator[None]:
    """While in it, this thread's requests (:mod:`.transport`) wait for their answers probing
    the broker with ``probe`` (whether it answered) between slices of ``PROBE_EVERY``:
    BrokerStalled when it did not."""
    _probes.probe = probe
    try:
        yield
    finally:
        _probes.probe = None


def _await_answer(sock: socket | None) -> None:
    probe: Callable[[], bool] | None = getattr(_probes, "probe", None)
    if probe is None or sock is None:
        return
    while not wait_for_read(sock, timeout=PROBE_EVERY):
        _probes.probe = None  # the probe's own request is not watched
        try:
            answered = probe()
        finally:
            _probes.probe = probe
        if not answered:
            raise BrokerStalled(f"no answer to a probe within {STALL_TIMEOUT:g} s")


# -- the async client


async def awaited(answer: Awaitable[T], probe: Callable[[], Awaitable[bool]]) -> T:
    """``answer``, probing its broker with ``probe`` every ``PROBE_EVERY`` seconds until it
    comes: BrokerStalled (and ``answer`` cancelled) when a probe finds it does not answer."""
    task = asyncio.ensure_future(answer)
    try:
        while True:
            done, _ = await asyncio.wait([task], timeout=PROBE_EVERY)
            if done:
                return task.result()
            if not await probe():
                raise BrokerStalled(f"no answer to a probe within {STALL_TIMEOUT:g} s")
    finally:
        task.cancel()
