"""A dequeue over the partitions of a queue: what they have now, in turn, or a long poll of all
of them at once.

A dequeue takes from the partitions led here first (the one whose best message has the highest
priority first), then from the others; partitions alike take turns, each call starting one
further on (``PartitionedQueue._order``). A long poll waits on every partition at once: on
each led here for a change, on each of the others with a long poll of its own; what a poll
leased that is not answered is given back at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from .. import validate
from ..config import MAX_DEQUEUE
from ..message import Message
from ..surface import Target
from ..wire import pages
from ..wire.pages import Pages
from .partition import Partition, judged, outcome, outcomes

#: how much longer a dequeue waits for the partitions led elsewhere once one partition has
#: answered it messages (a live broker answers well within it; a dead one is not waited on)
AWAY_GRACE = 0.05


@dataclasses.dataclass(frozen=True)
class Take:
    """A dequeue's arguments, as the partitions are asked."""

    max_messages: int
    visibility_timeout: float | None
    wait: float
    per_group: int
    paged: bool

    async def of(self, part: Partition, want: int, wait: float, settle: list[str]) -> Pages:
        """Up to ``want`` messages of ``part``, waiting up to ``wait``, after completing
        ``settle`` (in the same commit)."""
        if self.paged and part.paging is not None:
            return await part.paging.dequeue_pages(
                want, self.visibility_timeout, wait, per_group=self.per_group, complete=settle
            )
        messages = await part.queue.dequeue(
            want, self.visibility_timeout, wait, per_group=self.per_group, complete=settle
        )
        return Pages(messages)


class Dequeues:
    """The dequeues of one partitioned queue, and the long polls of other brokers it lets go
    of (each left to end, what it leased given back)."""

    def __init__(
        self,
        partitions: list[Partition],
        order: Callable[[], list[Partition]],
        by_partition: Callable[[Iterable[Target]], Awaitable[dict[Partition, list[str]]]],
        release: Callable[[list[Message]], Awaitable[None]],
    ) -> None:
        self.partitions = partitions
        self._order, self._by_partition, self._release = order, by_partition, release
        self._no_waits = asyncio.Event()
        self._ending: set[asyncio.Future[Any]] = set()  # long polls let go of, and give-backs
        #: asks of partitions elsewhere left unanswered (a dead or stalled leader's)
        self._hanging: dict[Partition, asyncio.Task[Pages]] = {}

    async def take(self, take: Take, complete: Iterable[Target]) -> Pages:
        """A dequeue over the partitions, ``complete`` completed in the same call."""
        validate.count("max_messages", take.max_messages, 1, MAX_DEQUEUE)
        wait = validate.wait(take.wait)
        settle = await self._by_partition(complete)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        polling = wait > 0 and not self._no_waits.is_set()
        got, asked = await self._sweep(take, settle, hand_over=polling)
        if count(got) or not polling:
            await self._stop(asked.values())
            return got
        return await self._poll(take, deadline, asked)

    async def _sweep(
        self,
        take: Take,
        settle: dict[Partition, list[str]] | None = None,
        *,
        led_only: bool = False,
        hand_over: bool = False,
    ) -> tuple[Pages, dict[Partition, asyncio.Task[Pages]]]:
        """What the partitions have now, up to ``take.max_messages``: those led here in turn
        (``_order``), then the others all at once (but one whose last ask still hangs), none
        of which holds up the answer for long once another has answered (``AWAY_GRACE``);
        none at all if ``led_only``. The receipts of ``settle`` completed in the same call to
        their partitions. Also the asks of other partitions still unanswered, if
        ``hand_over`` (a long poll waits on them), else let go of."""
        order = self._order()
        settle = dict(settle or {})
        # the completions of the first partition tried ride on its lease's commit; the
        # others' go to their partitions at once, beside it
        first = settle.pop(order[0], [])
        others = asyncio.ensure_future(
            outcomes({p: p.queue.complete_batch(r) for p, r in settle.items()})
        )
        completions: dict[Partition, object] = {}  # partition -> None (done) or its failure
        answers: list[Pages] = []
        asked: dict[Partition, asyncio.Task[Pages]] = {}
        settling: Partition | None = None  # the partition asked elsewhere with completions
        failure: BaseException | None = None
        try:
            for part in order:
                want = take.max_messages - sum(map(count, answers))
                if want <= 0 or (part.led is None and (led_only or part in self._hanging)):
                    continue
                receipts = first if part is order[0] else []
                first = [] if part is order[0] else first
                if part.led is None:
                    asked[part] = asyncio.ensure_future(take.of(part, want, 0.0, receipts))
                    settling = part if receipts else settling
                    continue
                try:
                    answers.append(await take.of(part, want, 0.0, receipts))
                except Exception as exc:
                    if receipts:
                        completions[part] = exc  # those completions did not happen
                        break
                    failure = failure or exc  # another partition may still have messages
                else:
                    if receipts:
                        completions[part] = None
            if asked:
                await self._hear(asked, settling, bool(count(joined(answers))), hand_over)
                failure = _heard(asked, settling, answers, completions) or failure
            if first:  # (no message wanted: the first partition's completions alone)
                completions[order[0]] = await outcome(order[0].queue.complete_batch(first))
            completions.update(await others)
        except BaseException:
            with contextlib.suppress(BaseException):
                await others  # (what it did, it did: its caller learns of the failure)
            await self._stop(asked.values())
            await self._give_back(answers)
            raise
        if any(outcome is not None for outcome in completions.values()):
            await self._stop(asked.values())
            await self._give_back(answers)
            judged("complete", completions)  # (raises: a failure, or OutcomeUnknown)
        got = await self._cut(joined(answers), take.max_messages)
        if failure is not None and not count(got) and not asked:
            raise failure
        if not hand_over:
            self._let_hang(asked)
        return got, (asked if hand_over else {})

    async def _hear(
        self,
        asked: dict[Partition, asyncio.Task[Pages]],
        settling: Partition | None,
        found: bool,
        hand_over: bool,
    ) -> None:
        """Wait for the partitions ``asked`` elsewhere: until all have answered, or for
        ``AWAY_GRACE`` more once any partition has answered messages; not at all for a long
        poll (``hand_over``) that has none yet. The one ``settling`` completions is waited
        for whatever happens: its answer says whether they were made."""
        loop = asyncio.get_running_loop()
        until = loop.time() + AWAY_GRACE if found else None
        pending = set(asked.values())
        must = asked.get(settling) if settling is not None else None
        while pending:
            if must is None or must.done():
                if hand_over and until is None:
                    return
                timeout = None if until is None else max(0.0, until - loop.time())
            else:
                timeout = None
            done, pending = await asyncio.wait(
                pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                return
            if until is None and any(t.exception() is None and count(t.result()) for t in done):
                until = loop.time() + AWAY_GRACE

    def _let_hang(self, asked: dict[Partition, asyncio.Task[Pages]]) -> None:
        """Asks of other partitions left unanswered: not sent again while they hang (a dead or
        stalled leader), let go of (what they lease, given back)."""
        for part, task in asked.items():
            self._hanging[part] = task
            task.add_done_callback(functools.partial(self._answered, part))
        self._stop_now(asked.values())

    def _answered(self, part: Partition, task: asyncio.Task[Pages]) -> None:
        if self._hanging.get(part) is task:
            del self._hanging[part]

    async def _cut(self, answer: Pages, most: int) -> Pages:
        """``answer`` with at most ``most`` messages: the rest (leased by partitions that
        answered together) given back at once."""
        if count(answer) <= most:
            return answer
        messages = pages.merged(answer)
        await self._give_back([Pages(messages[most:])])
        return Pages(messages[:most])

    async def _poll(
        self, take: Take, deadline: float, polls: dict[Partition, asyncio.Task[Pages]]
    ) -> Pages:
        """Wait until a partition has messages, at most until ``deadline`` (loop time): on
        each partition led here for a change (then look again), on each of the others with a
        long poll of its own (after the ask of the sweep, ``polls``, if it still runs)."""
        loop = asyncio.get_running_loop()
        failed: set[Partition] = set()  # long polls that failed: not sent again this call
        try:
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0 or self._no_waits.is_set():
                    return Pages([])
                for part in self.partitions:
                    if part.led is None and part not in polls and part not in failed:
                        polls[part] = asyncio.ensure_future(
                            take.of(part, take.max_messages, remaining, [])
                        )
                changes = [
                    asyncio.ensure_future(led.changed(remaining))
                    for part in self.partitions
                    if (led := part.led) is not None
                ]
                stop = asyncio.ensure_future(self._no_waits.wait())
                try:
                    done, _ = await asyncio.wait(
                        [*changes, stop, *polls.values()],
                        timeout=remaining,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    for task in (*changes, stop):
                        task.cancel()
                found: list[Pages] = []
                for part in [p for p, poll in polls.items() if poll.done()]:
                    poll = polls.pop(part)
                    if poll.exception() is None:
                        found.append(poll.result())
                    else:
                        failed.add(part)
                got = await self._cut(joined(found), take.max_messages)
                if not count(got) and any(task in done for task in changes):
                    got, _ = await self._sweep(take, led_only=True)
                if count(got):
                    return got
        finally:
            await self._stop(polls.values())

    async def _stop(self, polls: Iterable[asyncio.Task[Pages]]) -> None:
        """Let go of long polls of other brokers no longer wanted: each is left to end (within
        its wait), and what it leased is given back. (Cancelled, one whose answer was on its
        way would strand what it leased until its visibility timeout.)"""
        polls = list(polls)
        done = [task for task in polls if task.done()]
        self._stop_now(task for task in polls if not task.done())  # (before any await)
        for task in done:
            await self._given_back(task)

    def _stop_now(self, polls: Iterable[asyncio.Task[Pages]]) -> None:
        """``_stop`` for polls not done: what they lease is given back when they end."""
        for task in polls:
            self._ending.add(task)
            task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[Pages]) -> None:
        self._ending.discard(task)
        if not task.cancelled() and task.exception() is None and count(task.result()):
            giving = asyncio.ensure_future(self._given_back(task))
            self._ending.add(giving)
            giving.add_done_callback(self._ending.discard)

    async def _given_back(self, task: asyncio.Future[Any]) -> None:
        if not task.cancelled() and task.exception() is None:
            await self._give_back([task.result()])

    async def _give_back(self, answers: list[Pages]) -> None:
        """Release the messages of ``answers`` (leased, but not to be answered)."""
        leased = pages.merged(joined(answers))
        if leased:
            with contextlib.suppress(Exception):  # unreleased, they come back after their lease
                await self._release(leased)

    def stop_waiting(self) -> None:
        """End every long poll now with what is there, and make later ones answer at once."""
        self._no_waits.set()
        for part in self.partitions:
            if (led := part.led) is not None:
                led.stop_waiting()

    def close(self) -> None:
        """Let go of what is under way (what it leased comes back after its lease)."""
        for task in list(self._ending):
            task.cancel()


def _heard(
    asked: dict[Partition, asyncio.Task[Pages]],
    settling: Partition | None,
    answers: list[Pages],
    completions: dict[Partition, object],
) -> BaseException | None:
    """Take the answers of the partitions ``asked`` that have answered out of it, into
    ``answers`` (and, for the one ``settling``, whether its completions were made, into
    ``completions``); the first failure of another."""
    failure: BaseException | None = None
    for part, task in list(asked.items()):
        if not task.done():
            continue
        del asked[part]
        error = task.exception()
        if error is None:
            answers.append(task.result())
        elif part is not settling:
            failure = failure or error
        if part is settling:
            completions[part] = error
    return failure


def count(answer: Pages) -> int:
    return len(answer.messages) + sum(page.count for page in answer.pages)


def joined(answers: list[Pages]) -> Pages:
    """Answers of several partitions as one, in their order."""
    answers = [a for a in answers if count(a)]
    if len(answers) == 1:
        return answers[0]
    if not any(a.pages for a in answers):
        return Pages([m for a in answers for m in a.messages])
    messages: list[Message] = []
    joined: list[pages.Page] = []
    for answer in answers:
        at = len(messages) + sum(p.count for p in joined)
        joined += [pages.moved(p, at) for p in answer.pages]
        messages += answer.messages
    return Pages(messages, joined)
