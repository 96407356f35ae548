"""A native API call answered: from its checked arguments to its status, body and headers, the
same whichever HTTP path brought it (Starlette's routes in :mod:`.app`, or :mod:`.lean`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from ..errors import S3QError, WriterFenced
from ..wire.answers import answers
from ..wire.codec import MSGPACK, error_body, status_of
from . import redact
from .metrics import BrokerMetrics
from .registry import QueueRegistry
from .routes import Call, Endpoint

log = logging.getLogger("s3q.broker")


class Answer(NamedTuple):
    """What a call is answered: its status and body, and the queue's writer and partitions
    (the ``s3q-writer`` and ``s3q-partitions`` headers; None: none)."""

    status: int
    body: Any
    writer: str | None
    partitions: int | None


async def answer(
    endpoint: Endpoint,
    registry: QueueRegistry,
    metrics: BrokerMetrics,
    name: str | None,
    call: Call | Callable[[], Awaitable[Call]],
    done: Callable[[str], None] | None = None,
) -> Answer:
    """``call`` to ``endpoint`` (or what makes it: checks that may refuse the call, whose
    refusal is answered and counted as the call's) answered: an S3QError as its status and
    body, a call a fenced writer refused sent once more, to the queue's new leader.
    ``done`` is told the call's outcome (``ok`` or its error's class) once it is answered."""
    started = time.perf_counter()
    outcome = "ok"
    metrics.serving += 1
    with answers() as seen:
        try:
            made = call if isinstance(call, Call) else await call()
            try:
                result = await endpoint.handler(made)
            except WriterFenced:
                # the queue's writer lost it to another broker: nothing was done, so the call
                # goes once more, to the new leader (another call may have evicted the stopped
                # queue already)
                if name is None:
                    raise
                await registry.evict_stopped(name)
                result = await endpoint.handler(made)
            status = 200
        except S3QError as exc:
            outcome = type(exc).__name__
            await registry.evict_stopped(name)
            text = redact.message(exc, name, registry.store)
            status, result = status_of(exc), error_body(exc, text)
        except Exception as exc:
            outcome = "internal"
            log.exception("%s %s of queue %r failed", endpoint.method, endpoint.path, name)
            status, result = 500, internal_error(exc)
        finally:
            metrics.serving -= 1
            metrics.observe(name, endpoint.operation, outcome, time.perf_counter() - started)
            if done is not None:
                done(outcome)
    return Answer(status, result, seen.writer, seen.partitions)


def internal_error(exc: Exception) -> dict[str, Any]:
    """The body of a 500 answer: the error's type, its text withheld (it may name the store)."""
    return error_body(exc, redact.INTERNAL)


def wants_json(accept: str) -> bool:
    """Whether a request of this ``Accept`` is answered in JSON (else msgpack)."""
    return MSGPACK not in accept and ("json" in accept or "*/*" in accept or not accept)
