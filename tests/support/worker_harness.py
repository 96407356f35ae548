"""Queues for the worker tests."""

from __future__ import annotations

import uuid


def memory_url() -> str:
    return f"memory://worker-{uuid.uuid4().hex}"
