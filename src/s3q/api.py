"""The embedded queue: ``s3q.open`` (blocking) and ``s3q.open_async`` (coroutines)."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import threading
import weakref
from collections.abc import Callable, Coroutine, Iterable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, cast

from . import tracing, validate
from .blocking import blocking
from .config import (
    MAX_DEQUEUE,
    MAX_PER_GROUP,
    MAX_VISIBILITY,
    PERSISTED,
    QueueConfig,
    Setting,
    split_options,
)
from .errors import InvalidArgument, InvalidConfig, S3QError
from .log.staging import StagedObject
from .message import CompactionReport, Message, MessageStatus, QueueStats
from .partitions import placement
from .partitions.queue import PartitionedQueue
from .snapshot import Loaded, Located
from .store import open_store
from .store.base import Counts
from .surface import AsyncQueueSurface, Target, documented
from .wire.pages import Pages
from .writer.engine import Engine
from .writer.leasing import Take

T = TypeVar("T")


async def open_async(url: str, **options: Any) -> AsyncQueue | PartitionedQueue:
    """Open the queue at ``url`` as its writer, in the running event loop.

    ``url``: ``memory://NAME``, ``file:///path`` or a path, ``s3://bucket/prefix``, ``gs://…``,
    ``az://…``. ``options``: the fields of :class:`~s3q.config.QueueConfig` and the store options
    (S3: ``endpoint_url``, ``region``, ``access_key_id``, ``secret_access_key``,
    ``session_token``, ``allow_http``; Azure: ``endpoint_url``, ``allow_http``; GCS:
    ``allow_http``; credentials otherwise from the environment). Queue settings given here
    (``max_attempts``, ``visibility_timeout``, …) are saved with the queue and stay in force for
    later opens that do not give them. ``partitions=N``, given before the queue's first
    message, spreads it over N logs, each with a writer of its own: it opens as a
    :class:`~s3q.partitions.queue.PartitionedQueue`,
    which offers what an AsyncQueue does.
    """
    first = await open_log(url, **options)
    count = first.config.partitions
    if count == 1:
        return first
    return await _open_partitions(first, url, options, count)


async def open_log(url: str, since: Loaded | None = None, **options: Any) -> AsyncQueue:
    """The one log at ``url``, opened as its writer, as :func:`open_async` does: partition 0
    alone, for a queue of several partitions (a broker opens each where it leads it).
    ``since``: its index as read ahead of the open (``snapshot.load``), read on from."""
    config, store_options, settings = split_options(options)
    store = open_store(url, store_options)
    return AsyncQueue(await Engine.open(store, config, settings, since))


async def _open_partitions(
    first: AsyncQueue, url: str, options: dict[str, Any], count: int
) -> PartitionedQueue:
    """The partitions of the queue at ``url`` (``first``: partition 0), each opened as its
    writer, served as one queue; every one closed again if one cannot be opened."""
    rest = {k: v for k, v in options.items() if k != "partitions"}
    opened = await asyncio.gather(
        *(open_log(placement.url_of(url, i), **rest) for i in range(1, count)),
        return_exceptions=True,
    )
    queues = [first, *(q for q in opened if isinstance(q, AsyncQueue))]
    failure = next((e for e in opened if isinstance(e, BaseException)), None)
    if failure is None:
        queue = PartitionedQueue(url, queues)
        try:
            await queue.settle()  # the partitions of a queue behave alike
            return queue
        except BaseException as exc:
            failure = exc
    for each in queues:
        with contextlib.suppress(Exception):
            await each.close()
    raise failure


def _dequeue_args(
    max_messages: int,
    visibility_timeout: float | None,
    wait: float,
    per_group: int,
    complete: Iterable[Target],
) -> Take:
    """A dequeue's arguments, checked."""
    validate.count("max_messages", max_messages, 1, MAX_DEQUEUE)
    validate.count("per_group", per_group, 1, MAX_PER_GROUP)
    if visibility_timeout is not None:
        visibility_timeout = validate.visibility("visibility_timeout", visibility_timeout)
    receipts = [validate.receipt_of(t) for t in complete]
    return Take(max_messages, visibility_timeout, validate.wait(wait), per_group, receipts)


@documented  # the docstrings of the queue's methods: s3q.surface
class AsyncQueue:
    """A queue opened by :func:`open_async`. Every method is a coroutine."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    @property
    def url(self) -> str:
        return self._engine.store.url

    @property
    def config(self) -> QueueConfig:
        """The configuration in force: the options of the open, the saved settings applied."""
        return self._engine.config

    @property
    def requests(self) -> Counts:
        """The store requests this queue object has made since it opened, by kind (they go on
        counting; ``stats()`` gives the same figures)."""
        return self._engine.store.counts

    @property
    def stopped(self) -> S3QError | None:
        """Why this queue's writer stopped (another writer took the queue over), if it did:
        then every call raises it, and the queue must be reopened."""
        return self._engine.failure

    def writing_since(self) -> float | None:
        """When this writer's log object in flight began to be written (``time.monotonic``);
        None if none is, so a call made now is written at once. How a partitioned queue
        chooses the partition of a message that may go to any: the one whose next write
        leaves soonest."""
        return self._engine.writing_since()

    def best_priority(self) -> int | None:
        """The highest priority of the messages a dequeue would deliver now; None if it would
        deliver none, or if priorities share deliveries (``delivery="fair"``). How a
        partitioned queue chooses which of its partitions to take from first."""
        return self._engine.best_priority()

    @property
    def writer(self) -> str:
        """This open's writer token, new at each open of the queue: what a broker's answers
        name in their ``s3q-writer`` header (``s3q.wire.answers``)."""
        return self._engine.token

    def on_commit(self, listener: Callable[[float, int], None]) -> None:
        """Call ``listener(seconds, operations)`` after each durable commit of the queue's
        writer (for metrics: commit latency and group-commit batch size). It runs on the
        writer's event loop and must be quick."""
        self._engine.commit_listeners.append(listener)

    async def enqueue(
        self,
        payload: bytes,
        priority: int = 0,
        delay: float = 0.0,
        dedup_id: str | None = None,
        group: str | None = None,
        attributes: dict[str, str] | None = None,
        *,
        durability: str | None = None,
        tenant: str | None = None,
    ) -> str:
        validate.durability(durability)
        item = validate.item(
            payload,
            priority,
            delay,
            dedup_id,
            group,
            attributes,
            tenant,
            max_size=self.config.max_message_size,
            max_delay=self.config.max_delay,
        )
        publish = tracing.publishing(self.url, (item.attributes,))
        if publish is not None:
            return (await self._traced([item], durability, publish))[0]
        return (await self._engine.enqueue([item], durability))[0]

    async def enqueue_batch(
        self, items: Iterable[bytes | dict[str, Any]], *, durability: str | None = None
    ) -> list[str]:
        validate.durability(durability)
        if isinstance(items, bytes | str | dict):
            raise InvalidArgument("enqueue_batch takes a list of payloads or dicts")
        max_size, max_delay = self.config.max_message_size, self.config.max_delay
        if isinstance(items, list) and validate.plain_payloads(items, max_size):
            publish = tracing.publishing(self.url, (None,), len(items))
            if publish is None:
                return await self._engine.enqueue_payloads(items, durability)
        else:
            publish = None
        checked = [validate.item_of(it, max_size, max_delay) for it in items]
        if not checked:
            return []
        if publish is None:
            publish = tracing.publishing(self.url, (it.attributes for it in checked), len(checked))
        if publish is not None:
            return await self._traced(checked, durability, publish)
        return await self._engine.enqueue(checked, durability)

    async def _traced(
        self, items: list[validate.Item], durability: str | None, publish: tracing.Publish
    ) -> list[str]:
        """``items`` enqueued in ``publish``'s span, each carrying its trace context."""
        for item in items:
            item.attributes = publish.stamp(item.attributes)
        return await publish.send(self._engine.enqueue(items, durability))

    async def enqueue_staged(
        self, objects: Iterable[StagedObject], token: str | None = None
    ) -> Sequence[str] | None:
        if token is not None and (not isinstance(token, str) or not token):
            raise InvalidArgument(f"token must be a non-empty string, got {token!r}")
        return await self._engine.enqueue_staged(list(objects), token)

    async def lease(
        self, max_messages: int = 1, visibility_timeout: float | None = None
    ) -> list[Located]:
        """Lease up to ``max_messages`` like ``dequeue`` (no waiting), leaving their payloads
        where they lie: each comes with its location for a reader of the store to fetch."""
        validate.count("max_messages", max_messages, 1, MAX_DEQUEUE)
        if visibility_timeout is not None:
            visibility_timeout = validate.visibility("visibility_timeout", visibility_timeout)
        return await self._engine.lease(max_messages, visibility_timeout)

    async def locate(self, ids: Iterable[str]) -> dict[str, Located]:
        """The messages named that are not completed, and where their payloads lie now."""
        return await self._engine.locate(list(ids))

    async def dequeue(
        self,
        max_messages: int = 1,
        visibility_timeout: float | None = None,
        wait: float = 0.0,
        *,
        per_group: int = 1,
        complete: Iterable[Target] = (),
    ) -> list[Message]:
        return await self._engine.dequeue(
            _dequeue_args(max_messages, visibility_timeout, wait, per_group, complete)
        )

    async def dequeue_pages(
        self,
        max_messages: int = 1,
        visibility_timeout: float | None = None,
        wait: float = 0.0,
        *,
        per_group: int = 1,
        complete: Iterable[Target] = (),
    ) -> Pages:
        """``dequeue``, with each stretch of consecutive messages as one page of payloads
        (``s3q.wire.pages``): what a broker answers with, without a Message per message."""
        return await self._engine.dequeue_pages(
            _dequeue_args(max_messages, visibility_timeout, wait, per_group, complete)
        )

    async def complete(self, target: Target) -> None:
        await self._engine.complete([validate.receipt_of(target)])

    async def complete_batch(self, targets: Iterable[Target]) -> None:
        receipts = [validate.receipt_of(t) for t in targets]
        if receipts:
            await self._engine.complete(receipts)

    async def fail(self, target: Target, error: str | None = None) -> float | None:
        return await self._engine.fail(validate.receipt_of(target), validate.error_text(error))

    async def release(self, targets: Target | Iterable[Target]) -> None:
        items = [targets] if isinstance(targets, Message | str) else list(targets)
        receipts = [validate.receipt_of(t) for t in items]
        if receipts:
            await self._engine.release(receipts)

    async def extend(self, target: Target, seconds: float, *, revive: bool = False) -> None:
        receipt = validate.receipt_of(target)
        limit = validate.seconds("seconds", seconds, MAX_VISIBILITY)
        await self._engine.extend(receipt, limit, validate.flag("revive", revive))

    async def changed(self, timeout: float) -> None:
        """Wait until the queue changes (a commit, a delay or lease running out: a dequeue
        might now find a message), at most ``timeout`` seconds; for a caller that long-polls
        several queues at once (``s3q.partitions``)."""
        await self._engine.changed(timeout)

    @property
    def queue_id(self) -> str:
        """What the ids of this queue's messages begin with (``s3q.log.ids``)."""
        return self._engine.state.queue

    def stop_waiting(self) -> None:
        """End every long poll of ``dequeue`` now with what is there, and make later ones
        answer at once (a server shutting down lets its requests finish)."""
        self._engine.stop_waiting()

    async def status(self, id: str) -> MessageStatus:
        if not isinstance(id, str):
            raise InvalidArgument(f"id must be a string, got {type(id).__name__}")
        return await self._engine.status(id)

    async def stats(self) -> QueueStats:
        return await self._engine.stats()

    async def peek(self, limit: int = 10) -> list[Message]:
        return await self._engine.peek(validate.count("limit", limit, 1, MAX_DEQUEUE))

    async def dead_letters(self, limit: int = 100) -> list[Message]:
        return await self._engine.dead_letters(validate.count("limit", limit, 1, MAX_DEQUEUE))

    async def redrive(self, ids: Iterable[str] | None = None) -> int:
        return await self._engine.redrive(None if ids is None else validate.ids(ids, "redrive"))

    async def discard(self, ids: Iterable[str]) -> int:
        return await self._engine.discard(validate.ids(ids, "discard"))

    async def configure(self, /, **settings: Any) -> dict[str, Setting]:
        return await self._engine.configure(_settings(settings))

    async def cleanup(self) -> int:
        return await self._engine.cleanup()

    async def purge(self) -> int:
        return await self._engine.purge()

    async def compact(self) -> CompactionReport:
        return await self._engine.compact()

    async def close(self) -> None:
        await self._engine.close()

    async def __aenter__(self) -> AsyncQueue:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<s3q.AsyncQueue {self.url}>"


if TYPE_CHECKING:  # mypy checks that AsyncQueue offers the whole surface
    _embedded: type[AsyncQueueSurface] = AsyncQueue


def _settings(settings: dict[str, Any]) -> dict[str, Setting]:
    unknown = set(settings) - set(PERSISTED)
    if unknown:
        raise InvalidConfig(
            f"not queue setting(s): {', '.join(sorted(unknown))}; known: {', '.join(PERSISTED)}"
        )
    return settings


#: Seconds an interrupted call is given to unwind (a dequeue to stop waiting, an open to give
#: its lease back, a close to finish) before the caller's KeyboardInterrupt goes on; a second
#: Ctrl-C cuts the wait short. And the seconds the loop is given to stop.
UNWIND_SECONDS = 30.0


async def _tracked(coro: Coroutine[Any, Any, T], finished: threading.Event) -> T:
    try:
        return await coro
    finally:
        finished.set()


class _LoopThread:
    """An event loop on a thread of its own, to run a queue behind a blocking API."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="s3q-queue", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], *, cancel: bool = True) -> T:
        """``coro``'s result. Interrupted (Ctrl-C, or any exception raised in this thread while
        it waits), the call is cancelled (``cancel``) or left to finish, and given time to
        unwind, rather than left running unseen."""
        finished = threading.Event()
        future = asyncio.run_coroutine_threadsafe(_tracked(coro, finished), self.loop)
        try:
            return future.result()
        except BaseException:
            if not future.done():
                if cancel:
                    future.cancel()
                finished.wait(UNWIND_SECONDS)
            raise

    def stop(self) -> None:
        """Stop the loop; a loop stuck in a call (it cannot be stopped) is left to its daemon
        thread, so that a program can always exit."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(UNWIND_SECONDS)
        if not self._thread.is_alive():
            self.loop.close()


_open_queues: weakref.WeakSet[Queue] = weakref.WeakSet()


def open(url: str, **options: Any) -> Queue:
    """Open the queue at ``url`` as its writer. See :func:`open_async` for the arguments."""
    runner = _LoopThread()
    made: list[Queue] = []

    async def open_queue() -> Queue:
        # made on the loop's thread the moment it is open, so that a Ctrl-C landing just
        # then, before this returns, still finds it to close
        queue = Queue(await open_async(url, **options), runner)
        made.append(queue)
        _open_queues.add(queue)
        return queue

    try:
        return runner.run(open_queue())
    except BaseException:
        if made:
            with contextlib.suppress(Exception):
                made[0].close()
        else:
            runner.stop()
        raise


@documented
class Queue:
    """A queue opened by :func:`open`; the same methods as :class:`AsyncQueue`, blocking (each
    runs the coroutine of :attr:`async_queue` on the queue's event-loop thread)."""

    def __init__(self, aq: AsyncQueue | PartitionedQueue, runner: _LoopThread) -> None:
        # (a PartitionedQueue offers every coroutine of AsyncQueue that this class runs)
        self._aq = cast(AsyncQueue, aq)
        self._runner: _LoopThread | None = runner

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._runner is None:
            coro.close()
            from .errors import QueueClosed

            raise QueueClosed(f"queue {self.url} is closed")
        return self._runner.run(coro)

    @property
    def url(self) -> str:
        return self._aq.url

    @property
    def config(self) -> QueueConfig:
        """The configuration in force: the options of the open, the saved settings applied."""
        return self._aq.config

    @property
    def async_queue(self) -> AsyncQueue:
        """The :class:`AsyncQueue` behind this queue; await its methods only on :attr:`loop`."""
        return self._aq

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop (on a thread of its own) this queue runs on; None once closed."""
        return None if self._runner is None else self._runner.loop

    # the coroutines of AsyncQueue, blocking (s3q.blocking): parameters, results, docstrings
    enqueue = blocking(AsyncQueue.enqueue)
    enqueue_batch = blocking(AsyncQueue.enqueue_batch)
    enqueue_staged = blocking(AsyncQueue.enqueue_staged)
    lease = blocking(AsyncQueue.lease)
    locate = blocking(AsyncQueue.locate)
    dequeue = blocking(AsyncQueue.dequeue)
    dequeue_pages = blocking(AsyncQueue.dequeue_pages)
    complete = blocking(AsyncQueue.complete)
    complete_batch = blocking(AsyncQueue.complete_batch)
    fail = blocking(AsyncQueue.fail)
    release = blocking(AsyncQueue.release)
    extend = blocking(AsyncQueue.extend)
    status = blocking(AsyncQueue.status)
    stats = blocking(AsyncQueue.stats)
    peek = blocking(AsyncQueue.peek)
    dead_letters = blocking(AsyncQueue.dead_letters)
    redrive = blocking(AsyncQueue.redrive)
    discard = blocking(AsyncQueue.discard)
    configure = blocking(AsyncQueue.configure)
    cleanup = blocking(AsyncQueue.cleanup)
    purge = blocking(AsyncQueue.purge)
    compact = blocking(AsyncQueue.compact)

    def close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is None:
            return
        try:
            runner.run(self._aq.close(), cancel=False)  # bounded by commit_timeout
        finally:
            runner.stop()
            _open_queues.discard(self)

    def __enter__(self) -> Queue:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<s3q.Queue {self.url}>"


@atexit.register
def _close_open_queues() -> None:
    """Release the lease of queues a program forgot to close, so the next open need not wait."""
    for queue in list(_open_queues):
        with contextlib.suppress(Exception):
            queue.close()
