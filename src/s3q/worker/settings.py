"""The checks of a worker's settings, shared by :class:`Worker` and ``@handler``."""

from __future__ import annotations

import math

from ..config import MAX_DEQUEUE, MAX_WAIT
from ..errors import InvalidArgument

__all__ = ["check_settings"]


def check_settings(
    concurrency: int,
    prefetch: int | None,
    visibility_timeout: float | None,
    ack_interval: float,
    grace: float,
    poll_wait: float,
) -> None:
    """InvalidArgument unless each setting is of its type and in its range."""

    def seconds(name: str, value: object, positive: bool) -> None:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
            or (positive and value == 0)
        ):
            bound = "> 0" if positive else ">= 0"
            raise InvalidArgument(
                f"{name} must be a finite number of seconds {bound}, got {value!r}"
            )

    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise InvalidArgument(f"concurrency must be a positive integer, got {concurrency!r}")
    if prefetch is not None and (
        isinstance(prefetch, bool)
        or not isinstance(prefetch, int)
        or not 1 <= prefetch <= MAX_DEQUEUE
    ):
        raise InvalidArgument(
            f"prefetch must be None or an integer in 1..{MAX_DEQUEUE}, got {prefetch!r}"
        )
    if visibility_timeout is not None:
        seconds("visibility_timeout", visibility_timeout, True)
    seconds("ack_interval", ack_interval, False)
    seconds("grace", grace, False)
    seconds("poll_wait", poll_wait, True)
    if poll_wait > MAX_WAIT:
        raise InvalidArgument(f"poll_wait must be at most {MAX_WAIT:g} seconds, got {poll_wait!r}")
