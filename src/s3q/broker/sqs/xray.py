"""SQS's ``AWSTraceHeader`` (X-Ray's trace header) and the W3C ``traceparent``: one trace
context in two spellings.

``Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1`` is
``00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01``: the X-Ray trace id is the W3C one
with its first 8 hex digits (the epoch) set apart.
"""

from __future__ import annotations

import re

_HEX = re.compile(r"[0-9a-f]+")
_ZEROS = frozenset("0")


def _hex(text: str, size: int) -> bool:
    return len(text) == size and bool(_HEX.fullmatch(text)) and set(text) != _ZEROS


def traceparent(header: str) -> str | None:
    """The W3C ``traceparent`` of an ``AWSTraceHeader``; None if it names no parent span."""
    fields = dict(part.strip().partition("=")[::2] for part in header.split(";"))
    version, _, rest = fields.get("Root", "").partition("-")
    epoch, _, unique = rest.partition("-")
    trace_id, parent = (epoch + unique).lower(), fields.get("Parent", "").lower()
    if version != "1" or len(epoch) != 8 or not _hex(trace_id, 32) or not _hex(parent, 16):
        return None
    flags = "01" if fields.get("Sampled") == "1" else "00"
    return f"00-{trace_id}-{parent}-{flags}"


def aws_trace_header(context: str) -> str | None:
    """The ``AWSTraceHeader`` of a W3C ``traceparent``; None if it is not one."""
    parts = context.strip().split("-")
    if len(parts) < 4 or not _hex(parts[1], 32) or not _hex(parts[2], 16):
        return None
    version, flags = parts[0], parts[3]
    if len(version) != 2 or version == "ff" or len(flags) != 2 or not _HEX.fullmatch(flags):
        return None
    trace_id, parent, sampled = parts[1], parts[2], int(flags, 16) & 1
    return f"Root=1-{trace_id[:8]}-{trace_id[8:]};Parent={parent};Sampled={sampled}"
