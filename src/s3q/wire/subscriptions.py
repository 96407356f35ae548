"""What travels on a subscription: the frames of a consumer's push channel (WebSocket).

A consumer opens ``GET /v1/queues/{name}/subscribe`` as a WebSocket and sends :class:`Open`
first; the broker answers :class:`Opened` (or :class:`Refused`: a wrong token, say), then
pushes leased messages (:class:`Pushed`) while the consumer holds fewer than its ``prefetch``
unsettled; the consumer settles them (:class:`Settle`: complete, fail,
release, extend) on the same channel, and the broker answers each settle (:class:`Settled`)
once it is durable. Leases taken for a subscription are given back when it closes. A frame the
broker cannot take is answered with :class:`Refused` and the channel is closed.

Every frame is one binary WebSocket message: msgpack of a struct tagged by ``type``. Shared by
the broker (:mod:`s3q.broker.subscriptions`) and the clients (:mod:`s3q.client.subscriptions`).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from ..message import Message
from .codec import BrokerError
from .pages import Page

__all__ = [
    "CLOSE_REFUSED",
    "ClientFrame",
    "Open",
    "Opened",
    "Prefetch",
    "Pushed",
    "Refused",
    "ServerFrame",
    "Settle",
    "SettleOp",
    "Settled",
    "SubscriptionsUnsupported",
    "decode_client",
    "decode_server",
    "encode",
]

#: the WebSocket close code after a :class:`Refused` frame (the policy-violation code)
CLOSE_REFUSED = 1008


class SubscriptionsUnsupported(BrokerError):
    """The broker offers no subscriptions (one from before them, or without a WebSocket
    library): poll with ``dequeue`` instead."""


SettleOp = Literal["complete", "fail", "release", "extend"]


class Open(msgspec.Struct, tag="open", forbid_unknown_fields=True):
    """The first frame a consumer sends: how many messages it may hold unsettled, how long
    each lease lasts (None: the queue's visibility timeout) and how many of one group one push
    may hold (as ``dequeue``'s ``per_group``)."""

    prefetch: int
    visibility_timeout: float | None = None
    per_group: int = 1


class Prefetch(msgspec.Struct, tag="prefetch", forbid_unknown_fields=True):
    """The consumer's new ``prefetch``: it may hold that many unsettled from now on."""

    prefetch: int


class Settle(msgspec.Struct, tag="settle", forbid_unknown_fields=True):
    """Settle leases: ``complete``, ``release`` (every receipt), ``fail`` or ``extend`` (one
    receipt: ``error`` / ``seconds`` and ``revive``). ``seq``: the consumer's number for it,
    which its :class:`Settled` answer carries."""

    seq: int
    op: SettleOp
    receipts: list[str]
    error: str | None = None
    seconds: float | None = None
    revive: bool = False


class Pushed(msgspec.Struct, tag="pushed", gc=False):
    """Messages leased for the consumer, as a dequeue answers them (``s3q.wire.pages``)."""

    messages: list[Message]
    pages: list[Page] = []


class Settled(msgspec.Struct, tag="settled"):
    """The answer to :class:`Settle` ``seq``: done and durable, or ``errors``: receipt index
    -> error body (``s3q.wire.codec.error_body``), those receipts' settles refused (a refused
    receipt changes nothing; the others were done). ``retry_at``: a fail's answer."""

    seq: int
    errors: dict[int, dict[str, Any]] = {}
    retry_at: float | None = None


class Opened(msgspec.Struct, tag="opened"):
    """The broker took the subscription: pushes follow."""


class Refused(msgspec.Struct, tag="refused"):
    """The broker closes the channel: ``error`` is an error body (``error_body``), ``status``
    the HTTP status a call refused so would have had."""

    error: dict[str, Any]
    status: int = 400


ClientFrame = Open | Prefetch | Settle
ServerFrame = Opened | Pushed | Settled | Refused

_encoder = msgspec.msgpack.Encoder()
_client = msgspec.msgpack.Decoder(ClientFrame)
_server = msgspec.msgpack.Decoder(ServerFrame)


def encode(frame: ClientFrame | ServerFrame) -> bytes:
    """A frame's bytes."""
    return _encoder.encode(frame)


def decode_client(data: bytes) -> ClientFrame:
    """A consumer's frame; msgspec.DecodeError / ValidationError if it is not one."""
    frame: ClientFrame = _client.decode(data)
    return frame


def decode_server(data: bytes) -> ServerFrame:
    """A broker's frame; msgspec.DecodeError / ValidationError if it is not one."""
    frame: ServerFrame = _server.decode(data)
    return frame
