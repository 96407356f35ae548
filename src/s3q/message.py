"""What the public API hands back: messages, their statuses, and queue statistics."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import msgspec


class MessageStatus(enum.Enum):
    """Where a message stands."""

    PENDING = "pending"  # visible, waiting for a consumer
    DELAYED = "delayed"  # enqueued with a delay that has not passed yet
    PROCESSING = "processing"  # leased to a consumer
    RETRY = "retry"  # failed, waiting out its backoff
    COMPLETED = "completed"  # acknowledged
    DEAD = "dead"  # out of attempts: a dead letter


class Message(msgspec.Struct, frozen=True, gc=False):
    """A message as delivered by ``dequeue`` or listed by ``dead_letters`` (immutable)."""

    # (gc=False: the garbage collector need not track it, as none of its fields can lead back
    # to it; a dequeue of 1,000 made the collector run twice as often and cost 5-15 % of it)

    id: str
    payload: bytes
    priority: int = 0
    attempts: int = 0
    enqueued_at: float = 0.0
    receipt: str | None = None
    group: str | None = None
    dedup_id: str | None = None
    attributes: dict[str, str] = msgspec.field(default_factory=dict)
    last_error: str | None = None
    #: when the message was first delivered (a dequeue that counted an attempt); None if never,
    #: or if that delivery was made by a build that did not record it
    first_delivered_at: float | None = None
    #: who the message is for: messages of a noisy tenant wait behind quiet tenants' ones
    tenant: str | None = None


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counts by status, plus what the writer has done since it opened the queue."""

    pending: int
    delayed: int
    processing: int
    retry: int
    completed: int
    dead: int
    total_enqueued: int
    commits: int
    mean_ops_per_commit: float
    store_requests: int
    store_puts: int = 0
    store_gets: int = 0
    store_bytes_written: int = 0
    store_errors: int = 0  # requests that failed with a StoreError
    store_retries: int = 0  # requests sent again after a transient fault
    #: the newest durable log object: a message enqueued later has an id naming a later one
    #: (``s3q.log.ids.enqueued_by``), so a reader can tell what was there when it looked
    log_seq: int = 0
    #: commits that waited for company before their PUT (``commit_window``)
    commit_waits: int = 0
    store_lists: int = 0  # LIST requests (each page of a listing)
    store_deletes: int = 0
    #: messages whose enqueue was answered before it was durable (``durability="buffered"``)
    buffered_answers: int = 0
    #: messages delivered since the queue opened, by priority (how ``delivery`` shares them)
    deliveries_by_priority: dict[int, int] = field(default_factory=dict)
    #: tenant fairness (as SQS fair queues): tenants noisy now; messages of the others (quiet
    #: tenants, and messages with no tenant) visible, in flight and delayed (or waiting to be
    #: retried), and the age in seconds of the oldest visible one (0: none)
    noisy_tenants: int = 0
    quiet_visible: int = 0
    quiet_in_flight: int = 0
    quiet_delayed: int = 0
    quiet_oldest_age: float = 0.0
    #: messages delivered since the queue opened, of noisy tenants and of the others
    deliveries_noisy: int = 0
    deliveries_quiet: int = 0
    #: completions answered before they were durable (``ack_durability="buffered"``)
    buffered_acks: int = 0
    #: objects garbage collection keeps only for ``history_retention``, as of its last pass
    history_objects: int = 0
    #: what the ids of the queue's messages begin with (``s3q.log.ids``); a partitioned queue's
    #: partitions each have one, and its stats give theirs, comma-separated
    queue_id: str = ""
    #: messages removed because they outlived the queue's ``retention``, since the writer
    #: opened the queue (the history tells every one: ``retired`` events)
    retired: int = 0
    #: the logs the queue is spread over (``s3q.partitions``), and the stats of each
    partitions: list[QueueStats] = field(default_factory=list)


@dataclass
class CompactionReport:
    """What one collection pass did."""

    stable_checkpoint: int = 0
    deleted_objects: int = 0
    deleted_checkpoints: int = 0
    history_objects: int = 0  # garbage kept for history_retention alone
    relocated_messages: int = 0
    relocated_bytes: int = 0
    objects: int = 0  # what the queue's prefix holds afterwards (filled in by compact())
    bytes: int = 0
    errors: list[str] = field(default_factory=list)
