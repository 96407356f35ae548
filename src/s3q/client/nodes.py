"""The brokers a client sends to, in the order to try them for each queue."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from ..broker.peerauth import normalize
from ..errors import InvalidArgument, S3QError
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

    def url_for(self, queue: str | None) -> str:
        """The broker to send ``queue``'s calls to now: the given brokers in the queue's
        order, then those learned from them."""
        order = self._orders.get(queue)
        if order is None:
            name = queue or ""
            order = self._orders[queue] = sorted(self.urls, key=lambda u: _rank(name, u)) + sorted(
                self.learned, key=lambda u: _rank(name, u)
            )
        return order[self._moved.get(queue, 0) % len(order)]

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
        if (retry or exc is not None) and self.url_for(call.queue) == node:
            self._moved[call.queue] = self._moved.get(call.queue, 0) + 1  # unless moved already
        if last or not retry:
            raise error from exc


def _same(url: str) -> str:
    """``url`` as compared with another broker's."""
    try:
        return normalize(url)
    except S3QError:
        return url


def _rank(queue: str, url: str) -> bytes:
    """Where broker ``url`` comes in ``queue``'s order: the same in every process."""
    return hashlib.blake2b(f"{queue}\0{url}".encode(), digest_size=8).digest()
