"""The kombu transport: ``Transport``, its ``Channel`` and ``QoS``, over s3q's queues.

A kombu virtual transport (``kombu.transport.virtual``: exchanges and bindings are kept in
the connection, as every virtual transport keeps them) whose every queue is an s3q queue:

- a publish is an enqueue (:mod:`.envelope`: Celery's ``eta``/``countdown`` become s3q's delay,
  kombu's priority s3q's), durable when it returns; kombu's publish batches
  (``Producer.batch()``) are ``enqueue_batch`` calls, one commit per queue;
- a consumer (``basic_consume``) is a feed of the pump (:mod:`.pump`): messages pushed on a
  broker's subscription holding the channel's prefetch (Celery's
  ``worker_prefetch_multiplier`` times its concurrency), their leases renewed while held;
- the delivery tag is the s3q receipt: an ack completes the message, a reject with requeue
  releases it (back at once, no attempt counted), a reject without requeue fails it (s3q's
  retry and dead-letter rules), or completes it with ``reject_without_requeue="complete"``;
- restoring unacked messages (a channel closed) releases their leases.

The transport is asynchronous for Celery's event loop: the pump's pipe is one of its readers.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import select
import time
from queue import Empty
from typing import Any

from kombu.transport import virtual

from ..errors import InvalidConfig, S3QError, StoreError
from ..message import Message
from . import envelope
from .backends import BrokerQueues, Queues, embedded
from .place import OPTIONS, place_of
from .pump import Feed, Pump
from .sources import Settle

__all__ = ["Channel", "PublishBatch", "QoS", "Transport"]

log = logging.getLogger("s3q.celery")

DEFAULT_VISIBILITY_TIMEOUT = 30.0
REJECTED = "rejected by Celery (reject without requeue)"


class QoS(virtual.QoS):
    """kombu's unacked messages of a channel, settled in s3q as they are acked or rejected."""

    channel: Channel

    def ack(self, delivery_tag: str) -> None:
        self.channel.settle(delivery_tag, "complete")
        super().ack(delivery_tag)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        if requeue:
            self.channel.settle(delivery_tag, "release")
        else:
            self.channel.settle(delivery_tag, self.channel.reject_op, REJECTED)
        self._quick_ack(delivery_tag)  # (not kombu's: it would publish the message again)

    def restore_unacked(self) -> list[Any]:
        """Give back the leases of every message not acked: delivered again at once."""
        self._flush()
        tags = list(self._delivered)
        self._delivered.clear()
        self.channel.give_back(tags)
        return []


class PublishBatch:
    """kombu's ``Producer.batch()`` on this transport: the messages published within it are
    enqueued together, one ``enqueue_batch`` per queue (all or none in each), when it flushes
    (at its end, or every ``max_size`` messages)."""

    def __init__(self, channel: Channel, max_size: int) -> None:
        self.channel = channel
        self.max_size = max_size
        self._waiting: dict[str, list[envelope.Outgoing]] = {}
        self._count = 0

    def publish(self, message: dict[str, Any], **kwargs: Any) -> Any:
        return self.channel.basic_publish(message, _publish_batch=self, **kwargs)

    def add(self, name: str, out: envelope.Outgoing) -> None:
        self._waiting.setdefault(name, []).append(out)
        self._count += 1
        if self._count >= self.max_size:
            self.flush()

    def flush(self) -> None:
        waiting, self._waiting, self._count = self._waiting, {}, 0
        for name, outs in waiting.items():
            self.channel.queues.enqueue_batch(name, outs)

    def discard(self) -> None:
        self._waiting, self._count = {}, 0

    def close(self) -> None:
        self.discard()


class Channel(virtual.Channel):
    """A kombu channel whose queues are s3q queues (see the module's docstring)."""

    QoS = QoS
    connection: Transport
    # the body as kombu's serializer made it: the envelope keeps text as text, bytes in base64
    body_encoding = None  # type: ignore[assignment]
    min_priority, max_priority = 0, envelope.MAX_PRIORITY
    supports_batch_publish = True

    def __init__(self, connection: Transport, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        self._feeds: dict[str, Feed] = {}  # by kombu queue
        self._got: dict[str, str] = {}  # delivery tag -> s3q queue, of basic_get's messages
        self._no_ack: set[str] = set()
        self._prefetch = 0
        self.reject_op: Settle = connection.reject_op

    @property
    def queues(self) -> Queues:
        return self.connection.queues

    def _name(self, queue: str) -> str:
        return envelope.queue_name(queue, self.connection.options["queue_name_prefix"])

    # -- publishing ----------------------------------------------------------------------------

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        batch = kwargs.pop("_publish_batch", None)
        out = envelope.outgoing(message)
        if batch is not None:
            batch.add(self._name(queue), out)
        else:
            self.queues.enqueue(self._name(queue), out)

    def create_publish_batch(self, max_size: int) -> PublishBatch:
        return PublishBatch(self, max_size)

    # -- the queues ----------------------------------------------------------------------------

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        name = self._name(queue)
        msg = self.queues.get(name, self.connection.visibility_timeout)
        if msg is None:
            raise Empty()
        receipt = msg.receipt or ""
        self._got[receipt] = name
        return envelope.decoded(msg.payload, receipt, msg.attempts > 1)

    def _size(self, queue: str) -> int:
        return self.queues.size(self._name(queue))

    def _purge(self, queue: str) -> int:
        return self.queues.purge(self._name(queue))

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        return self.queues.exists(self._name(queue))

    # -- consuming -----------------------------------------------------------------------------

    def basic_consume(
        self, queue: str, no_ack: bool, callback: Any, consumer_tag: str, **kwargs: Any
    ) -> Any:
        answer = super().basic_consume(queue, no_ack, callback, consumer_tag, **kwargs)
        if no_ack:
            self._no_ack.add(queue)
        if queue not in self._feeds:
            pump = self.connection.pump
            self._feeds[queue] = pump.consume(queue, self._name(queue), self._window(), self)
        return answer

    def basic_cancel(self, consumer_tag: str) -> Any:
        queue = self._tag_to_queue.get(consumer_tag)
        answer = super().basic_cancel(consumer_tag)
        feed = self._feeds.pop(queue, None) if queue is not None else None
        if feed is not None:
            self._no_ack.discard(feed.key)
            self.connection.stop(feed)
        return answer

    def basic_qos(
        self, prefetch_size: int = 0, prefetch_count: int = 0, apply_global: bool = False
    ) -> None:
        super().basic_qos(prefetch_size, prefetch_count, apply_global)
        self._prefetch = prefetch_count
        for feed in self._feeds.values():
            self.connection.pump.set_prefetch(feed, self._window())

    def _window(self) -> int:
        """The prefetch of a feed: the channel's, or the ``unlimited_prefetch`` option's when
        kombu asks for none (0)."""
        return int(self._prefetch or self.connection.options["unlimited_prefetch"])

    def delivered(self, feed: Feed, raw: dict[str, Any]) -> None:
        """Hand a message of ``feed`` to its consumer's callback."""
        self.connection._callbacks[feed.key](raw)
        if feed.key in self._no_ack:
            self.settle(raw["properties"]["delivery_tag"], "complete")

    # -- settling ------------------------------------------------------------------------------

    def settle(self, tag: str, op: Settle, error: str | None = None) -> None:
        """Settle the lease of the message delivered with ``tag`` (its receipt)."""
        name = self._got.pop(tag, None)
        if name is not None:  # (basic_get's: not the pump's)
            try:
                self.queues.settle(name, op, tag, error)
            except S3QError as exc:
                log.warning("%s of a message of %s refused: %s", op, name, exc)
            return
        if not self.connection.has_pump:
            log.debug("a %s after the connection closed: its leases were given back", op)
            return
        pump = self.connection.pump
        pump.settle(tag, op, error)
        if pump.inbox:
            pump.poke()  # (room for the messages waiting on this channel's prefetch)

    def give_back(self, tags: list[str]) -> None:
        got = [tag for tag in tags if tag in self._got]
        for tag in got:
            self.settle(tag, "release")
        if len(got) < len(tags) and self.connection.has_pump:
            self.connection.pump.give_back(tag for tag in tags if tag not in got)


class Transport(virtual.Transport):
    """kombu's transport for s3q (``s3q://host:8765/``, ``s3q+file:///path``; see
    :mod:`s3q.celery`)."""

    Channel = Channel
    driver_type = "s3q"
    driver_name = "s3q"
    default_port = 8765  # type: ignore[assignment]
    can_parse_url = True  # (the URL is read whole: .place)
    implements = virtual.Transport.implements.extend(
        asynchronous=True,
        batch_publish=True,
        exchange_type=frozenset(["direct", "topic"]),
    )
    # a broker that cannot be reached, or whose store failed (StoreError: BrokerUnreachable,
    # OutcomeUnknown, ...): kombu reconnects and, with a retry policy (Celery's publish
    # retries), sends again; every other s3q error (bad input, a wrong token, a full queue)
    # is the caller's at once
    connection_errors = (*virtual.Transport.connection_errors, StoreError, OSError)  # type: ignore[assignment]
    recoverable_connection_errors = connection_errors
    channel_errors = (*virtual.Transport.channel_errors, S3QError)  # type: ignore[assignment]
    recoverable_channel_errors = ()

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        self.options = {**OPTIONS, **(client.transport_options or {})}
        reject = self.options["reject_without_requeue"]
        if reject not in ("fail", "complete"):
            raise InvalidConfig(f"reject_without_requeue: 'fail' or 'complete', not {reject!r}")
        self.reject_op: Settle = reject
        vt = self.options["visibility_timeout"]
        self.visibility_timeout = float(vt) if vt else DEFAULT_VISIBILITY_TIMEOUT
        self.place = place_of(str(client.hostname or ""), self.options)
        self._pump: Pump | None = None
        self._queues: Queues | None = None
        self._hub: Any = None  # Celery's event loop, reading the pump's pipe

    @property
    def queues(self) -> Queues:
        """Where this connection's queues are (taken on first use, let go at its close)."""
        if self._queues is None:
            self._queues = (
                embedded(self.place, dict(self.options["queue_options"]))
                if self.place.embedded
                else BrokerQueues(self.place, float(self.options["timeout"]))
            )
        return self._queues

    def driver_version(self) -> str:
        try:
            return importlib.metadata.version("s3q")
        except importlib.metadata.PackageNotFoundError:
            return "unknown"

    @property
    def has_pump(self) -> bool:
        return self._pump is not None

    @property
    def pump(self) -> Pump:
        """This connection's consumers (on the process's loop thread), started on first
        need."""
        if self._pump is None:
            self._pump = Pump(self.queues, self.visibility_timeout)
        return self._pump

    def establish_connection(self) -> Any:
        self.queues.check()
        return super().establish_connection()

    def close_connection(self, connection: Any) -> None:
        try:
            super().close_connection(connection)
        finally:
            if self._pump is not None:
                if self._hub is not None:
                    with contextlib.suppress(Exception):
                        self._hub.remove_reader(self._pump.fileno)
                    self._hub = None
                self._pump.close()
                self._pump = None
            if self._queues is not None:
                self._queues.close()
                self._queues = None

    def stop(self, feed: Feed) -> None:
        """Stop consuming ``feed``: what waits in the inbox for it goes back now."""
        pump = self.pump
        inbox = pump.inbox
        undelivered: list[tuple[Feed, Message]] = []
        kept: list[tuple[Feed, Message]] = []
        for _ in range(len(inbox)):
            item = inbox.popleft()
            (undelivered if item[0] is feed else kept).append(item)
        inbox.extendleft(reversed(kept))
        pump.cancel(feed, [msg.receipt or "" for _, msg in undelivered])

    # -- delivering ----------------------------------------------------------------------------

    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        self._hub = loop
        loop.add_reader(self.pump.fileno, self.on_readable, connection, loop)

    def unregister_from_event_loop(self, connection: Any, loop: Any) -> None:
        if self._pump is not None:
            loop.remove_reader(self._pump.fileno)
        self._hub = None

    def on_readable(self, connection: Any, loop: Any) -> None:
        self._deliver_inbox()

    def drain_events(self, connection: Any, timeout: float | None = None, **kwargs: Any) -> None:
        """Deliver what arrived, waiting up to ``timeout`` seconds for something (kombu's
        blocking consumers; Celery's event loop reads the pump's pipe instead)."""
        pump = self.pump
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._deliver_inbox():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError()
            select.select([pump.fileno], [], [], left)

    def _deliver_inbox(self) -> int:
        """Hand waiting messages to their consumers while their channels' prefetch allows;
        how many. A fatal error of a feed (a wrong token) is raised here, to Celery."""
        pump = self.pump
        pump.taken()
        if pump.error is not None:
            raise pump.error
        inbox, delivered = pump.inbox, 0
        while inbox:
            feed, msg = inbox[0]
            channel: Channel | None = feed.owner
            if feed.cancelled or channel is None or channel.closed:
                inbox.popleft()
                pump.settle(msg.receipt or "", "release")
                continue
            if not channel.qos.can_consume():
                break
            inbox.popleft()
            receipt = msg.receipt or ""
            try:
                raw = envelope.decoded(msg.payload, receipt, msg.attempts > 1)
            except ValueError as exc:
                log.error("a message of %s is not kombu's (%s): failed", feed.name, exc)
                pump.settle(receipt, "fail", str(exc))
                continue
            channel.delivered(feed, raw)
            delivered += 1
        return delivered
