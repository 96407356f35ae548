"""Blocking methods derived from coroutine methods: a blocking queue declares none of its own.

:class:`s3q.Queue` and :class:`s3q.client.RemoteQueue` offer the coroutines of an async twin as
blocking methods. Each of them says how it runs a coroutine to its end (``_run``) and whose
coroutines it runs (``_aq``, see :class:`BlockingTwin`); each method is then one line::

    class Queue:
        enqueue = blocking(AsyncQueue.enqueue)

``Queue.enqueue`` takes what ``AsyncQueue.enqueue`` takes (for mypy, through a ParamSpec, as at
run time), returns what it returns once awaited, and has its name, docstring and signature
(``help()``, ``inspect.signature``). A call makes the coroutine of ``self._aq`` of that name and
hands it to ``self._run``: ``Queue`` runs it on its event-loop thread; ``RemoteQueue``, whose
twin makes its requests in place (blocking), runs it with :func:`run_in_place`.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, overload

A = TypeVar("A")  # the async twin
A_co = TypeVar("A_co", covariant=True)
P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class BlockingTwin(Protocol[A_co]):
    """A blocking class over an async twin: what :class:`blocking` methods need of it."""

    @property
    def _aq(self) -> A_co:
        """The object whose coroutines the blocking methods run."""
        ...

    def _run(self, coro: Coroutine[Any, Any, T], /) -> T:
        """Run ``coro`` to its end, blocking; its result (or its exception, raised)."""
        ...


class blocking(Generic[A, P, R]):
    """The blocking twin of the coroutine method ``method``, as a method of a class that is a
    :class:`BlockingTwin` of ``method``'s class (a descriptor, bound like a function).

    The call goes to the coroutine of the same name of ``self._aq`` (so a subclass of the twin
    that overrides it is honoured, as a hand-written ``self._run(self._aq.name(...))`` would),
    and the coroutine to ``self._run``.
    """

    def __init__(self, method: Callable[Concatenate[A, P], Coroutine[Any, Any, R]]) -> None:
        name = method.__name__

        @functools.wraps(method)
        def run(self: BlockingTwin[A], /, *args: P.args, **kwargs: P.kwargs) -> R:
            coroutine: Callable[P, Coroutine[Any, Any, R]] = getattr(self._aq, name)
            return self._run(coroutine(*args, **kwargs))

        self.name = name
        self.function = run

    def __set_name__(self, owner: type, name: str) -> None:
        if name != self.name:
            raise TypeError(f"{owner.__qualname__}.{name} cannot run the coroutine {self.name}")
        self.function.__qualname__ = f"{owner.__qualname__}.{name}"
        self.function.__module__ = owner.__module__

    @overload
    def __get__(
        self, obj: None, owner: type | None = None
    ) -> Callable[Concatenate[BlockingTwin[A], P], R]: ...

    @overload
    def __get__(self, obj: BlockingTwin[A], owner: type | None = None) -> Callable[P, R]: ...

    def __get__(
        self, obj: BlockingTwin[A] | None, owner: type | None = None
    ) -> Callable[Concatenate[BlockingTwin[A], P], R] | Callable[P, R]:
        if obj is None:
            return self.function  # as a function in the class: help(Queue.enqueue) shows it
        return types.MethodType(self.function, obj)


def run_in_place(coro: Coroutine[Any, Any, T]) -> T:
    """The result of a coroutine that never suspends (its I/O blocks in place), run to its end
    in this thread without an event loop."""
    try:
        coro.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    coro.close()
    raise RuntimeError(f"{coro!r} suspended: run_in_place runs only coroutines that never do")
