"""One partition as a partitioned queue reaches it: led in this process, or reached through
its leader; and calls made in several partitions at once (all or none in each, not across)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol, TypeVar, cast, runtime_checkable

from ..config import QueueConfig
from ..errors import OutcomeUnknown, S3QError
from ..snapshot import Located
from ..store.base import Counts
from ..surface import AsyncQueueSurface, Target
from ..wire.pages import Pages

T = TypeVar("T")


@runtime_checkable
class Paging(Protocol):
    """A queue that answers a dequeue as pages (``s3q.wire.pages``): led here, or its leader's."""

    async def dequeue_pages(
        self,
        max_messages: int = 1,
        visibility_timeout: float | None = None,
        wait: float = 0.0,
        *,
        per_group: int = 1,
        complete: Iterable[Target] = (),
    ) -> Pages: ...


@runtime_checkable
class Led(Paging, Protocol):
    """A partition led in this process (an ``s3q.AsyncQueue``): waited on without a lease."""

    @property
    def config(self) -> QueueConfig: ...

    @property
    def requests(self) -> Counts: ...

    @property
    def stopped(self) -> S3QError | None: ...

    def on_commit(self, listener: Callable[[float, int], None]) -> None: ...

    async def lease(
        self, max_messages: int = 1, visibility_timeout: float | None = None
    ) -> list[Located]: ...

    async def locate(self, ids: Iterable[str]) -> dict[str, Located]: ...

    async def changed(self, timeout: float) -> None: ...

    def stop_waiting(self) -> None: ...

    def best_priority(self) -> int | None: ...

    def writing_since(self) -> float | None: ...


@runtime_checkable
class Followed(Protocol):
    """A partition reached wherever its writer is (a broker's ``ForwardedQueue``)."""

    @property
    def here(self) -> Led | None:
        """The partition, if its writer is in this process now."""


class Partition:
    """One partition as the partitioned queue reaches it."""

    __slots__ = ("_followed", "_led", "index", "paging", "queue", "queue_id")

    def __init__(self, index: int, queue: AsyncQueueSurface, queue_id: str = "") -> None:
        self.index = index
        self.queue = queue
        self.queue_id = queue_id  # what its ids begin with, once known
        # (checks against runtime protocols are slow: made once)
        self._followed = queue if isinstance(queue, Followed) else None
        self._led = queue if isinstance(queue, Led) else None
        self.paging = queue if isinstance(queue, Paging) else None  # answers pages as they are

    @property
    def led(self) -> Led | None:
        """The partition, if it is led in this process (now: a broker's partition is where
        its writer is, and moves)."""
        if self._followed is not None:
            return self._followed.here
        return self._led


async def in_each(what: str, calls: dict[Partition, Awaitable[T]]) -> list[T]:
    """The answers of ``calls``, one per partition, made at once (see :func:`judged`)."""
    return cast("list[T]", judged(what, await outcomes(calls)))


async def outcomes(calls: dict[Partition, Awaitable[T]]) -> dict[Partition, object]:
    """What each of ``calls`` answered, or the exception it raised; made at once."""
    answers = await asyncio.gather(*calls.values(), return_exceptions=True)
    return dict(zip(calls, answers, strict=True))


async def outcome(call: Awaitable[object]) -> object:
    """None, or the exception ``call`` raised."""
    try:
        await call
    except Exception as exc:
        return exc
    return None


def judged(what: str, outcomes: dict[Partition, object]) -> list[object]:
    """The answers of a call made in several partitions, in their order, if none failed.
    Each partition is all or none, the whole is not: if some failed and others did not,
    OutcomeUnknown, which names them, rather than the failure, which a caller would take for
    "nothing was done" (and a client would send again, to partitions that had done it)."""
    failed = [(part, a) for part, a in outcomes.items() if isinstance(a, BaseException)]
    if not failed:
        return list(outcomes.values())
    for _, error in failed:
        if not isinstance(error, Exception):
            raise error  # (cancelled)
    first = next((e for _, e in failed if isinstance(e, OutcomeUnknown)), failed[0][1])
    if len(failed) == len(outcomes):
        raise first  # (nothing done anywhere, unless a partition's outcome is unknown)
    done = sorted(part.index for part, a in outcomes.items() if not isinstance(a, BaseException))
    raise OutcomeUnknown(
        f"{what} was done in partitions {done} of the queue but not in "
        f"{sorted(part.index for part, _ in failed)} ({type(first).__name__}: {first}): each "
        "partition is all or none, a batch over several is not"
    ) from first
