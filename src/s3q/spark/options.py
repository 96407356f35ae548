"""The options of the ``s3q`` data source, checked once, on the driver."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..errors import InvalidConfig
from ..partitions.placement import url_of
from ..store import STORE_OPTIONS, Store, open_store

T = TypeVar("T")


@dataclass(frozen=True)
class Options:
    """The queue URL, the store options of ``s3q.open``, and the source's own options
    (lower-cased names: Spark treats option names without regard to case)."""

    url: str
    store: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, str] = field(default_factory=dict)

    def open_store(self, partition: int = 0) -> Store:
        """The queue's store, or that of its partition ``partition`` (``s3q.partitions``)."""
        return open_store(url_of(self.url, partition), dict(self.store))

    def text(self, name: str, default: str | None = None) -> str | None:
        return self.extra.get(name.lower(), default)

    def integer(self, name: str, default: int, low: int = 1) -> int:
        raw = self.extra.get(name.lower())
        try:
            value = default if raw is None else int(raw)
        except ValueError:
            raise InvalidConfig(f"option {name} must be an integer, got {raw!r}") from None
        if value < low:
            raise InvalidConfig(f"option {name} must be at least {low}, got {value}")
        return value

    def seconds(self, name: str, default: float) -> float:
        raw = self.extra.get(name.lower())
        try:
            value = default if raw is None else float(raw)
        except ValueError:
            raise InvalidConfig(f"option {name} must be a number of seconds, got {raw!r}") from None
        if not value > 0:
            raise InvalidConfig(f"option {name} must be > 0, got {value}")
        return value


def parse(options: Mapping[str, str]) -> Options:
    """Split Spark's options into the queue URL, store options and the rest."""
    lowered = {str(k).lower(): str(v) for k, v in options.items()}
    url = lowered.pop("path", None) or lowered.pop("url", None)
    if not url:
        raise InvalidConfig(
            "the s3q data source needs the queue URL: .load(url), .save(url) or "
            ".option('path', url)"
        )
    store: dict[str, Any] = {}
    for name in STORE_OPTIONS:
        if name in lowered:
            value = lowered.pop(name)
            store[name] = _flag(name, value) if name == "allow_http" else value
    return Options(url, store, lowered)


def _flag(name: str, value: str) -> bool:
    flag = {"true": True, "1": True, "false": False, "0": False}.get(value.lower())
    if flag is None:
        raise InvalidConfig(f"option {name} must be true or false, got {value!r}")
    return flag


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from Spark's synchronous callbacks."""
    return asyncio.run(coro)
