"""The s3q broker: many processes and hosts share the queues of one store over HTTP.

``create_app(store, tokens=..., options=...)`` is the ASGI app; ``serve(store, host, port,
tokens=...)`` runs it under uvicorn. The server parts (starlette, uvicorn) are imported on first
use, so :mod:`s3q.client` can use :mod:`s3q.wire.codec` with urllib3 alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .server import check_exposure, load_sqs_keys, load_tokens, serve, spawn

if TYPE_CHECKING:
    from .app import create_app
    from .registry import QueueRegistry

__all__ = [
    "QueueRegistry",
    "check_exposure",
    "create_app",
    "load_sqs_keys",
    "load_tokens",
    "serve",
    "spawn",
]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    if name == "QueueRegistry":
        from .registry import QueueRegistry

        return QueueRegistry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
