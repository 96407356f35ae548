"""Which writer answered a call: the ``s3q-writer`` header of a broker's answers.

The broker that leads a queue names its writer (the token of that open of the queue, new each
time a writer opens it) in every answer about the queue, and a broker that forwards a call
passes its leader's header back unchanged. Calls made within :func:`answers` note it::

    with s3q.client.answers() as seen:
        await queue.complete(message)
    seen.writer  # the token of the writer that answered, or None if the broker said none

It is noted per task and thread (a context variable), so concurrent calls each see their own.
The fault runs use it to tell a fenced writer's acknowledgements from its successor's
(:mod:`s3q.faults.checker`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass

#: the header of a broker's answer that names the writer behind it
WRITER_HEADER = "s3q-writer"
#: the header of a broker's answer about a queue of several partitions: how many. Any broker
#: serves such a queue as well as any other, so a client spreads its calls over them
PARTITIONS_HEADER = "s3q-partitions"


@dataclass
class Answers:
    """What the brokers said of the answers to the calls made within :func:`answers`."""

    #: the writer token of the last answer (None: the broker named none, e.g. an error before
    #: the queue was reached, or a broker from before the header)
    writer: str | None = None
    #: the partitions of the queue the last answer was about, if several
    partitions: int | None = None


_seen: ContextVar[Answers | None] = ContextVar("s3q_answers", default=None)


class _Noting:
    """The context of :func:`answers` (a class: the broker enters one per call)."""

    __slots__ = ("_token",)

    def __enter__(self) -> Answers:
        seen = Answers()
        self._token = _seen.set(seen)
        return seen

    def __exit__(self, *exc: object) -> None:
        _seen.reset(self._token)


def answers() -> AbstractContextManager[Answers]:
    """Note which writer answered the calls made within (see the module's documentation)."""
    return _Noting()


def spread(partitions: int) -> None:
    """The call's queue has ``partitions`` partitions: noted if made within :func:`answers`."""
    seen = _seen.get()
    if seen is not None:
        seen.partitions = partitions


def heard(writer: str | None) -> None:
    """An answer came from ``writer`` (its header; None if it had none): noted if the call was
    made within :func:`answers`."""
    seen = _seen.get()
    if seen is not None:
        seen.writer = writer
