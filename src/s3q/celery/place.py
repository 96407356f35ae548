"""Where a kombu connection's queues are, read from its URL and transport options.

``s3q://host:8765/`` (several brokers of a cluster: ``s3q://a:8765,b:8765/``; a bearer token:
``s3q://:TOKEN@host:8765/``, or the ``token`` option, or ``$S3Q_TOKEN``) and
``s3q+http://…``, ``s3q+https://…``: queues served by ``s3q serve``. ``s3q+file:///path``,
``s3q+s3://bucket/prefix``, ``s3q+memory://name`` (any store URL of ``s3q.open``): queues of
that store opened in this process, embedded (kombu hands the transport what follows ``s3q+``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from ..errors import InvalidConfig

__all__ = ["OPTIONS", "Place", "place_of"]

TOKEN_ENV = "S3Q_TOKEN"  # (s3q.client.TOKEN_ENV: the client is not imported by embedded use)
DEFAULT_PORT = 8765

#: the transport options this transport reads (``broker_transport_options``), with defaults
OPTIONS: dict[str, Any] = {
    "token": None,  # the broker's bearer token (else the URL's password, else $S3Q_TOKEN)
    "timeout": 30.0,  # seconds a call to the broker may take
    "visibility_timeout": None,  # each lease, seconds (None: the queue's); renewed while held
    "queue_name_prefix": "",  # put before every queue's name
    "unlimited_prefetch": 10_000,  # the prefetch when Celery asks for none (0)
    "reject_without_requeue": "fail",  # or "complete": a reject(requeue=False) drops it
    "queue_options": {},  # embedded: options of s3q.open for every queue (max_attempts, ...)
}


@dataclass(frozen=True)
class Place:
    """The broker(s) a connection talks to (``brokers``, ``token``), or the store whose queues
    it opens itself (``store``)."""

    brokers: tuple[str, ...] = ()
    token: str | None = None
    store: str | None = None

    @property
    def embedded(self) -> bool:
        return self.store is not None

    def describe(self) -> str:
        """Where, for a log line or an error, without the token."""
        return self.store if self.store is not None else ",".join(self.brokers)


def _brokers(scheme: str, netloc: str) -> tuple[tuple[str, ...], str | None]:
    """The broker URLs of ``netloc`` (``[:token@]host[:port][,host[:port]...]``) and its token."""
    token = None
    if "@" in netloc:
        credentials, netloc = netloc.rsplit("@", 1)
        token = unquote(credentials.partition(":")[2]) or None
    hosts = [h.strip() for h in netloc.split(",") if h.strip()]
    if not hosts:
        raise InvalidConfig("an s3q broker URL needs a host: s3q://host:8765/")
    urls = []
    for host in hosts:
        if ":" not in host.rsplit("]", 1)[-1]:
            host = f"{host}:{DEFAULT_PORT}" if scheme == "http" else host
        urls.append(f"{scheme}://{host}")
    return tuple(urls), token


def place_of(hostname: str, options: Mapping[str, Any]) -> Place:
    """The place of a kombu connection whose hostname (the URL, or what followed ``s3q+``) is
    ``hostname``. InvalidConfig for a URL this transport cannot use."""
    url = urlsplit(hostname)
    if url.scheme in ("s3q", "http", "https"):
        if url.path.strip("/") or url.query:
            raise InvalidConfig(
                f"an s3q broker URL names no queue or store ({hostname!r}): queues are Celery's, "
                "the store is the broker's; put a prefix in the queue_name_prefix option"
            )
        scheme = "https" if url.scheme == "https" else "http"
        brokers, token = _brokers(scheme, url.netloc)
        token = options.get("token") or token or os.environ.get(TOKEN_ENV) or None
        return Place(brokers=brokers, token=token)
    if "://" not in hostname:
        raise InvalidConfig(
            f"not an s3q broker URL: {hostname!r}; use s3q://host:8765/, or s3q+file:///path "
            "(s3q+s3://bucket/prefix, s3q+memory://name) for queues opened in this process"
        )
    return Place(store=hostname.rstrip("/"))
