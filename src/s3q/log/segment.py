"""Encoding of log objects: a batch of operations and the payloads they carry.

Layout of one object, payloads first so an enqueue's ``offset`` is its absolute position::

    payloads | header (msgpack) | crc32(header) u32 | len(header) u32 | b"S3Q" | version

The last byte is the format version as an ASCII digit (``b"S3Q1"``: format 1). A reader decodes
every version it knows and refuses a newer one with :class:`UnsupportedFormat`, never guessing.
Objects are named ``log/<seq>`` with ``seq`` zero-padded to 20 digits, so keys sort by sequence.
Checkpoints use the same sealed framing with no payloads.
"""

from __future__ import annotations

import struct
import typing
import zlib

import msgspec

from ..errors import StoreError, UnsupportedFormat
from .ops import AnyOp, Retire

MAGIC = b"S3Q"
#: the newest version this build writes (2: enqueues as columns, ids that name places; 3:
#: checkpoints hold runs without their tables, and completed messages as chunks of places; 4:
#: leases of untouched messages in stretches; 5: messages retired by the queue's retention,
#: ``Retire``)
FORMAT = 5
#: the version of an object that needs nothing newer: a log object is format 5 only when it
#: retires messages, so a queue that never retires stays readable by format-4 builds
BASE_FORMAT = 4
READABLE = frozenset({1, 2, 3, 4, 5})  # the versions it reads
_TRAILER = struct.Struct("<II3sB")
PREFIX = "log/"


class Header(msgspec.Struct, array_like=True):
    """What a log object says about itself and the operations it holds."""

    seq: int
    writer: str  # the token of the writer that wrote it: tells a retried PUT from a rival's
    at: float
    ops: list[AnyOp]


class Stamp(msgspec.Struct, array_like=True):
    """The start of a header: which object, who wrote it, when (its operations not decoded)."""

    seq: int
    writer: str
    at: float


class Corrupt(StoreError):
    """The bytes read are not a sealed s3q object: a foreign object, or a checksum mismatch."""


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Header)
#: the tag of every operation this build reads
KNOWN_TAGS = frozenset(op.__struct_config__.tag for op in typing.get_args(AnyOp))
_stamp_decoder = msgspec.msgpack.Decoder(Stamp)


def key(seq: int, prefix: str = PREFIX) -> str:
    return f"{prefix}{seq:020d}"


def seq_of(key: str, prefix: str = PREFIX) -> int | None:
    """The sequence number a key names, or None if it is not such an object."""
    name = key[len(prefix) :] if key.startswith(prefix) else ""
    return int(name) if len(name) == 20 and name.isdigit() else None


def _trailer(head: bytes | bytearray, version: int = BASE_FORMAT) -> bytes:
    return _TRAILER.pack(zlib.crc32(head), len(head), MAGIC, ord("0") + version)


def seal(head: bytes, payloads: list[bytes] | tuple[()] = (), version: int = BASE_FORMAT) -> bytes:
    """Payloads, then ``head``, then the trailer that lets a reader find and check ``head``."""
    return b"".join((*payloads, head, _trailer(head, version)))


def seal_in_place(head: bytearray) -> bytearray:
    """``seal`` with no payloads, appending the trailer to ``head`` instead of copying it."""
    head.extend(_trailer(head))
    return head


def unseal(data: bytes, where: str) -> memoryview:
    """The checked ``head`` of a sealed object in a format this build reads."""
    if len(data) < _TRAILER.size:
        raise Corrupt(f"corrupt object {where}: only {len(data)} bytes")
    crc, size, magic, version = _TRAILER.unpack_from(data, len(data) - _TRAILER.size)
    start = len(data) - _TRAILER.size - size
    if magic != MAGIC or start < 0:
        raise Corrupt(f"corrupt object {where}: bad trailer")
    if version - ord("0") not in READABLE:
        raise UnsupportedFormat(
            f"object {where} is in format {chr(version)!r}, which this version of s3q cannot "
            f"read (it reads format {', '.join(map(str, sorted(READABLE)))}): it was written "
            "by a newer s3q; upgrade s3q to open this queue"
        )
    head = memoryview(data)[start : start + size]
    if zlib.crc32(head) != crc:
        raise Corrupt(f"corrupt object {where}: checksum mismatch")
    return head


def torn(data: bytes) -> bool:
    """Whether ``data`` is an object an OS crash cut short: linked but never written (empty),
    or its end never reached the disk (its trailer all zeros). Any other bad trailer is
    corruption, not a crash's trace."""
    return len(data) < _TRAILER.size or not any(data[-_TRAILER.size :])


def sealed_size(tail: bytes, where: str) -> int:
    """How many bytes the header and trailer of a sealed object take, from ``tail`` (at
    least its last ``TRAILER_SIZE`` bytes): how much of its end a reader of the header needs."""
    if len(tail) < _TRAILER.size:
        raise Corrupt(f"corrupt object {where}: only {len(tail)} bytes")
    size: int = _TRAILER.unpack_from(tail, len(tail) - _TRAILER.size)[1]
    return _TRAILER.size + size


def encode(header: Header, payloads: list[bytes]) -> bytes:
    """A log object: format 5 if it retires messages (a format-4 build would refuse the
    operation's kind), else format 4."""
    version = FORMAT if Retire in map(type, header.ops) else BASE_FORMAT  # (no generator)
    return seal(_encoder.encode(header), payloads, version)


def decode(data: bytes, where: str) -> Header:
    """The header of a log object (payloads stay where they are). An operation of a kind this
    build does not know is refused with :class:`UnsupportedFormat` naming it, never skipped."""
    head = unseal(data, where)
    try:
        return _decoder.decode(head)
    except msgspec.ValidationError:
        unknown = _unknown_tags(head)
        if not unknown:
            raise
    raise UnsupportedFormat(
        f"object {where} holds operations of a kind this version of s3q does not know "
        f"(tag {', '.join(map(repr, unknown))}; it knows {', '.join(sorted(KNOWN_TAGS))}): it "
        "was written by a newer s3q, or by another program; upgrade s3q to open this queue"
    )


def _unknown_tags(head: memoryview) -> list[object]:
    """The tags of the operations in ``head`` (a header, read as plain msgpack) that this
    build does not know, in the order met; none if it is not a header at all."""
    try:
        plain = msgspec.msgpack.decode(head)
    except msgspec.DecodeError:
        return []
    if not isinstance(plain, list) or len(plain) != 4 or not isinstance(plain[3], list):
        return []
    tags = (
        op[0] for op in plain[3] if isinstance(op, list) and op and isinstance(op[0], str | int)
    )
    return list(dict.fromkeys(t for t in tags if t not in KNOWN_TAGS))


def stamp(data: bytes, where: str) -> Stamp:
    """The stamp of a log object, from its bytes or its tail (its operations skipped)."""
    return _stamp_decoder.decode(unseal(data, where))
