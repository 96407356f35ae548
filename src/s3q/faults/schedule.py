"""Which fault a request meets: profiles of fault rates, partitions, and scripted faults.

One :class:`Schedule` decides for every request, whether the request goes through a
:class:`~s3q.faults.store.FaultyStore` (a wrapper around any store) or a
:class:`~s3q.faults.proxy.FaultProxy` (an HTTP proxy in front of an S3 server). The faults:

- ``delay``: it is answered late;
- ``before``: it fails before reaching the store (500, 503 SlowDown, a reset);
- ``after``: the store applies it, then the answer is lost (500, a reset, a timeout);
- ``hang``: it hangs for the client's timeout, then fails, applied or not (even odds);
- ``truncate``: a read whose body is cut short (the client sees a broken body);
- ``full``: a write refused for want of space (ENOSPC on a local directory), not applied
  (:class:`~s3q.faults.store.FaultyStore` only: S3 has no such answer).

Beside these, a store can be *partitioned*: for a while every request fails at once, while
another writer's store over the same objects works. Tests also *script* faults: the next
requests of one kind to keys with a given prefix meet a chosen fault. Faults that struck are
counted by kind in ``injected``.
"""

from __future__ import annotations

import collections
import random
import threading
import time
from dataclasses import dataclass
from typing import Any

FAULTS = ("delay", "before", "after", "hang", "truncate", "full")
#: Request kinds a fault can be scripted for.
REQUESTS = ("put_new", "put", "put_versioned", "get", "get_versioned", "list", "delete")


@dataclass(frozen=True, slots=True)
class FaultProfile:
    """How often each fault strikes: probabilities per request, and partitions."""

    delay: float = 0.0
    max_delay: float = 0.05  # seconds, drawn uniformly
    before: float = 0.0  # 500 / 503 SlowDown / reset, not applied
    after: float = 0.0  # applied, answer lost
    hang: float = 0.0  # hung until the request timeout
    truncate: float = 0.0  # reads only: body cut short
    full: float = 0.0  # writes only: no space left, not applied
    #: mean seconds between partitions (0: none), and the range of their lengths
    partition_every: float = 0.0
    partition_length: tuple[float, float] = (1.5, 10.0)
    #: seconds every request takes besides the store's own time, drawn uniformly from this
    #: range (an object store's round trip: a proxy only; a ``delay`` fault adds to it)
    latency: tuple[float, float] = (0.0, 0.0)

    def draw(self, rng: random.Random, read: bool) -> str | None:
        """The fault one request meets, if any."""
        x = rng.random()
        for name in FAULTS:
            p: float = getattr(self, name)
            if (name == "truncate" and not read) or (name == "full" and read):
                continue
            if x < p:
                return name
            x -= p
        return None


#: The faults object stores were seen to produce, at realistic rates: about 1 % 5xx, 0.2 %
#: answers lost after applying, 2 % truncated reads, rare hung requests, a partition of
#: 1.5 to 10 s about every 40 s.
REALISTIC = FaultProfile(
    delay=0.02,
    before=0.01,
    after=0.002,
    hang=0.0005,
    truncate=0.02,
    partition_every=40.0,
)

#: No faults, and the latency of S3 standard seen from EC2 in its region: 20-60 ms a request,
#: about 1 in 50 answered up to 100 ms later still (p99 ~150 ms)
S3_LATENCY = FaultProfile(latency=(0.02, 0.06), delay=0.02, max_delay=0.1)

#: Many times the realistic rates, without partitions: for short runs that must meet faults.
HARSH = FaultProfile(delay=0.05, before=0.05, after=0.02, hang=0.002, truncate=0.05)

#: No fault unless scripted.
NONE = FaultProfile()


class Partitions:
    """When a store is cut off: a seeded schedule, and cuts made by hand."""

    def __init__(self, profile: FaultProfile, rng: random.Random) -> None:
        self.profile = profile
        self.rng = rng
        self.until = 0.0  # monotonic time the current cut lasts until
        self.spans: list[tuple[float, float]] = []  # every cut: (start, end), monotonic
        self._next = self._after(time.monotonic())

    def _after(self, now: float) -> float:
        every = self.profile.partition_every
        return now + self.rng.expovariate(1 / every) if every else float("inf")

    def cut(self, seconds: float) -> None:
        """Cut the store off for ``seconds`` from now."""
        now = time.monotonic()
        self.until = max(self.until, now + seconds)
        self.spans.append((now, now + seconds))

    def down(self) -> bool:
        now = time.monotonic()
        if now >= self._next:
            self.cut(self.rng.uniform(*self.profile.partition_length))
            self._next = self._after(self.until)
        return now < self.until


class Schedule:
    """The faults requests meet: drawn from ``profile`` by a generator seeded with ``seed``,
    or scripted. Turn faults off and on with ``enabled``. Safe to share between threads."""

    def __init__(self, profile: FaultProfile, seed: int = 0) -> None:
        self.profile = profile
        self.rng = random.Random(seed)
        self.enabled = True
        self.partitions = Partitions(profile, self.rng)
        self.injected: collections.Counter[str] = collections.Counter()
        self._scripted: list[list[Any]] = []  # [fault, request, key prefix, times left]
        self._lock = threading.Lock()

    def script(self, fault: str, request: str, prefix: str = "", times: int = 1) -> None:
        """Make the next ``times`` requests named ``request`` (one of REQUESTS) to keys
        starting with ``prefix`` meet ``fault`` (one of FAULTS), whatever the profile."""
        if fault not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS}, got {fault!r}")
        if request not in REQUESTS:
            raise ValueError(f"request must be one of {REQUESTS}, got {request!r}")
        with self._lock:
            self._scripted.append([fault, request, prefix, times])

    def draw(self, request: str, key: str, read: bool) -> str | None:
        """The fault this request meets: ``"partition"``, one of FAULTS, or None. The
        injector counts it with :meth:`struck` once it has changed the request's fate."""
        if not self.enabled:
            return None
        with self._lock:
            return self._draw(request, key, read)

    def struck(self, fault: str) -> None:
        with self._lock:
            self.injected[fault] += 1

    def _draw(self, request: str, key: str, read: bool) -> str | None:
        if self.partitions.down():
            return "partition"
        for entry in self._scripted:
            fault, wanted, prefix, left = entry
            if left > 0 and wanted == request and key.startswith(prefix):
                entry[3] = left - 1
                return str(fault)
        return self.profile.draw(self.rng, read)

    def choose(self, *options: str) -> str:
        """One of ``options``, drawn from the schedule's generator."""
        with self._lock:
            return self.rng.choice(options)

    def chance(self, p: float) -> bool:
        with self._lock:
            return self.rng.random() < p

    def delay(self) -> float:
        with self._lock:
            return self.rng.uniform(0, self.profile.max_delay)

    def latency(self) -> float:
        """The seconds of latency the next request takes (the profile's ``latency``)."""
        low, high = self.profile.latency
        if not high:
            return 0.0
        with self._lock:
            return self.rng.uniform(low, high)
