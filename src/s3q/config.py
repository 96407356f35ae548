"""Options of ``s3q.open``: the queue's settings and the store's connection settings."""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from .errors import InvalidConfig
from .store import STORE_OPTIONS

if TYPE_CHECKING:
    from .lease import CasLease

MiB = 1024 * 1024
HOUR, DAY = 3600.0, 86400.0

#: Bounds of settings and call arguments, as SQS bounds them where SQS has the concept: a
#: value outside is refused with a precise error, so no caller holds a message for ever or
#: makes a setting the log cannot encode.
MAX_VISIBILITY = 12 * HOUR  # visibility_timeout, a dequeue's visibility, an extend
MAX_DELAY = 365 * DAY  # the most a queue's max_delay may allow
MAX_WAIT = 20.0  # a dequeue's long poll
MAX_DEQUEUE = 10_000  # the most messages one dequeue answers
MAX_PER_GROUP = 10  # the most messages of one group a dequeue delivers together
MAX_MESSAGE_SIZE = 2**31  # max_message_size: 2 GiB
MAX_ATTEMPTS = 2**31 - 1  # max_attempts (the SQS endpoint: 2**31 - 1 when no redrive)
MAX_DEPTH = 2**48  # max_queue_depth
MAX_PARTITIONS = 64  # partitions: logs of one queue, each with a writer of its own
MAX_SECONDS = 100 * 365 * DAY  # every other duration ("never" is 1e9)
MAX_BYTES = 2**48  # other sizes (caches, thresholds)
DURABLE, BUFFERED = "durable", "buffered"  # the values of ``durability``
STRICT, FAIR = "strict", "fair"  # the values of ``delivery``
MAX_WINDOW = 10.0  # commit_window: a call waits at most this for company
#: the commit window of object stores when none is given: a PUT's worth of latency, about
OBJECT_WINDOW = 0.02


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """The behaviour of one open queue. Every field is a keyword option of ``s3q.open``."""

    max_attempts: int = 3
    retry_delay: float = 1.0
    retry_delay_max: float = 300.0
    visibility_timeout: float = 30.0
    #: the longest delay an enqueue may ask for (SQS: 15 minutes); up to MAX_DELAY
    max_delay: float = 900.0
    max_message_size: int = 64 * MiB
    max_queue_depth: int | None = None
    dedup_window: float = 300.0
    completed_retention: float = 3600.0
    lease_ttl: float = 10.0
    #: seconds a call waits for the store to confirm its write before OutcomeUnknown
    commit_timeout: float = 20.0
    #: seconds an idle writer may wait after an operation, gathering more into its PUT (Kafka's
    #: linger.ms): fewer requests for some latency. None: the store's default (OBJECT_WINDOW on
    #: object stores, 0 on local directories and in memory). Adaptive: see s3q.writer.commit
    commit_window: float | None = None
    payload_cache_bytes: int = 64 * MiB
    large_payload: int = 256 * 1024
    checkpoint_ops: int = 100_000
    checkpoint_interval: float = 60.0
    gc_grace: float = 300.0
    #: seconds of history kept readable: garbage collection keeps every log object younger
    #: than this (and the payload objects they refer to); 0 keeps none beyond ``gc_grace``
    history_retention: float = 0.0
    #: seconds a message is kept from its enqueue, whatever its state (pending, delayed,
    #: leased, retrying, dead): older ones are removed, through the log (``Retire``), as SQS's
    #: MessageRetentionPeriod removes them. None or 0: never (nothing leaves unless asked)
    retention: float | None = None
    clock: Callable[[], float] = time.time
    attributes: dict[str, str] | None = None  # free-form queue metadata, saved with the queue
    #: when an enqueue is answered: "durable", once the log object holding it is in the store;
    #: "buffered", once it is in the writer's batch (lost if the writer dies before that batch
    #: is written, within a commit: the window and one PUT)
    durability: str = DURABLE
    #: when a completion is answered: "durable", once the log object holding it is in the
    #: store; "buffered", once it is in the writer's batch (lost if the writer dies before that
    #: batch is written: the message is then delivered again, as at-least-once allows)
    ack_durability: str = DURABLE
    #: the order across priorities: "strict", the highest first (a steady stream at a high
    #: priority starves the lower ones); "fair", each priority with messages gets deliveries in
    #: proportion to its weight, priority + 1 (first come, first served within a priority)
    delivery: str = STRICT
    #: logs the queue is spread over, each with a writer of its own (``s3q.partitions``); set
    #: before the queue's first message, and never changed after
    partitions: int = 1
    #: where this writer's broker answers (``http://host:port``), written into the writer lease
    #: so that other brokers over the same store forward the queue's requests there
    writer_address: str | None = None
    #: the lease of the broker opening the queue (set by ``s3q serve``): on an object store the
    #: queue's writer lease rides on it instead of being renewed on its own
    broker_lease: CasLease | None = None

    def __post_init__(self) -> None:
        _count("max_attempts", self.max_attempts, 1, MAX_ATTEMPTS)
        _count("max_message_size", self.max_message_size, 1, MAX_MESSAGE_SIZE)
        _count("partitions", self.partitions, 1, MAX_PARTITIONS)
        if self.max_queue_depth is not None:
            _count("max_queue_depth", self.max_queue_depth, 1, MAX_DEPTH)
        _count("payload_cache_bytes", self.payload_cache_bytes, 0, MAX_BYTES)
        _count("large_payload", self.large_payload, 1, MAX_BYTES)
        _count("checkpoint_ops", self.checkpoint_ops, 1, MAX_BYTES)
        for name in (
            "retry_delay",
            "retry_delay_max",
            "dedup_window",
            "completed_retention",
            "gc_grace",
            "history_retention",
        ):
            _seconds(name, getattr(self, name), allow_zero=True)
        _seconds("max_delay", self.max_delay, allow_zero=True, high=MAX_DELAY)
        _seconds(
            "visibility_timeout", self.visibility_timeout, allow_zero=False, high=MAX_VISIBILITY
        )
        for name in ("lease_ttl", "checkpoint_interval", "commit_timeout"):
            _seconds(name, getattr(self, name), allow_zero=False)
        if self.retention is not None:
            _seconds("retention", self.retention, allow_zero=True)
        if self.commit_window is not None:
            _seconds("commit_window", self.commit_window, allow_zero=True, high=MAX_WINDOW)
        if self.delivery not in (STRICT, FAIR):
            raise InvalidConfig(f"delivery must be {STRICT!r} or {FAIR!r}, got {self.delivery!r}")
        for name in ("durability", "ack_durability"):
            if getattr(self, name) not in (DURABLE, BUFFERED):
                raise InvalidConfig(
                    f"{name} must be {DURABLE!r} or {BUFFERED!r}, got {getattr(self, name)!r}"
                )
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
    "max_delay",
    "max_message_size",
    "max_queue_depth",
    "dedup_window",
    "completed_retention",
    "attributes",
    "durability",
    "delivery",
    "ack_durability",
    "history_retention",
    "partitions",
    "retention",
)
Setting = int | float | str | dict[str, str] | None


def queue_settings(config: QueueConfig) -> dict[str, Setting]:
    """The persisted settings of ``config``."""
    return {name: getattr(config, name) for name in PERSISTED}


def with_settings(config: QueueConfig, settings: Mapping[str, Any]) -> QueueConfig:
    """``config`` with persisted ``settings`` in force, as they were saved: a value an older
    build allowed stays in force though today's bounds would refuse it when given anew."""
    try:
        return dataclasses.replace(config, **settings)
    except InvalidConfig:
        changed = copy.copy(config)
        for name, value in settings.items():
            object.__setattr__(changed, name, value)
        return changed


def check_settings(settings: Mapping[str, Any]) -> None:
    """InvalidConfig unless every one of ``settings`` lies within its bounds."""
    QueueConfig(**settings)


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


def _count(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidConfig(f"{name} must be an integer from {low} to {high:,}, got {value!r}")


def _seconds(name: str, value: object, *, allow_zero: bool, high: float = MAX_SECONDS) -> None:
    ok = (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value >= 0 if allow_zero else value > 0)
        and value <= high
    )
    if not ok:
        low = ">= 0" if allow_zero else "> 0"
        raise InvalidConfig(
            f"{name} must be a number of seconds {low} and <= {high:,.0f}, got {value!r}"
        )


def _attributes(value: object) -> None:
    if value is None:
        return
    ok = isinstance(value, dict) and all(
        isinstance(k, str) and k and isinstance(v, str) for k, v in value.items()
    )
    if not ok or not isinstance(value, dict):
        raise InvalidConfig(f"attributes must be a dict of non-empty str to str, got {value!r}")
    for text in (*value, *value.values()):
        if not is_utf8(text):
            raise InvalidConfig(f"attributes must be valid Unicode text, got {text!r}")


def is_utf8(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8 (no lone surrogates), as the log writes it."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True
