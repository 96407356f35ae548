"""Queue tags, kept in the queue's saved attributes under ``sqstag.<key>`` and checked as SQS
checks them: at most 50 a queue, keys of 1 to 128 characters, values of at most 256."""

from __future__ import annotations

from collections.abc import Collection

from .protocol import invalid, missing

TAG = "sqstag."
MAX_TAGS = 50
MAX_KEY = 128
MAX_VALUE = 256


def of(saved: dict[str, str]) -> dict[str, str]:
    """The tags among a queue's saved attributes."""
    return {k[len(TAG) :]: v for k, v in saved.items() if k.startswith(TAG)}


def check_keys(keys: Collection[str]) -> None:
    """InvalidParameterValue unless there are keys, each of 1 to 128 characters."""
    if not keys or any(not 1 <= len(key) <= MAX_KEY for key in keys):
        raise invalid(f"Tag keys must be between 1 and {MAX_KEY} characters in length.")


def add(name: str, saved: dict[str, str], tags: dict[str, str]) -> None:
    """Tag queue ``name`` (its ``saved`` attributes) with ``tags``; nothing changes if the
    tags are not valid, or would be more than 50."""
    if not tags:
        raise missing("Tags")
    check_keys(tags)
    if any(len(value) > MAX_VALUE for value in tags.values()):
        raise invalid(f"Tag values must be between 0 and {MAX_VALUE} characters in length.")
    if len(of(saved).keys() | tags.keys()) > MAX_TAGS:
        raise invalid(f"Too many tags added for queue {name}.")
    saved.update((TAG + k, v) for k, v in tags.items())


def remove(saved: dict[str, str], keys: list[str]) -> None:
    """Untag: keys not set are ignored, as SQS does."""
    check_keys(keys)
    for key in keys:
        saved.pop(TAG + key, None)
