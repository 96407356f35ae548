"""Where the command line finds its queues: the ``--store`` option, queue names resolved to
URLs inside the store, URLs printed without their secrets, and a queue opened for one command.

``--store`` means one thing in every command: the store root (a path or a URL) under which
queues live, each queue at ``<store>/<NAME>``.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

import click

import s3q

from ..config import Setting
from ..lease import opened_once
from ..store import DEFAULT_STORE, default_store, open_store, queue_url

if TYPE_CHECKING:
    from ..client import RemoteQueue

F = TypeVar("F", bound=Callable[..., Any])

STORE_HELP = "Store of the queues: a path, or a file://, s3://, gs://, az:// URL"


def store_option(command: F) -> F:
    """``--store URL``, else ``$S3Q_STORE``, else ``./s3q-data``: the store of the queues."""
    option = click.option(
        "--store",
        envvar="S3Q_STORE",
        metavar="URL",
        help=f"{STORE_HELP} [env S3Q_STORE; default: ./{DEFAULT_STORE}].",
    )
    return option(command)


def scratch_store_option(command: F) -> F:
    """``--store URL`` as :func:`store_option` means it, but neither ``$S3Q_STORE`` nor
    ``./s3q-data`` by default: the command (``s3q bench``) purges and floods its queue, so it
    works in a temporary directory unless a store is named on its command line."""
    option = click.option(
        "--store",
        metavar="URL",
        help=f"{STORE_HELP} [default: a temporary file:// directory].",
    )
    return option(command)


def store_root(store: str | None) -> str:
    """The store a command works in: ``--store``, else the default store."""
    return store or default_store()


def resolve(name: str, store: str | None) -> str:
    """The URL of queue NAME: ``<store>/<NAME>``, or NAME itself when it is a URL."""
    if "://" in name:
        return name
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts) or any(c in name for c in "?#\\"):
        raise click.BadParameter(
            f"{name!r} is not a queue name (letters, digits, '-', '_', '.', and '/' between "
            "parts); for a queue outside the store give its URL, e.g. file:///path/to/queue",
            param_hint="NAME",
        )
    return queue_url(store_root(store), name)


def shown(url: str) -> str:
    """A queue URL fit to print: without its query, which may hold credentials."""
    return urlunsplit(urlsplit(url)._replace(query="")) if "://" in url else url


def shown_command(argv: list[str]) -> str:
    """``s3q ARGS`` as run, minus the secrets a store URL in it may carry."""
    return re.sub(
        r"(secret_access_key|session_token)=[^&\s]*", r"\1=***", "s3q " + shlex.join(argv)
    )


def local_path(url: str) -> str | None:
    """The directory of a queue in a local store; None for object stores."""
    if "://" not in url:
        return url
    parts = urlsplit(url)
    return unquote(parts.path) if parts.scheme.lower() == "file" else None


@contextmanager
def opened(
    url: str, *, create: bool = False, settings: dict[str, Setting] | None = None
) -> Iterator[s3q.Queue | RemoteQueue]:
    """The queue at ``url``, opened as its writer, or through the broker of an ``http(s)://``
    store (with ``$S3Q_TOKEN``); a missing local queue is an error unless ``create``
    (reading a mistyped name must not create an empty queue). ``settings``: queue settings
    the open gives (saved with the queue), or the broker is asked to configure."""
    from ..client import TOKEN_ENV, connect, is_broker_url, split_queue_url

    if is_broker_url(url):
        broker, name = split_queue_url(url)
        with connect(broker, token=os.environ.get(TOKEN_ENV)) as client:
            queue = client.queue(name)
            if settings:
                queue.configure(**settings)
            yield queue
        return
    path = local_path(url)
    if not create and path is not None and not os.path.isdir(path):
        raise click.ClickException(
            f"no queue at {url}: check NAME and --store (enqueue and create make a queue)"
        )
    with s3q.open(url, **(settings or {})) as q:
        yield q


def exists(url: str) -> bool:
    """Whether the store holds the queue at ``url`` (it was opened once); nothing is written."""
    from ..client import TOKEN_ENV, QueueNotFound, connect, is_broker_url, split_queue_url

    if is_broker_url(url):
        broker, name = split_queue_url(url)
        with connect(broker, token=os.environ.get(TOKEN_ENV)) as client:
            try:
                client.queue(name).stats()  # a read: the broker does not create the queue
            except QueueNotFound:
                return False
            return True
    path = local_path(url)
    if path is not None:
        return os.path.isdir(path)
    return asyncio.run(_leased(url))


async def _leased(url: str) -> bool:
    """Whether the object store of ``url`` holds the queue's writer lease: one GET."""
    store = open_store(url)
    try:
        return await opened_once(store)
    finally:
        await store.close()
