"""The consumers of a kombu connection, on an event loop of the process's own thread: the
queues it consumes (each a :class:`Feed`: messages pushed by a broker's subscription, or
long-polled), the leases they hold, and their settles.

kombu calls the transport from its own threads (Celery's event loop, a pool's threads) and
those calls return at once: an ack is handed to the loop, which sends the acks of one turn
of it together. Messages that arrive go into :attr:`Pump.inbox`, and a byte on a pipe
(:attr:`Pump.fileno`) tells the consumer's side, which Celery's event loop watches (or
``drain_events`` waits on). Every lease handed out is renewed here while it is held (a task
waiting for a pool's slot, or running with ``acks_late``), so a long task is not delivered
twice; a consumer that dies gives its leases back (its broker does, when the subscription's
channel closes). One loop thread serves every connection of the process
(:func:`shared_loop`), and the queues it opens embedded."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, Protocol, TypeVar

from ..errors import InvalidArgument, QueueLocked, ReceiptExpired, S3QError
from ..message import Message
from ..wire.codec import AuthError
from .sources import Settle, Source

__all__ = ["FATAL", "Feed", "Held", "LoopThread", "Opener", "Pump", "shared_loop"]

log = logging.getLogger("s3q.celery")

T = TypeVar("T")

#: errors that no retry mends: the consumer stops and Celery is told
FATAL = (AuthError, InvalidArgument, QueueLocked)
BACKOFF_FIRST, BACKOFF_MOST = 0.1, 5.0  # seconds between attempts to open a feed again
GIVE_BACK_WITHIN = 10.0  # seconds a blocking give-back (kombu's restore) may take


class Opener(Protocol):
    """Where feeds find their sources (:mod:`.backends`), on the pump's loop."""

    async def source(
        self,
        name: str,
        prefetch: int,
        visibility_timeout: float,
        roomy: Callable[[], Awaitable[None]],
    ) -> Source:
        """A source of queue ``name``'s messages (a subscription, or long polls)."""

    async def aclose(self) -> None:
        """Let go of everything opened on the loop."""


class Held:
    """A lease a feed handed out: its feed, the source to settle it with, when it ends."""

    __slots__ = ("deadline", "feed", "source")

    def __init__(self, feed: Feed, source: Source, deadline: float) -> None:
        self.feed = feed
        self.source = source
        self.deadline = deadline


class Feed:
    """A queue consumed: kombu's name for it (``key``), s3q's (``name``), its prefetch, and the
    receipts of the leases it holds. Its source is opened again when it breaks."""

    def __init__(self, pump: Pump, key: str, name: str, prefetch: int) -> None:
        self.pump = pump
        self.key = key
        self.name = name
        self.prefetch = prefetch
        self.held: set[str] = set()
        self.cancelled = False  # (set by the consumer's thread too: read by both)
        self.source: Source | None = None
        self.sources: list[Source] = []  # opened, not closed yet
        self.task: asyncio.Task[None] | None = None
        self.owner: Any = None  # the kombu channel consuming it
        self._room = asyncio.Event()

    async def roomy(self) -> None:
        """Wait until a lease is settled (a long poll's feed holding its prefetch)."""
        self._room.clear()
        await self._room.wait()

    def freed(self, receipt: str) -> None:
        self.held.discard(receipt)
        self._room.set()

    async def run(self) -> None:
        backoff = BACKOFF_FIRST
        while not self.cancelled:
            try:
                source = await self.pump.opener.source(
                    self.name, self.prefetch, self.pump.visibility_timeout, self.roomy
                )
            except FATAL as exc:
                self.pump.failed(exc)
                return
            except Exception as exc:
                log.warning("consuming %s: %s: %s; again", self.name, type(exc).__name__, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MOST)
                continue
            self.source = source
            self.sources.append(source)
            try:
                while not self.cancelled:
                    got = await source.take(self.prefetch - len(self.held))
                    if got:
                        backoff = BACKOFF_FIRST
                        self.pump.arrived(self, source, got)
            except FATAL as exc:
                self.pump.failed(exc)
                return
            except Exception as exc:
                if self.cancelled:
                    return
                log.warning("consuming %s: %s: %s; again", self.name, type(exc).__name__, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MOST)
            await self.pump.retire(self, source)

    async def set_prefetch(self, prefetch: int) -> None:
        self.prefetch = prefetch
        self._room.set()
        if self.source is not None:
            with contextlib.suppress(S3QError):
                await self.source.set_prefetch(prefetch)


class LoopThread:
    """An asyncio event loop running on a daemon thread of its own."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="s3q-celery", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def alive(self) -> bool:
        return os.getpid() == self.pid and self._thread.is_alive()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (from another thread)."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise


_shared: LoopThread | None = None
_shared_lock = threading.Lock()


def _forked() -> None:
    global _shared, _shared_lock
    _shared, _shared_lock = None, threading.Lock()  # (the parent's thread is not the child's)


os.register_at_fork(after_in_child=_forked)


def shared_loop() -> LoopThread:
    """This process's loop thread, which every connection's pump and every embedded queue use
    (started on first need; a forked child starts its own)."""
    global _shared
    with _shared_lock:
        if _shared is None or not _shared.alive:
            _shared = LoopThread()
        return _shared


class Pump:
    """The consumers of one kombu connection (see the module's docstring), on this process's
    loop thread. ``opener`` finds the feeds' sources; ``visibility_timeout``: each lease,
    renewed while held."""

    def __init__(self, opener: Opener, visibility_timeout: float) -> None:
        self.opener = opener
        self.visibility_timeout = visibility_timeout
        self.inbox: collections.deque[tuple[Feed, Message]] = collections.deque()
        self.error: BaseException | None = None  # a fatal one: the consumer raises it
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._poked = False
        self._held: dict[str, Held] = {}  # by receipt; the loop's alone
        self._pending: dict[tuple[Source, Settle], list[str]] = {}
        self._tasks: set[asyncio.Future[Any]] = set()
        self._feeds: set[Feed] = set()
        self._inflight: dict[Source, set[asyncio.Future[Any]]] = {}
        self._extending: set[str] = set()  # receipts whose renewal is under way
        self._settles: collections.deque[tuple[str, Settle, str | None]] = collections.deque()
        self._settles_due = False  # the loop has been asked to take them
        self._thread = shared_loop()
        self.loop = self._thread.loop
        self._keeper = self.call(self._start_keeper())

    async def _start_keeper(self) -> asyncio.Task[None]:
        return asyncio.create_task(self._keep(), name="s3q-celery-leases")

    # -- from kombu's threads ------------------------------------------------------------------

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result."""
        return self._thread.call(coro, timeout)

    @property
    def fileno(self) -> int:
        """Readable when :attr:`inbox` has news (or :attr:`error` is set)."""
        return self._r

    def taken(self) -> None:
        """The consumer's side is about to read :attr:`inbox`: the next arrival pokes again."""
        with contextlib.suppress(BlockingIOError):
            while os.read(self._r, 4096):
                pass
        self._poked = False

    def poke(self) -> None:
        if not self._poked:
            self._poked = True
            with contextlib.suppress(BlockingIOError):
                os.write(self._w, b"!")

    def consume(self, key: str, name: str, prefetch: int, owner: Any) -> Feed:
        """Start consuming s3q queue ``name`` (kombu's ``key``) for ``owner`` (a channel),
        holding up to ``prefetch``."""

        async def start() -> Feed:
            feed = Feed(self, key, name, prefetch)
            feed.owner = owner
            self._feeds.add(feed)
            feed.task = asyncio.create_task(feed.run(), name=f"s3q-celery-feed-{name}")
            return feed

        return self.call(start())

    def cancel(self, feed: Feed, undelivered: list[str]) -> None:
        """Stop ``feed``: ``undelivered`` (in the inbox, never handed to kombu) go back now, the
        rest when kombu settles them; then its sources close."""
        feed.cancelled = True
        self.loop.call_soon_threadsafe(self._cancel, feed, undelivered)

    def set_prefetch(self, feed: Feed, prefetch: int) -> None:
        self.loop.call_soon_threadsafe(self._spawn, feed.set_prefetch(prefetch))

    def settle(self, receipt: str, op: Settle, error: str | None = None) -> None:
        """Settle a lease a feed handed out (an ack: ``complete``), without waiting. The
        settles asked for before the loop gets to them are taken by one wake-up of it."""
        self._settles.append((receipt, op, error))
        if not self._settles_due:
            self._settles_due = True
            self.loop.call_soon_threadsafe(self._take_settles)

    def give_back(self, receipts: Iterable[str], timeout: float = GIVE_BACK_WITHIN) -> None:
        """Release these leases and wait for it (kombu's restore of unacked messages)."""
        receipts = list(receipts)
        if receipts and self._thread.alive:
            with contextlib.suppress(concurrent.futures.TimeoutError):
                self.call(self._give_back(receipts), timeout)

    def close(self, timeout: float = GIVE_BACK_WITHIN) -> None:
        """Stop every feed and close their sources and the opener's connections."""
        if not self._thread.alive:
            return  # (a forked child has no such thread: nothing of it to close)
        with contextlib.suppress(concurrent.futures.TimeoutError):
            self.call(self._close(), timeout)
        os.close(self._r)
        os.close(self._w)

    # -- on the loop ---------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def failed(self, exc: BaseException) -> None:
        """A feed met an error no retry mends: the consumer's side raises it."""
        log.error("consuming stopped: %s: %s", type(exc).__name__, exc)
        self.error = exc
        self.poke()

    def arrived(self, feed: Feed, source: Source, msgs: list[Message]) -> None:
        deadline = time.monotonic() + self.visibility_timeout
        held = self._held
        for msg in msgs:
            receipt = msg.receipt or ""
            held[receipt] = Held(feed, source, deadline)
            feed.held.add(receipt)
        if feed.cancelled:
            self._give_back_now([m.receipt or "" for m in msgs])
            return
        self.inbox.extend((feed, msg) for msg in msgs)
        self.poke()

    def _take_settles(self) -> None:
        self._settles_due = False  # (before taking them: one asked for from now on wakes again)
        settles = self._settles
        while settles:
            self._settle(*settles.popleft())

    def _settle(self, receipt: str, op: Settle, error: str | None) -> None:
        held = self._held.pop(receipt, None)
        if held is None:
            log.warning("a %s of a lease this consumer no longer holds (%s): ignored", op, receipt)
            return
        held.feed.freed(receipt)
        if op == "fail":
            sent = self._send(held.feed.name, held.source, op, [receipt], error)
            self._sending(held.source, sent)
        else:
            key = (held.source, op)
            pending = self._pending.get(key)
            if pending is None:
                pending = self._pending[key] = []
                self.loop.call_soon(self._flush, held.feed.name, key)
            pending.append(receipt)
        self._maybe_retire(held.feed)

    def _flush(self, name: str, key: tuple[Source, Settle]) -> None:
        receipts = self._pending.pop(key, None)
        if receipts:
            self._sending(key[0], self._send(name, key[0], key[1], receipts))

    def _sending(self, source: Source, coro: Coroutine[Any, Any, None]) -> None:
        """Send a settle on ``source``: a source closes only once its settles are answered."""
        task = self._spawn(coro)
        inflight = self._inflight.setdefault(source, set())
        inflight.add(task)
        task.add_done_callback(inflight.discard)

    async def _send(
        self, name: str, source: Source, op: Settle, receipts: list[str], error: str | None = None
    ) -> None:
        try:
            await source.settle(op, receipts, error)
        except ReceiptExpired as exc:
            level = logging.DEBUG if op == "release" else logging.WARNING
            log.log(
                level,
                "%s of %d message(s) of %s refused (a lease that ended is delivered again): %s",
                op,
                len(receipts),
                name,
                exc,
            )
        except S3QError as exc:
            log.warning(
                "%s of %d message(s) of %s refused (a lease that ended is delivered again): %s: %s",
                op,
                len(receipts),
                name,
                type(exc).__name__,
                exc,
            )

    def _give_back_now(self, receipts: list[str]) -> None:
        """Release ``receipts`` (held) without waiting."""
        for receipt in receipts:
            self._settle(receipt, "release", None)

    async def _give_back(self, receipts: list[str]) -> None:
        self._take_settles()  # (an ack asked for before stays an ack)
        by_source: dict[Source, list[str]] = {}
        names: dict[Source, str] = {}
        for receipt in receipts:
            held = self._held.pop(receipt, None)
            if held is not None:
                held.feed.freed(receipt)
                by_source.setdefault(held.source, []).append(receipt)
                names[held.source] = held.feed.name
        await asyncio.gather(
            *(self._send(names[s], s, "release", rs) for s, rs in by_source.items())
        )

    def _cancel(self, feed: Feed, undelivered: list[str]) -> None:
        if feed.task is not None:
            feed.task.cancel()
        self._give_back_now([r for r in undelivered if r in self._held])
        self._feeds.discard(feed)
        if feed.held:
            self._spawn(self._wind_down(feed))
        self._maybe_retire(feed)

    async def _wind_down(self, feed: Feed) -> None:
        """A cancelled feed still holds leases (tasks running): its sources push no more (a
        prefetch of 1 while they hold one or more), and give back what was pushed since."""
        for source in list(feed.sources):
            try:
                await source.set_prefetch(1)
                extra = await source.drain()
                if extra:
                    await source.settle("release", [m.receipt or "" for m in extra])
            except S3QError as exc:
                log.debug("winding %s down: %s", feed.name, exc)

    def _maybe_retire(self, feed: Feed) -> None:
        """A cancelled feed whose leases are all settled: its sources close."""
        if feed.cancelled and not feed.held:
            for source in list(feed.sources):
                self._spawn(self.retire(feed, source))

    async def retire(self, feed: Feed, source: Source) -> None:
        """Close ``source`` once nothing it delivered is held (settles of those that are go
        through the queue's calls once it is closed)."""
        if source in feed.sources:
            feed.sources.remove(source)
            for key in [key for key in self._pending if key[0] is source]:
                self._flush(feed.name, key)
            inflight = self._inflight.pop(source, set())
            await asyncio.gather(*inflight, return_exceptions=True)
            with contextlib.suppress(Exception):
                await source.close()

    async def _keep(self) -> None:
        """Every sixth of a lease, renew those with less than two thirds of it left: a renewal
        leaves with half a lease or more to go, time enough for a slow answer."""
        vt = self.visibility_timeout
        tick = vt / 6
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            for receipt, held in self._held.items():
                if held.deadline - now < vt * 2 / 3 and receipt not in self._extending:
                    self._extending.add(receipt)
                    self._spawn(self._extend(receipt, held))

    async def _extend(self, receipt: str, held: Held) -> None:
        try:
            await self._renew(receipt, held)
        finally:
            self._extending.discard(receipt)

    async def _renew(self, receipt: str, held: Held) -> None:
        started = time.monotonic()
        try:
            await held.source.settle("extend", [receipt], seconds=self.visibility_timeout)
        except ReceiptExpired as exc:
            if self._held.get(receipt) is held:
                log.warning("the lease of a message of %s was lost: %s", held.feed.name, exc)
                del self._held[receipt]
                held.feed.freed(receipt)
            return
        except S3QError as exc:
            log.warning("renewing a lease of %s failed, again soon: %s", held.feed.name, exc)
            return
        held.deadline = started + self.visibility_timeout

    async def _close(self) -> None:
        feeds = self._feeds | {held.feed for held in self._held.values()}
        self._keeper.cancel()
        await self._give_back(list(self._held))
        for task in list(self._tasks):
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task
        for feed in feeds | {feed for feed, _ in self.inbox}:
            feed.cancelled = True
            if feed.task is not None:
                feed.task.cancel()
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await feed.task
            for source in list(feed.sources):
                await self.retire(feed, source)
        await self.opener.aclose()
