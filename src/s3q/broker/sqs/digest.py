"""The MD5 digests SQS answers with, so SDKs can check what the service received.

``MD5OfMessageBody`` is the MD5 of the body's UTF-8 bytes. ``MD5OfMessageAttributes`` (and
``MD5OfMessageSystemAttributes``) hash the attributes sorted by name, each as: name, data type,
a transport byte (1: string value, 2: binary value) and the value, the strings in UTF-8 and
every field but the transport byte preceded by its length as a 4-byte big-endian integer.
"""

from __future__ import annotations

import hashlib
import struct

from .shapes import Attributes

STRING, BINARY = 1, 2


def md5_of_body(body: str) -> str:
    return hashlib.md5(body.encode("utf-8"), usedforsecurity=False).hexdigest()


def md5_of_attributes(attributes: Attributes) -> str:
    md5 = hashlib.md5(usedforsecurity=False)

    def field(data: bytes) -> None:
        md5.update(struct.pack("!I", len(data)))
        md5.update(data)

    for name in sorted(attributes):
        value = attributes[name]
        field(name.encode("utf-8"))
        field(value.DataType.encode("utf-8"))
        if value.BinaryValue is not None:
            md5.update(bytes([BINARY]))
            field(value.BinaryValue)
        else:
            md5.update(bytes([STRING]))
            field((value.StringValue or "").encode("utf-8"))
    return md5.hexdigest()
