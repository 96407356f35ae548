"""Subscriptions: a consumer to whom the broker pushes messages (``queue.subscribe()``).

One WebSocket per subscription (frames: :mod:`s3q.wire.subscriptions`): the broker pushes
leased messages while the consumer holds fewer than ``prefetch`` unsettled, and the consumer
settles them on the same channel. :class:`AsyncSubscription` (aiohttp) and :class:`Subscription`
(websockets, blocking) do the I/O around one core that does none (:class:`_Channel`).
Completions and releases asked for in one turn of the event loop travel as one frame. When the
channel closes, the broker gives back every lease the subscription still held.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from types import TracebackType
from typing import Any, Protocol

import msgspec

from ..errors import InvalidArgument, OutcomeUnknown, S3QError
from ..message import Message
from ..surface import Target
from ..validate import receipt_of
from ..wire import pages
from ..wire import subscriptions as frames
from ..wire.codec import AuthError, BrokerUnreachable, exception_of
from ..wire.subscriptions import SubscriptionsUnsupported

__all__ = ["ACKS_TOGETHER", "AsyncSubscription", "Subscription", "SubscriptionsUnsupported"]

ACKS_TOGETHER = 1000  # a blocking subscription's acks sent in one frame at the most


class _Channel:
    """A subscription's state, free of I/O: messages pushed and not taken yet, the frames to
    send and what the broker's frames mean."""

    def __init__(self, name: str, opened: frames.Open) -> None:
        self.name = name
        self.opened = opened
        self.buffer: collections.deque[Message] = collections.deque()
        self.error: S3QError | None = None  # why the channel closed
        self.opened_at: float | None = None  # when the broker took the subscription
        self._seq = 0

    def settle(self, op: frames.SettleOp, receipts: list[str], **more: Any) -> tuple[int, bytes]:
        self._seq += 1
        return self._seq, frames.encode(frames.Settle(self._seq, op, receipts, **more))

    def heard(self, data: bytes) -> frames.Settled | None:
        """Take in a frame of the broker's: a settle's answer, or None (pushed messages go to
        :attr:`buffer`); the broker's refusal is raised, and kept as :attr:`error`."""
        try:
            frame = frames.decode_server(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            self.error = BrokerUnreachable(f"the broker sent what is not a frame: {exc}")
            raise self.error from None
        if isinstance(frame, frames.Pushed):
            self.buffer.extend(pages.merged(pages.Pages(frame.messages, frame.pages)))
            return None
        if isinstance(frame, frames.Refused):
            self.error = exception_of(frame.status, frame.error)
            raise self.error
        if isinstance(frame, frames.Opened):
            self.opened_at = time.monotonic()
            return None
        return frame

    def closed(self, reason: str) -> S3QError:
        """The error of a call on a closed channel."""
        if self.error is None:
            self.error = BrokerUnreachable(f"the subscription to {self.name} is closed: {reason}")
        return self.error


def _refused(status: int) -> S3QError:
    """The error of a subscription's handshake the broker answered with HTTP ``status``."""
    if status in (401, 403):
        return AuthError(
            f"the broker refused the subscription (HTTP {status}): a missing or wrong token, "
            "or a request from a page of another origin",
            status,
        )
    return SubscriptionsUnsupported(
        f"the broker offers no subscriptions (HTTP {status}): poll with dequeue", status
    )


def _outcome(settled: frames.Settled, index: int) -> None:
    body = settled.errors.get(index)
    if body is not None:
        raise exception_of(400, body)


def _many(targets: Target | Iterable[Target]) -> list[str]:
    if isinstance(targets, str | Message):
        return [receipt_of(targets)]
    return [receipt_of(t) for t in targets]


def _opening(prefetch: int, visibility_timeout: float | None, per_group: int) -> frames.Open:
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
        raise InvalidArgument(f"prefetch must be an integer of at least 1, got {prefetch!r}")
    return frames.Open(prefetch, visibility_timeout, per_group)


class AsyncChannels(Protocol):
    """What opens an async subscription's WebSocket (:class:`~s3q.client.AsyncClient`)."""

    async def _channel(self, name: str) -> Any:
        """An aiohttp WebSocket to the broker serving queue ``name``'s subscriptions."""


class _Pending:
    """Receipts of one settle kind asked for in this loop turn, sent as one frame."""

    __slots__ = ("answer", "receipts")

    def __init__(self) -> None:
        self.receipts: list[str] = []
        self.answer: asyncio.Future[frames.Settled] = asyncio.get_running_loop().create_future()


class AsyncSubscription:
    """A subscription to queue ``name`` (:meth:`AsyncRemoteQueue.subscribe`): an async context
    manager and an async iterator of the messages pushed; settle them here."""

    def __init__(
        self,
        client: AsyncChannels,
        name: str,
        prefetch: int = 100,
        visibility_timeout: float | None = None,
        *,
        per_group: int = 1,
    ) -> None:
        self._client = client
        self._core = _Channel(name, _opening(prefetch, visibility_timeout, per_group))
        self._ws: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._arrived = asyncio.Event()
        self._answers: dict[int, asyncio.Future[frames.Settled]] = {}
        self._pending: dict[str, _Pending] = {}
        self._acks: list[_Pending] = []  # acks sent and not flushed

    async def open(self) -> AsyncSubscription:
        """Open the channel (``async with`` does)."""
        import aiohttp

        try:
            self._ws = await self._client._channel(self._core.name)
        except aiohttp.WSServerHandshakeError as exc:
            raise _refused(exc.status) from None
        except aiohttp.ClientError as exc:
            raise BrokerUnreachable(f"no subscription to {self._core.name}: {exc}") from None
        with contextlib.suppress(Exception):  # (refused at once: the frame says why)
            await self._ws.send_bytes(frames.encode(self._core.opened))
        try:
            while self._core.opened_at is None:  # (the broker's answer: taken, or refused)
                frame = await self._ws.receive()
                if frame.type != 2:  # (aiohttp.WSMsgType.BINARY)
                    raise self._core.closed("the broker closed it at the opening")
                self._core.heard(frame.data)
        except S3QError:
            await self._ws.close()
            raise
        self._reader = asyncio.create_task(self._read(), name="s3q-subscription")
        return self

    async def _read(self) -> None:
        core, reason = self._core, "the broker closed it"
        try:
            async for frame in self._ws:
                if frame.type != 2:  # (aiohttp.WSMsgType.BINARY)
                    break
                settled = core.heard(frame.data)
                if settled is None:
                    self._arrived.set()
                elif (answer := self._answers.pop(settled.seq, None)) is not None:
                    answer.set_result(settled)
        except S3QError:
            pass  # (kept as the core's error)
        except Exception as exc:
            reason = str(exc)
        error = core.closed(reason)
        self._arrived.set()
        for answer in self._answers.values():
            answer.set_exception(OutcomeUnknown(f"{error} before it answered a settle"))
        self._answers.clear()

    async def get(self, timeout: float | None = None) -> Message | None:
        """The next message pushed; None if none came within ``timeout`` seconds."""
        got = await self.take(1, timeout)
        return got[0] if got else None

    async def take(self, max_messages: int, wait: float | None = None) -> list[Message]:
        """Up to ``max_messages`` of the messages pushed, waiting up to ``wait`` seconds
        (None: as long as it takes) for the first."""
        core = self._core
        deadline = None if wait is None else time.monotonic() + wait
        while not core.buffer:
            if core.error is not None:
                raise core.error
            self._arrived.clear()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return []
            try:
                await asyncio.wait_for(self._arrived.wait(), left)
            except TimeoutError:
                return []
        return [core.buffer.popleft() for _ in range(min(max_messages, len(core.buffer)))]

    def __aiter__(self) -> AsyncIterator[Message]:
        return self

    async def __anext__(self) -> Message:
        try:
            got = await self.get()
        except BrokerUnreachable:
            raise StopAsyncIteration from None
        assert got is not None
        return got

    async def _send(self, op: frames.SettleOp, receipts: list[str], **more: Any) -> frames.Settled:
        core = self._core
        if core.error is not None or self._ws is None:
            raise core.closed("not open")
        seq, data = core.settle(op, receipts, **more)
        answer = self._answers[seq] = asyncio.get_running_loop().create_future()
        await self._ws.send_bytes(data)
        settled: frames.Settled = await answer
        return settled

    async def _coalesced(self, op: frames.SettleOp, receipts: list[str]) -> None:
        """Settle ``receipts`` in the frame of this loop turn's settles of the kind."""
        pending = self._pending.get(op) or self._gathering(op)
        first = len(pending.receipts)
        pending.receipts += receipts
        settled = await asyncio.shield(pending.answer)
        for i in range(first, first + len(receipts)):
            _outcome(settled, i)

    def _gathering(self, op: frames.SettleOp) -> _Pending:
        """A new frame of ``op`` settles, sent at the end of this loop turn."""
        pending = self._pending[op] = _Pending()
        asyncio.get_running_loop().call_soon(self._flush, op)
        return pending

    def _flush(self, op: frames.SettleOp) -> None:
        pending = self._pending.pop(op)
        task = asyncio.ensure_future(self._send(op, pending.receipts))

        def done(task: asyncio.Future[frames.Settled]) -> None:
            if task.exception() is not None:
                pending.answer.set_exception(task.exception())  # type: ignore[arg-type]
            else:
                pending.answer.set_result(task.result())

        task.add_done_callback(done)
        pending.answer.add_done_callback(self._acked)

    def _acked(self, answer: asyncio.Future[frames.Settled]) -> None:
        """An ack's frame answered: kept for :meth:`flush` only if something was refused."""
        if answer.cancelled():
            return
        if answer.exception() is None and not answer.result().errors:
            self._acks = [p for p in self._acks if p.answer is not answer]

    async def complete(self, target: Target) -> None:
        """Complete a message pushed (durable when this returns)."""
        await self._coalesced("complete", [receipt_of(target)])

    def ack(self, target: Target) -> None:
        """Complete a message pushed without waiting: it travels with this loop turn's other
        completions. :meth:`flush` waits until every ack so far is durable, and raises the
        first one the broker refused (its lease had ended: the message is delivered again)."""
        receipt = target.receipt if type(target) is Message else None
        pending = self._pending.get("complete")
        if pending is None:
            pending = self._gathering("complete")
            self._acks.append(pending)
        pending.receipts.append(receipt or receipt_of(target))  # (a message pushed: its own)

    async def flush(self) -> None:
        """Wait until every :meth:`ack` so far is durable; the first refused raises."""
        acks, self._acks = self._acks, []
        for pending in acks:
            settled = await asyncio.shield(pending.answer)
            if settled.errors:
                _outcome(settled, min(settled.errors))

    async def complete_batch(self, targets: Iterable[Target]) -> None:
        receipts = [receipt_of(t) for t in targets]
        if receipts:
            await self._coalesced("complete", receipts)

    async def release(self, targets: Target | Iterable[Target]) -> None:
        """Give leases back: the messages are delivered again at once, no attempt counted."""
        receipts = _many(targets)
        if receipts:
            await self._coalesced("release", receipts)

    async def fail(self, target: Target, error: str | None = None) -> float | None:
        """Fail a message pushed: when it is retried, None if it is dead."""
        settled = await self._send("fail", [receipt_of(target)], error=error)
        _outcome(settled, 0)
        return settled.retry_at

    async def extend(self, target: Target, seconds: float, *, revive: bool = False) -> None:
        settled = await self._send("extend", [receipt_of(target)], seconds=seconds, revive=revive)
        _outcome(settled, 0)

    async def set_prefetch(self, prefetch: int) -> None:
        """Hold up to ``prefetch`` messages unsettled from now on."""
        _opening(prefetch, None, 1)
        await self._ws.send_bytes(frames.encode(frames.Prefetch(prefetch)))

    @property
    def closed(self) -> bool:
        """Whether the channel has closed (:attr:`error` says why)."""
        return self._core.error is not None

    @property
    def error(self) -> S3QError | None:
        """Why the channel closed: the broker's refusal, or the connection's end."""
        return self._core.error

    async def close(self) -> None:
        """Close the channel: the broker gives back the leases of messages not settled."""
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
        self._core.closed("closed by the consumer")

    async def __aenter__(self) -> AsyncSubscription:
        return await self.open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class Channels(Protocol):
    """What opens a blocking subscription's WebSocket (:class:`~s3q.client.Client`)."""

    def _channel(self, name: str) -> Any:
        """A websockets (sync) connection to the broker serving queue ``name``'s
        subscriptions."""


class Subscription:
    """A subscription to queue ``name`` (:meth:`RemoteQueue.subscribe`), blocking: a context
    manager and an iterator of the messages pushed; settle them here. One thread at a time."""

    def __init__(
        self,
        client: Channels,
        name: str,
        prefetch: int = 100,
        visibility_timeout: float | None = None,
        *,
        per_group: int = 1,
    ) -> None:
        self._client = client
        self._core = _Channel(name, _opening(prefetch, visibility_timeout, per_group))
        self._ws: Any = None
        self._stack = contextlib.ExitStack()  # (websockets: a connection is a context)
        self._answered: dict[int, frames.Settled] = {}
        self._unsent: list[str] = []  # acked, not sent yet
        self._acks: set[int] = set()  # acks' frames not answered yet
        self._refused: list[frames.Settled] = []  # acks' answers that refused some

    def open(self) -> Subscription:
        """Open the channel (``with`` does)."""
        from websockets.exceptions import InvalidHandshake, InvalidStatus

        try:
            self._ws = self._stack.enter_context(self._client._channel(self._core.name))
        except InvalidStatus as exc:
            raise _refused(exc.response.status_code) from None
        except (InvalidHandshake, OSError, TimeoutError) as exc:
            raise BrokerUnreachable(f"no subscription to {self._core.name}: {exc}") from None
        with contextlib.suppress(Exception):  # (refused at once: the frame says why)
            self._ws.send(frames.encode(self._core.opened))
        try:
            while self._core.opened_at is None:  # (the broker's answer: taken, or refused)
                self._hear(None)
        except S3QError:
            self._stack.close()
            raise
        return self

    def _hear(self, timeout: float | None) -> bool:
        """Take in the broker's next frame; False if none came within ``timeout``."""
        core = self._core
        if core.error is not None:
            raise core.error
        if self._ws is None:
            raise core.closed("not open")
        try:
            data = self._ws.recv(timeout)
        except TimeoutError:
            return False
        except Exception as exc:  # (websockets' ConnectionClosed)
            raise core.closed(str(exc)) from None
        if not isinstance(data, bytes):
            raise core.closed("the broker sent a text frame")
        settled = core.heard(data)
        if settled is None:
            pass
        elif settled.seq in self._acks:
            self._acks.discard(settled.seq)
            if settled.errors:
                self._refused.append(settled)
        else:
            self._answered[settled.seq] = settled
        return True

    def ack(self, target: Target) -> None:
        """Complete a message pushed without waiting: the acks travel together, before the
        subscription next waits for the broker. :meth:`flush` waits until every ack so far is
        durable, and raises the first one the broker refused (its lease had ended: the
        message is delivered again)."""
        receipt = target.receipt if type(target) is Message else None
        self._unsent.append(receipt or receipt_of(target))  # (a message pushed: its own)
        if len(self._unsent) >= ACKS_TOGETHER:
            self._send_acks()

    def _send_acks(self) -> None:
        if self._unsent and self._ws is not None and self._core.error is None:
            seq, data = self._core.settle("complete", self._unsent)
            self._unsent = []
            self._acks.add(seq)
            self._ws.send(data)

    def flush(self) -> None:
        """Wait until every :meth:`ack` so far is durable; the first refused raises."""
        self._send_acks()
        while self._acks:
            try:
                self._hear(None)
            except BrokerUnreachable as exc:
                raise OutcomeUnknown(f"{exc} before it answered an ack") from None
        refused, self._refused = self._refused, []
        if refused:
            _outcome(refused[0], min(refused[0].errors))

    def get(self, timeout: float | None = None) -> Message | None:
        """The next message pushed; None if none came within ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._core.buffer:
            self._send_acks()
        while not self._core.buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self._hear(left) and left is not None and left <= 0:
                return None
        return self._core.buffer.popleft()

    def __iter__(self) -> Iterator[Message]:
        while True:
            try:
                got = self.get()
            except BrokerUnreachable:
                return
            assert got is not None
            yield got

    def _send(self, op: frames.SettleOp, receipts: list[str], **more: Any) -> frames.Settled:
        core = self._core
        if core.error is not None or self._ws is None:
            raise core.closed("not open")
        self._send_acks()
        seq, data = core.settle(op, receipts, **more)
        self._ws.send(data)
        while seq not in self._answered:
            try:
                self._hear(None)
            except BrokerUnreachable as exc:
                raise OutcomeUnknown(f"{exc} before it answered a settle") from None
        return self._answered.pop(seq)

    def complete(self, target: Target) -> None:
        """Complete a message pushed (durable when this returns)."""
        _outcome(self._send("complete", [receipt_of(target)]), 0)

    def complete_batch(self, targets: Iterable[Target]) -> None:
        receipts = [receipt_of(t) for t in targets]
        if receipts:
            settled = self._send("complete", receipts)
            for i in range(len(receipts)):
                _outcome(settled, i)

    def release(self, targets: Target | Iterable[Target]) -> None:
        """Give leases back: the messages are delivered again at once, no attempt counted."""
        receipts = _many(targets)
        if receipts:
            settled = self._send("release", receipts)
            for i in range(len(receipts)):
                _outcome(settled, i)

    def fail(self, target: Target, error: str | None = None) -> float | None:
        """Fail a message pushed: when it is retried, None if it is dead."""
        settled = self._send("fail", [receipt_of(target)], error=error)
        _outcome(settled, 0)
        return settled.retry_at

    def extend(self, target: Target, seconds: float, *, revive: bool = False) -> None:
        settled = self._send("extend", [receipt_of(target)], seconds=seconds, revive=revive)
        _outcome(settled, 0)

    def set_prefetch(self, prefetch: int) -> None:
        """Hold up to ``prefetch`` messages unsettled from now on."""
        _opening(prefetch, None, 1)
        self._ws.send(frames.encode(frames.Prefetch(prefetch)))

    def close(self) -> None:
        """Close the channel, after sending the acks not sent yet: the broker gives back the
        leases of messages not settled."""
        if self._ws is not None:
            with contextlib.suppress(S3QError):
                self.flush()
            self._stack.close()
        self._core.closed("closed by the consumer")

    def __enter__(self) -> Subscription:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
