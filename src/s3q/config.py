"""Options of ``s3q.open``: the queue's settings and the store's connection settings."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from .errors import InvalidConfig

MiB = 1024 * 1024

STORE_OPTIONS = frozenset(
    {
        "endpoint_url",
        "region",
        "access_key_id",
        "secret_access_key",
        "session_token",
        "allow_http",
        "store_timeout",
    }
)


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """The behaviour of one open queue. Every field is a keyword option of ``s3q.open``."""

    max_attempts: int = 3
    retry_delay: float = 1.0
    retry_delay_max: float = 300.0
    visibility_timeout: float = 30.0
    max_message_size: int = 64 * MiB
    max_queue_depth: int | None = None
    dedup_window: float = 300.0
    completed_retention: float = 3600.0
    lease_ttl: float = 10.0
    #: seconds a call waits for the store to confirm its write before OutcomeUnknown
    commit_timeout: float = 20.0
    payload_cache_bytes: int = 64 * MiB
    large_payload: int = 256 * 1024
    checkpoint_ops: int = 100_000
    checkpoint_interval: float = 60.0
    gc_grace: float = 300.0
    clock: Callable[[], float] = time.time
    attributes: dict[str, str] | None = None  # free-form queue metadata, saved with the queue
    #: where this writer's broker answers (``http://host:port``), written into the writer lease
    #: so that other brokers over the same store forward the queue's requests there
    writer_address: str | None = None

    def __post_init__(self) -> None:
        _positive_int("max_attempts", self.max_attempts)
        _positive_int("max_message_size", self.max_message_size)
        if self.max_queue_depth is not None:
            _positive_int("max_queue_depth", self.max_queue_depth)
        _non_negative_int("payload_cache_bytes", self.payload_cache_bytes)
        _positive_int("large_payload", self.large_payload)
        _positive_int("checkpoint_ops", self.checkpoint_ops)
        for name in (
            "retry_delay",
            "retry_delay_max",
            "dedup_window",
            "completed_retention",
            "gc_grace",
        ):
            _seconds(name, getattr(self, name), allow_zero=True)
        for name in ("visibility_timeout", "lease_ttl", "checkpoint_interval", "commit_timeout"):
            _seconds(name, getattr(self, name), allow_zero=False)
        if not callable(self.clock):
            raise InvalidConfig("clock must be a callable returning unix seconds")
        _attributes(self.attributes)


_QUEUE_OPTIONS = frozenset(f.name for f in fields(QueueConfig))

#: Settings that belong to the queue, not to one writer: written to the log when an ``open``
#: passes them, and in force for every later ``open`` that does not (like SQS queue attributes).
PERSISTED = (
    "max_attempts",
    "retry_delay",
    "retry_delay_max",
    "visibility_timeout",
    "max_message_size",
    "max_queue_depth",
    "dedup_window",
    "completed_retention",
    "attributes",
)
Setting = int | float | dict[str, str] | None


def queue_settings(config: QueueConfig) -> dict[str, Setting]:
    """The persisted settings of ``config``."""
    return {name: getattr(config, name) for name in PERSISTED}


def split_options(
    options: Mapping[str, Any],
) -> tuple[QueueConfig, dict[str, Any], dict[str, Setting]]:
    """Split ``open``'s keywords into the queue config, the store options, and the queue
    settings the caller gave explicitly."""
    unknown = set(options) - _QUEUE_OPTIONS - STORE_OPTIONS
    if unknown:
        known = ", ".join(sorted(_QUEUE_OPTIONS | STORE_OPTIONS))
        raise InvalidConfig(f"unknown option(s) {', '.join(sorted(unknown))}; known: {known}")
    queue = {k: v for k, v in options.items() if k in _QUEUE_OPTIONS}
    store = {k: v for k, v in options.items() if k in STORE_OPTIONS}
    explicit = {k: v for k, v in options.items() if k in PERSISTED}
    return QueueConfig(**queue), store, explicit


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidConfig(f"{name} must be a positive integer, got {value!r}")


def _non_negative_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidConfig(f"{name} must be an integer >= 0, got {value!r}")


def _seconds(name: str, value: object, *, allow_zero: bool) -> None:
    ok = (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value >= 0 if allow_zero else value > 0)
    )
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise InvalidConfig(f"{name} must be a finite number of seconds {bound}, got {value!r}")


def _attributes(value: object) -> None:
    if value is None:
        return
    ok = isinstance(value, dict) and all(
        isinstance(k, str) and k and isinstance(v, str) for k, v in value.items()
    )
    if not ok:
        raise InvalidConfig(f"attributes must be a dict of non-empty str to str, got {value!r}")
