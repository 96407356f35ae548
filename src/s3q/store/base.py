"""The one small interface every object store adapter implements."""

from __future__ import annotations

import abc
from dataclasses import dataclass

from ..errors import InvalidConfig, S3QError, TransientError

__all__ = [
    "AlreadyExists",
    "Conflict",
    "Counts",
    "NotFound",
    "Store",
    "TransientError",
    "WrappingStore",
]


class AlreadyExists(S3QError):
    """A create-if-absent write found the key taken."""


class NotFound(S3QError):
    """The key does not exist."""


class Conflict(S3QError):
    """A compare-and-swap write found another version than expected."""


@dataclass
class Counts:
    """Requests sent to a store, by kind; bytes written; requests that failed; retries."""

    puts: int = 0
    gets: int = 0
    lists: int = 0
    deletes: int = 0
    bytes_written: int = 0
    errors: int = 0
    retries: int = 0

    @property
    def requests(self) -> int:
        return self.puts + self.gets + self.lists + self.deletes

    def add(self, other: Counts) -> None:
        """Count ``other``'s requests in with these."""
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


#: the folder, inside a queue's, of its partitions ``1..N-1`` (``s3q.partitions``)
PARTITIONS = "partitions"


def levels_up(path: str) -> int:
    """How many levels above the store at ``path`` lies the folder holding its queue: 1, or 3
    for a partition of a queue (``<queue>/partitions/<i>``)."""
    parts = path.rstrip("/").split("/")
    return 3 if len(parts) >= 3 and parts[-2] == PARTITIONS and parts[-1].isdigit() else 1


class Store(abc.ABC):
    """Immutable objects by key, plus create-if-absent and compare-and-swap.

    Keys are relative to the store's root (the queue's prefix) and use ``/`` as separator.
    Every method raises :class:`~s3q.errors.StoreError` when the store fails or refuses access
    (:class:`TransientError` when trying again may help; :class:`~s3q.errors.StoreFull` when a
    write found no room, and was not made). A write tried again after a
    transient fault may meet its own first attempt: ``put_new`` then raises
    :class:`AlreadyExists` and ``put_versioned`` :class:`Conflict`, and the caller tells its
    own object from a rival's by the content. ``counts`` are shared with wrapping stores.
    """

    def __init__(self) -> None:
        self.counts = Counts()

    @property
    def base(self) -> Store:
        """The adapter under any wrappers (retries, injected faults)."""
        return self

    @property
    def tears(self) -> bool:
        """Whether an OS crash may leave a new object linked but not written (a local store
        that fsyncs a file and its link together); elsewhere a write is whole or absent."""
        return False

    @property
    @abc.abstractmethod
    def url(self) -> str:
        """Where the store lives, for messages (no credentials)."""

    @abc.abstractmethod
    async def put_new(self, key: str, data: bytes | bytearray) -> None:
        """Write ``data`` at ``key`` only if nothing is there; durable when it returns.

        Raises :class:`AlreadyExists` when the key is taken.
        """

    @abc.abstractmethod
    async def put(self, key: str, data: bytes | bytearray) -> None:
        """Write ``data`` at ``key``, replacing what is there; durable when it returns."""

    @abc.abstractmethod
    async def get(self, key: str) -> bytes:
        """The whole object at ``key``; :class:`NotFound` if absent."""

    @abc.abstractmethod
    async def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``start`` (inclusive) to ``end`` (exclusive) of the object at ``key``."""

    @abc.abstractmethod
    async def get_tail(self, key: str, size: int) -> bytes:
        """The last ``size`` bytes of the object at ``key`` (all of it, if it is shorter)."""

    @abc.abstractmethod
    async def keys(self, prefix: str, after: str | None = None) -> list[str]:
        """Sorted keys that start with ``prefix`` and sort after ``after`` if given."""

    @abc.abstractmethod
    async def usage(self) -> tuple[int, int]:
        """How many objects the store holds under its root, and their total bytes."""

    @abc.abstractmethod
    async def delete(self, key: str) -> None:
        """Remove ``key``; absent keys are fine."""

    @abc.abstractmethod
    async def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        """The object at ``key`` and an opaque version token, or None if absent."""

    @abc.abstractmethod
    async def put_versioned(self, key: str, data: bytes, version: str | None) -> str:
        """Write ``key`` if its version is still ``version`` (None: if absent); new version.

        Raises :class:`Conflict` when another write got there first.
        """

    def beside(self, name: str) -> Store:
        """The store ``name`` next to this queue's (in the folder holding the queue, or, for a
        partition of a queue, the queue's: :func:`levels_up`), reached the same way: where a
        broker keeps the lease that its queues' leases ride on. InvalidConfig if there is no
        such folder."""
        raise InvalidConfig(f"{self.url} has no parent folder to hold {name}")

    def _wrote(self, data: bytes | bytearray) -> None:
        self.counts.puts += 1
        self.counts.bytes_written += len(data)

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the adapter holds."""


class WrappingStore(Store):
    """A store in front of ``inner`` (retries, injected faults): same URL, same counts."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.counts = inner.counts

    @property
    def url(self) -> str:
        return self.inner.url

    @property
    def base(self) -> Store:
        return self.inner.base

    def beside(self, name: str) -> Store:
        return self.inner.beside(name)

    async def close(self) -> None:
        await self.inner.close()
