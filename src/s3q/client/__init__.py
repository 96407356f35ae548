"""A Python client of the s3q broker, with exactly the embedded queue's API.

``connect(url, token=None)`` gives a :class:`Client`; ``client.queue(name)`` a
:class:`RemoteQueue` whose methods, arguments, return types and exceptions are those of
:class:`s3q.Queue`. ``connect_async`` and :class:`AsyncRemoteQueue` mirror :class:`s3q.AsyncQueue`.

Retries: a request that could not connect (nothing was sent) is retried with exponential
backoff, whatever it is. A read (GET: ``status``, ``stats``, ``peek``, ``dead_letters``) is also
retried on 503 and on timeouts and dropped connections. Changes (``enqueue``, ``dequeue``,
``complete``, …) are *not* retried once sent: an enqueue whose answer was lost may well be
durable, and sending it again would enqueue it twice (unless it has a ``dedup_id``); a dequeue
sent twice would lease messages nobody receives until their lease expires. Those errors reach
the caller, who knows whether repeating is safe.

The parts: :mod:`.calls` (one request of the native API, and whether it may be sent again),
:mod:`.nodes` (which broker of a cluster to send a queue's calls to), :mod:`.requests` (the
request of each queue method), :mod:`.connection` (the clients: connection pools that send
calls), :mod:`.queues` (the remote queues), :mod:`.subscriptions` (messages pushed: a
queue's ``subscribe()``) and :mod:`s3q.wire.answers` (which writer answered
a call: ``with answers() as seen: ...; seen.writer``).
"""

from ..errors import InvalidArgument as InvalidArgument  # importable from here, as it was
from ..wire.answers import PARTITIONS_HEADER, WRITER_HEADER, Answers, answers
from ..wire.codec import (
    AuthError,
    BodyTooLarge,
    BrokerError,
    BrokerUnreachable,
    QueueNotFound,
    RequestTimeout,
    is_broker_url,
    split_queue_url,
)
from .connection import AsyncClient, Client, connect, connect_async
from .queues import AsyncRemoteQueue, RemoteQueue
from .subscriptions import AsyncSubscription, Subscription, SubscriptionsUnsupported

__all__ = [
    "PARTITIONS_HEADER",
    "TOKEN_ENV",
    "WRITER_HEADER",
    "Answers",
    "AsyncClient",
    "AsyncRemoteQueue",
    "AsyncSubscription",
    "AuthError",
    "BodyTooLarge",
    "BrokerError",
    "BrokerUnreachable",
    "Client",
    "QueueNotFound",
    "RemoteQueue",
    "RequestTimeout",
    "Subscription",
    "SubscriptionsUnsupported",
    "answers",
    "connect",
    "connect_async",
    "is_broker_url",
    "split_queue_url",
]

#: the bearer token ``s3q worker`` and the CLI send to a broker given by URL
TOKEN_ENV = "S3Q_TOKEN"
