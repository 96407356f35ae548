"""Object stores behind one small interface, chosen by URL.

``memory://NAME``  ephemeral, shared by name within the process
``file:///path``   a local directory (also a plain path): the embedded default
``s3://bucket/prefix``  S3 or any S3-compatible store; ``gs://`` and ``az://`` likewise.
    Store options may also ride in the query: ``s3://b/q?endpoint_url=http://h:9000&allow_http=true``.
    ``gs://`` and ``az://`` take their credentials from the environment; of the store options,
    ``allow_http``, ``store_timeout`` and, on Azure, ``endpoint_url`` (Azurite, for one).

Object stores come wrapped in :class:`RetryingStore`: a request that hangs past
``store_timeout`` seconds (default 5) or meets a transient fault is sent again.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from obstore.store import MemoryStore, S3Store, from_url

from ..errors import InvalidConfig
from .base import AlreadyExists, Conflict, NotFound, Store, TransientError, levels_up
from .local import LocalStore
from .objectstore import DEFAULT_TIMEOUT, RETRY, ObjectStore, client_options
from .retry import RetryingStore

__all__ = [
    "STORE_OPTIONS",
    "AlreadyExists",
    "Conflict",
    "LocalStore",
    "NotFound",
    "RetryingStore",
    "Store",
    "StoreKind",
    "TransientError",
    "default_store",
    "open_store",
    "parent_url",
    "queue_name",
    "queue_url",
    "store_kind",
]

#: the keyword options of ``s3q.open`` that go to the store (also in a store URL's query)
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

_memory: dict[str, Any] = {}
_memory_lock = threading.Lock()


def queue_url(store: str, name: str) -> str:
    """The URL of queue ``name`` in ``store``; a store URL's query (its options) stays last."""
    if "://" in store:
        parts = urlsplit(store)
        return urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}/{name}"))
    return f"{store.rstrip('/')}/{name}"


#: where queues live when no store is named: ``./s3q-data`` (the command line, workers)
DEFAULT_STORE = "s3q-data"


def default_store() -> str:
    """The embedded default store: ``$S3Q_STORE``, else ``./s3q-data`` (absolute)."""
    return os.environ.get("S3Q_STORE") or os.path.abspath(DEFAULT_STORE)


def parent_url(url: str) -> str:
    """The URL of the folder holding the store at ``url`` (its options kept); InvalidConfig
    for a store at the root of its bucket."""
    if "://" not in url:
        return os.path.dirname(url.rstrip("/")) or "."
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if not path:
        raise InvalidConfig(f"{url} is at the root of its bucket: it has no parent folder")
    return urlunsplit(parts._replace(path=path.rpartition("/")[0]))


def queue_name(url: str) -> str:
    """The last part of a queue URL's path: the queue's name in its store (or on a broker)."""
    return urlsplit(url).path.rstrip("/").rpartition("/")[2]


def open_store(url: str, options: dict[str, Any] | None = None) -> Store:
    """The store a queue URL names, configured with the store options of ``s3q.open``."""
    given = dict(options or {})
    options = dict(given)
    if not isinstance(url, str) or not url:
        raise InvalidConfig(f"queue URL must be a non-empty string, got {url!r}")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in ("", "file") or (len(scheme) == 1 and url[1:3] == ":\\"):
        _no_options("a local directory", options)
        path = unquote(parts.path) if scheme == "file" else url
        if scheme == "file" and parts.netloc not in ("", "localhost"):
            raise InvalidConfig(f"file URLs take an absolute path (file:///dir), got {url!r}")
        return LocalStore(path)
    timeout = _timeout(options.pop("store_timeout", None))
    if scheme == "memory":
        _no_options("memory://", options)
        name = (parts.netloc + parts.path).strip("/")
        with _memory_lock:
            inner = _memory.setdefault(name, MemoryStore()) if name else MemoryStore()
        return _retrying(ObjectStore(inner, f"memory://{name}", _beside(url, given)), timeout)
    if scheme in ("s3", "s3a", *_FROM_URL):
        for name, value in parse_qsl(parts.query, keep_blank_values=True):
            if name not in STORE_OPTIONS:
                raise InvalidConfig(f"unknown store option {name!r} in {url!r}")
            if name == "store_timeout":
                timeout = _timeout(value)
                continue
            options.setdefault(name, _flag(value) if name == "allow_http" else value)
    if scheme in ("s3", "s3a"):
        store = _s3(parts.netloc, parts.path.strip("/"), options, timeout, _beside(url, given))
        return _retrying(store, timeout)
    if scheme in _FROM_URL:
        bare = urlunsplit(parts._replace(scheme=scheme, query="", fragment=""))
        return _retrying(_from_url(bare, options, timeout, _beside(url, given)), timeout)
    raise InvalidConfig(
        f"unsupported store URL {url!r}: use memory://NAME, file:///path, a path, "
        "s3://bucket/prefix, gs://bucket/prefix or az://container/prefix"
    )


StoreKind = Literal["directory", "memory", "object store"]


def store_kind(store: Store) -> StoreKind:
    """What ``store`` is: a local directory, memory, or an object store (S3, GCS, Azure), the
    one kind whose requests cost money and tens of milliseconds each."""
    if isinstance(store.base, LocalStore):
        return "directory"
    return "memory" if store.url.startswith("memory://") else "object store"


def _beside(url: str, options: dict[str, Any]) -> Callable[[str], Store]:
    """Opens the store ``name`` in the folder holding the queue at ``url`` (``Store.beside``),
    with the same ``options``."""

    def beside(name: str) -> Store:
        folder = url
        for _ in range(levels_up(urlsplit(url).path if "://" in url else url)):
            folder = parent_url(folder)
        return open_store(queue_url(folder, name), options)

    return beside


def _retrying(store: Store, timeout: float) -> RetryingStore:
    """Retried for twice the request timeout, and at least 10 s: long enough to ride out a
    hung request and a burst of 503s, short enough for a reader to hear of an outage."""
    return RetryingStore(store, patience=max(10.0, 2 * timeout))


def _timeout(value: object) -> float:
    if value is None:
        return DEFAULT_TIMEOUT
    try:
        seconds = float(value) if isinstance(value, str | int | float) else math.nan
    except ValueError:
        seconds = math.nan
    if isinstance(value, bool) or not math.isfinite(seconds) or seconds <= 0:
        raise InvalidConfig(f"store_timeout must be a number of seconds > 0, got {value!r}")
    return seconds


def _s3(
    bucket: str,
    prefix: str,
    options: dict[str, Any],
    timeout: float,
    beside: Callable[[str], Store],
) -> ObjectStore:
    if not bucket:
        raise InvalidConfig("s3 URLs name a bucket: s3://bucket/prefix")
    config: dict[str, Any] = {}
    for ours, theirs in (
        ("endpoint_url", "endpoint"),
        ("region", "region"),
        ("access_key_id", "access_key_id"),
        ("secret_access_key", "secret_access_key"),
        ("session_token", "token"),
    ):
        value = options.get(ours)
        if value is not None:
            if not isinstance(value, str) or not value:
                raise InvalidConfig(f"{ours} must be a non-empty string, got {value!r}")
            config[theirs] = value
    client = client_options(timeout)
    allow_http = options.get("allow_http")
    if allow_http is None and "AWS_ALLOW_HTTP" in os.environ:
        allow_http = _flag(os.environ["AWS_ALLOW_HTTP"])
    if allow_http is not None:
        if not isinstance(allow_http, bool):
            raise InvalidConfig(f"allow_http must be True or False, got {allow_http!r}")
        client["allow_http"] = allow_http
    try:
        inner = S3Store(
            bucket,
            prefix=prefix or None,
            client_options=client,  # type: ignore[arg-type]
            retry_config=RETRY,  # type: ignore[arg-type]
            **config,
        )
    except Exception as exc:
        raise InvalidConfig(f"cannot configure s3://{bucket}/{prefix}: {exc}") from exc
    return ObjectStore(inner, f"s3://{bucket}/{prefix}".rstrip("/"), beside)


#: Schemes obstore opens from the URL, with credentials from the environment.
_FROM_URL = ("gs", "az", "abfs", "abfss", "azure")


def _from_url(
    url: str, options: dict[str, Any], timeout: float, beside: Callable[[str], Store]
) -> ObjectStore:
    """GCS or Azure. Of the store options they take ``allow_http``, and Azure ``endpoint_url``
    too: the account's URL, which for Azurite is ``http://127.0.0.1:10000/devstoreaccount1``."""
    scheme = url.partition("://")[0]
    client = client_options(timeout)
    config: dict[str, Any] = {}
    if scheme != "gs" and "endpoint_url" in options:
        endpoint = options.pop("endpoint_url")
        if not isinstance(endpoint, str) or not endpoint:
            raise InvalidConfig(f"endpoint_url must be a non-empty string, got {endpoint!r}")
        config["endpoint"] = endpoint
    allow_http = options.pop("allow_http", None)
    if allow_http is not None:
        if not isinstance(allow_http, bool):
            raise InvalidConfig(f"allow_http must be True or False, got {allow_http!r}")
        client["allow_http"] = allow_http
    if options:
        raise InvalidConfig(
            f"{scheme}:// takes its credentials from the environment; "
            f"unsupported option(s): {', '.join(sorted(options))}"
        )
    try:
        inner = from_url(url, config=config, client_options=client, retry_config=RETRY)  # type: ignore[call-overload]
    except Exception as exc:
        raise InvalidConfig(f"cannot use {url!r}: {exc}") from exc
    return ObjectStore(inner, url, beside)


def _flag(text: str) -> bool | str:
    """``true``/``false`` (any case, or 1/0) as a bool; anything else stays text, to be refused."""
    return {"true": True, "1": True, "false": False, "0": False}.get(text.lower(), text)


def _no_options(what: str, options: dict[str, Any]) -> None:
    if options:
        raise InvalidConfig(f"{what} takes no store options, got {', '.join(sorted(options))}")
