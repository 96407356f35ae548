"""Encoding of log objects: a batch of operations and the payloads they carry.

Layout of one object, payloads first so an enqueue's ``offset`` is its absolute position::

    payloads | header (msgpack) | crc32(header) u32 | len(header) u32 | b"S3Q1"

Objects are named ``log/<seq>`` with ``seq`` zero-padded to 20 digits, so keys sort by sequence.
"""

from __future__ import annotations

import struct
import zlib

import msgspec

from .errors import StoreError
from .ops import AnyOp

MAGIC = b"S3Q1"
_TRAILER = struct.Struct("<II4s")
PREFIX = "log/"


class Header(msgspec.Struct, array_like=True):
    """What a log object says about itself and the operations it holds."""

    seq: int
    writer: str  # the token of the writer that wrote it: tells a retried PUT from a rival's
    at: float
    ops: list[AnyOp]


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Header)


def key(seq: int) -> str:
    return f"{PREFIX}{seq:020d}"


def seq_of(key: str) -> int | None:
    """The sequence number a key names, or None if it is not a log object."""
    name = key[len(PREFIX) :] if key.startswith(PREFIX) else ""
    return int(name) if len(name) == 20 and name.isdigit() else None


def encode(header: Header, payloads: list[bytes]) -> bytes:
    head = _encoder.encode(header)
    return b"".join((*payloads, head, _TRAILER.pack(zlib.crc32(head), len(head), MAGIC)))


def decode(data: bytes, where: str) -> Header:
    """The header of a log object (payloads stay where they are)."""
    if len(data) < _TRAILER.size:
        raise StoreError(f"corrupt log object {where}: only {len(data)} bytes")
    crc, size, magic = _TRAILER.unpack_from(data, len(data) - _TRAILER.size)
    start = len(data) - _TRAILER.size - size
    if magic != MAGIC or start < 0:
        raise StoreError(f"corrupt log object {where}: bad trailer")
    head = memoryview(data)[start : start + size]
    if zlib.crc32(head) != crc:
        raise StoreError(f"corrupt log object {where}: header checksum mismatch")
    return _decoder.decode(head)
