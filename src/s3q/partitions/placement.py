"""Where the parts of a partitioned queue live, and what they are called.

Partition 0 is the queue's own log, at its URL; partition ``i`` lives under the queue's prefix,
at ``partitions/<i>`` (:func:`url_of`), its objects' keys prefixed the same way (:func:`key_of`).
A message with a group goes to its group's partition and one with a dedup id to that id's
(:func:`placed`, :func:`home`: the same in every process and every build). Between brokers
partition ``i`` of queue ``q`` is ``q@i`` (:func:`name_of`).
"""

from __future__ import annotations

import hashlib

from ..config import MAX_PARTITIONS
from ..errors import InvalidArgument
from ..log.staging import StagedObject
from ..store import queue_url
from ..store.base import PARTITIONS

#: what a broker's name of a partition puts between the queue's name and the partition's number
SEPARATOR = "@"


def url_of(url: str, index: int) -> str:
    """The URL of partition ``index`` of the queue at ``url``."""
    return url if index == 0 else queue_url(url, f"{PARTITIONS}/{index}")


def key_of(index: int, key: str) -> str:
    """The key, from the queue's URL, of object ``key`` of partition ``index``."""
    return key if index == 0 else f"{PARTITIONS}/{index}/{key}"


def split_key(key: str) -> tuple[int, str]:
    """A key from the queue's URL as its partition's number and its key there (``key_of``)."""
    head, _, rest = key.partition("/")
    number, _, inner = rest.partition("/")
    if head == PARTITIONS and number.isdigit() and str(int(number)) == number and inner:
        return int(number), inner
    return 0, key


def placed(group: object, dedup_id: object, count: int) -> int | None:
    """The partition a message with ``group`` and ``dedup_id`` must go to: its group's, else its
    dedup id's; None: any (or a key that is not a string, which the partition refuses)."""
    key = group if group is not None else dedup_id
    return home(key, count) if isinstance(key, str) else None


def name_of(name: str, index: int) -> str:
    """A broker's name of partition ``index`` of queue ``name`` (``NAME@0`` is the queue's own
    log: ``NAME`` alone names the whole queue)."""
    return f"{name}{SEPARATOR}{index}"


def split_name(name: str) -> tuple[str, int | None]:
    """A broker's queue name as the queue's name and the partition's number (None: the whole
    queue)."""
    base, sep, number = name.rpartition(SEPARATOR)
    if sep and number.isdigit() and int(number) < MAX_PARTITIONS and str(int(number)) == number:
        return base, int(number)
    return name, None


def log_name(name: str) -> str:
    """The name a broker keeps the log named ``name`` under: partition 0 is the queue's own."""
    base, index = split_name(name)
    return base if index == 0 else name


def home(key: str, count: int) -> int:
    """The partition of a group or dedup id: the same in every process and every build."""
    digest = hashlib.blake2b(key.encode(errors="surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


def token_of(token: str | None, index: int) -> str | None:
    """The commit token of a staged commit in ``part`` (partition 0: the token itself)."""
    return token if token is None or index == 0 else f"{token}{SEPARATOR}{index}"


def check_placed(obj: StagedObject, index: int, count: int) -> None:
    """Every message of ``obj`` with a group or dedup id belongs in partition ``index``."""
    if count == 1 or (obj.groups is None and obj.dedup_ids is None):
        return
    groups = obj.groups or [None] * len(obj)
    dedups = obj.dedup_ids or [None] * len(obj)
    for i, (group, dedup_id) in enumerate(zip(groups, dedups, strict=False)):
        home_index = placed(group, dedup_id, count)
        if home_index is not None and home_index != index:
            raise InvalidArgument(
                f"{obj.row(i)}: its {'group' if group is not None else 'dedup id'} belongs in "
                f"partition {home_index} of the queue, not in {index} where it was staged"
            )
