"""Handlers: the ``@handler`` decorator and its options, and loading one by its path."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypeVar

from ..config import split_options
from ..errors import InvalidArgument
from ..message import Message
from .settings import check_settings

__all__ = [
    "Handler",
    "HandlerError",
    "HandlerImportError",
    "HandlerNotCallable",
    "HandlerNotFound",
    "HandlerOptions",
    "InvalidHandlerPath",
    "handler",
    "handler_options",
    "is_async",
    "load_handler",
]

Handler: TypeAlias = Callable[[Message], Any]

H = TypeVar("H", bound=Callable[..., Any])


# --------------------------------------------------------------------------- errors


class HandlerError(InvalidArgument):
    """A handler named ``module:function`` cannot be loaded."""


class InvalidHandlerPath(HandlerError):
    """The handler path is not of the form ``package.module:function``."""


class HandlerImportError(HandlerError):
    """The handler's module is missing or raised while being imported."""


class HandlerNotFound(HandlerError):
    """The handler's module has no such attribute."""


class HandlerNotCallable(HandlerError):
    """The handler path names something that is not callable."""


# --------------------------------------------------------------------------- the decorator


@dataclass(frozen=True, slots=True)
class HandlerOptions:
    """What ``@s3q.worker.handler(...)`` recorded on a function."""

    queue: str  # a queue name under the default store, or a queue URL
    concurrency: int | None = None
    prefetch: int | None = None
    visibility_timeout: float | None = None
    grace: float | None = None
    options: Mapping[str, Any] = field(default_factory=dict)  # keywords of s3q.open


_MARK = "__s3q_handler__"


def handler(
    queue: str,
    *,
    concurrency: int | None = None,
    prefetch: int | None = None,
    visibility_timeout: float | None = None,
    grace: float | None = None,
    **options: Any,
) -> Callable[[H], H]:
    """Mark a function as the handler of ``queue`` (a name under the default store, or a URL).

    The function is returned unchanged; ``s3q worker module:function`` reads the options.
    Extra keywords are options of :func:`s3q.open` (``max_attempts=5``, ...).
    """
    if not isinstance(queue, str) or not queue:
        raise InvalidArgument(f"queue must be a non-empty string, got {queue!r}")
    check_settings(
        1 if concurrency is None else concurrency,
        prefetch,
        visibility_timeout,
        0.0,
        0.0 if grace is None else grace,
        1.0,
    )
    split_options(options)  # an unknown or bad option fails here, not when the worker starts
    marked = HandlerOptions(queue, concurrency, prefetch, visibility_timeout, grace, options)

    def mark(fn: H) -> H:
        if not callable(fn):
            raise InvalidArgument(f"@handler decorates a callable, not {type(fn).__name__}")
        setattr(fn, _MARK, marked)
        return fn

    return mark


def handler_options(fn: object) -> HandlerOptions | None:
    """The options ``@handler`` recorded on ``fn``, if any."""
    marked = getattr(fn, _MARK, None)
    return marked if isinstance(marked, HandlerOptions) else None


def is_async(fn: object) -> bool:
    """Whether ``fn`` is a coroutine function, or an object with an async ``__call__``."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - an object with an async __call__
    )


# --------------------------------------------------------------------------- loading by path


def load_handler(target: str) -> Handler:
    """The callable ``package.module:function`` (or ``module:Class.method``) names."""
    if not isinstance(target, str):
        raise InvalidHandlerPath(f"a handler path is a string, not {type(target).__name__}")
    module_name, colon, attr = target.partition(":")
    if (
        not colon
        or not all(part.isidentifier() for part in module_name.split("."))
        or not all(part.isidentifier() for part in attr.split("."))
    ):
        raise InvalidHandlerPath(
            f"handler path must look like 'package.module:function', got {target!r}"
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise HandlerImportError(f"no module named {exc.name!r} (handler {target!r})") from exc
        raise HandlerImportError(f"importing {module_name!r} failed: {_one_line(exc)}") from exc
    except Exception as exc:
        raise HandlerImportError(f"importing {module_name!r} failed: {_one_line(exc)}") from exc
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise HandlerNotFound(f"module {module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise HandlerNotCallable(f"{target!r} is a {type(obj).__name__}, not a callable")
    return obj


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text.splitlines()[0] if text.strip() else type(exc).__name__
