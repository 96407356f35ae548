"""The brokers a client sends to, in the order to try them for each queue."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidArgument, S3QError
from ..wire.peers import normalize
from .calls import Call, error_of, retryable, transport_error
from .requests import cluster


class Nodes:
    """The brokers a client may send to (one, or several of one cluster), in the order to try
    them for each queue.

    Any broker of a cluster serves any queue, but each queue is led by one of them, the first
    asked for it. Every client orders the brokers for a queue the same way (rendezvous hashing
    of the queue's name and the brokers' URLs), so each queue is first asked of, and then led
    by, one broker, queues spread evenly over the brokers, and calls mostly reach the leader
    without being forwarded. A broker that cannot serve a call sends that queue's calls on to
    the next one in its order.
    """

    def __init__(self, url: str | Sequence[str], *, follow: bool = True) -> None:
        given = [url] if isinstance(url, str) else list(url)
        self.urls = [u.strip().rstrip("/") for part in given for u in part.split(",") if u.strip()]
        if not self.urls:
            raise InvalidArgument("no broker URL given")
        self.learned: list[str] = []  # the cluster's other brokers, as the given ones list them
        self.asked = not follow  # whether the cluster's brokers were asked for (or never are)
        self._orders: dict[str | None, list[str]] = {None: self.urls}
        self._moved: dict[str | None, int] = {}  # how often a queue's calls moved on
        self._spread: set[str] = set()  # queues of several partitions
        self._own = secrets.token_hex(8)  # this client's order of the brokers

    @property
    def url(self) -> str:
        return self.url_for(None)

    @property
    def several(self) -> bool:
        """Whether a queue's calls have another broker to go to."""
        return len(self.urls) + len(self.learned) > 1

    def learn(self, answer: tuple[int, bytes]) -> None:
        """A broker's ``answer`` (status, body) to ``GET /v1/cluster``: the brokers it lists
        that were not given come after the given ones in every queue's order. An older broker
        (404) lists none."""
        self.asked = True
        if answer[0] != 200:
            return
        given = {_same(u) for u in self.urls}
        listed = cluster().result(answer[1])
        self.learned = [u for u in dict.fromkeys(listed) if _same(u) not in given]
        self._orders = {None: self.urls}

    def spread(self, queue: str | None, partitions: str | None) -> None:
        """A broker's answer about ``queue`` said it has ``partitions`` (its
        ``s3q-partitions`` header, if any): from now on this client sends that queue's calls
        to the brokers in an order of its own, so the clients of the queue spread over the
        cluster's brokers (each leads some partitions) instead of all asking one."""
        if queue is None or not partitions or queue in self._spread:
            return
        self._spread.add(queue)
        self._orders.pop(queue, None)
        self._moved.pop(queue, None)

    def url_for(self, queue: str | None) -> str:
        """The broker to send ``queue``'s calls to now: the given brokers in the queue's
        order, then those learned from them (all in this client's order, for a queue of
        several partitions)."""
        order = self._orders.get(queue)
        if order is None:
            name = queue or ""
            if queue in self._spread:
                mine = f"{name}\0{self._own}"
                order = sorted([*self.urls, *self.learned], key=lambda u: rank(mine, u))
            else:
                order = sorted(self.urls, key=lambda u: rank(name, u)) + sorted(
                    self.learned, key=lambda u: rank(name, u)
                )
            self._orders[queue] = order
        return order[self._moved.get(queue, 0) % len(order)]

    def move_on(self, queue: str | None, node: str) -> None:
        """``node`` could not be reached for ``queue``: its calls go to the next broker (unless
        they moved on already)."""
        if self.url_for(queue) == node:
            self._moved[queue] = self._moved.get(queue, 0) + 1

    @property
    def count(self) -> int:
        """How many brokers this client may turn to."""
        return len(self.urls) + len(self.learned)

    def raise_or_move_on(
        self,
        call: Call[Any],
        node: str,
        answer: tuple[int, bytes] | None,
        exc: BaseException | None,
        *,
        last: bool,
    ) -> None:
        """After a failed attempt at ``call`` on ``node`` (an error ``answer``: status and body,
        or a transport failure ``exc``): raise its error, unless trying again is safe and
        allowed; then the next broker is the one to try."""
        error: S3QError
        if exc is not None:
            assert isinstance(exc, Exception)
            error, retry = transport_error(exc, node), retryable(call, exc, None)
        else:
            assert answer is not None
            error = error_of(*answer)
            retry = retryable(call, error, answer[0])
        # a broker that could not answer, or could not serve: the queue's calls move on
        if retry or exc is not None:
            self.move_on(call.queue, node)
        if last or not retry:
            raise error from exc


def _same(url: str) -> str:
    """``url`` as compared with another broker's."""
    try:
        return normalize(url)
    except S3QError:
        return url


def rank(queue: str, url: str) -> bytes:
    """Where broker ``url`` comes in ``queue``'s order: the same in every process (and in
    every broker: the partitions of a queue are led in this order, ``QueueRegistry``)."""
    return hashlib.blake2b(f"{queue}\0{url}".encode(), digest_size=8).digest()
