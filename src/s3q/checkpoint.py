"""Checkpoints: the index as of a log object, so opening a queue replays only the log after it.

``checkpoint/<seq>`` (20 digits) is written with create-if-absent once log object ``seq`` is
durable, by the writer that wrote it; the snapshot in it was taken when the index held exactly
the log up to ``seq``. See ``collector`` for how long checkpoints and log objects are kept.
"""

from __future__ import annotations

import msgspec

from . import log
from .state import Snapshot

PREFIX = "checkpoint/"


class Checkpoint(msgspec.Struct, array_like=True):
    """A snapshot of the index and what it needs from the store."""

    seq: int
    writer: str
    at: float
    snapshot: Snapshot


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Checkpoint)


def key(seq: int) -> str:
    return log.key(seq, PREFIX)


def seq_of(key: str) -> int | None:
    return log.seq_of(key, PREFIX)


def encode(checkpoint: Checkpoint) -> bytearray:
    """The sealed checkpoint, built in one buffer (it can be large: no copies)."""
    buffer = bytearray()
    _encoder.encode_into(checkpoint, buffer)
    return log.seal_in_place(buffer)


def decode(data: bytes, where: str) -> Checkpoint:
    return _decoder.decode(log.unseal(data, where))
