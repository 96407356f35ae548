"""What ``s3q enqueue`` reads: its PAYLOAD, the lines of stdin or a JSON Lines file, and
``--attribute KEY=VALUE`` pairs, each message checked before any is enqueued; the
``--set KEY=VALUE`` queue settings of ``s3q create``; and the writer options of ``s3q serve``."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console

from ..config import PERSISTED, QueueConfig, Setting
from ..errors import InvalidArgument, InvalidConfig
from ..validate import item_of
from .errors import one_line
from .render import progress_bar

#: the keys of a line of an enqueue file
FILE_KEYS = (
    "payload",
    "payload_base64",
    "priority",
    "delay",
    "group",
    "dedup_id",
    "attributes",
    "tenant",
)


Item = bytes | dict[str, Any]  # an element of enqueue_batch
F = TypeVar("F", bound=Callable[..., Any])


class LineError(Exception):
    """What is wrong with one line of an enqueue file."""


def parse_pairs(pairs: tuple[str, ...], option: str) -> dict[str, str]:
    """``KEY=VALUE`` pairs of a repeatable ``option`` as a mapping (a later KEY wins)."""
    mapping: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint=option)
        mapping[key] = value
    return mapping


def parse_attributes(pairs: tuple[str, ...]) -> dict[str, str] | None:
    """``--attribute KEY=VALUE`` pairs as a mapping; None for none."""
    return parse_pairs(pairs, "--attribute") or None


def parse_settings(pairs: tuple[str, ...]) -> dict[str, Setting]:
    """``--set KEY=VALUE`` queue settings (``s3q.config.PERSISTED``), each VALUE read as JSON
    (``5``, ``0.5``, ``null``, ``{"team": "a"}``), else as text (``fair``): its type and bounds
    are left to ``QueueConfig``, whose InvalidConfig says what is wrong."""
    settings: dict[str, Setting] = {}
    for key, text in parse_pairs(pairs, "--set").items():
        if key not in PERSISTED:
            raise InvalidConfig(
                f"{key!r} is not a setting saved with a queue; those are: {', '.join(PERSISTED)}"
            )
        try:
            settings[key] = json.loads(text)
        except json.JSONDecodeError:
            settings[key] = text
    return settings


def read_items(
    payload: str | None,
    from_stdin: bool,
    path: str | None,
    defaults: dict[str, Any],
    max_size: int,
    err: Console,
) -> list[Item]:
    """The messages to enqueue, with ``defaults``: PAYLOAD, each line of stdin, or each line
    of the file at ``path`` (exactly one of them is given)."""
    if payload is not None:
        items: list[Item] = [{"payload": os.fsencode(payload), **defaults}]
        item_of(items[0], max_size)
        return items
    if from_stdin:
        return read_stdin_items(defaults, max_size)
    assert path is not None
    return read_file_items(path, defaults, max_size, err)


def file_item(raw: bytes, defaults: dict[str, Any], max_size: int) -> Item:
    """One line of an enqueue file as a checked item of ``enqueue_batch``."""
    try:
        obj = json.loads(raw.rstrip(b"\r\n"))
    except json.JSONDecodeError as exc:
        raise LineError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except UnicodeDecodeError:
        raise LineError("not UTF-8 text") from None
    if not isinstance(obj, dict):
        raise LineError(f"expected a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(FILE_KEYS))
    if unknown:
        raise LineError(f"unknown key(s) {', '.join(unknown)} (known: {', '.join(FILE_KEYS)})")
    if ("payload" in obj) == ("payload_base64" in obj):
        raise LineError('needs "payload" (text) or "payload_base64", exactly one')
    entry = {**defaults, **{k: v for k, v in obj.items() if not k.startswith("payload")}}
    if "payload" in obj:
        if not isinstance(obj["payload"], str):
            raise LineError('"payload" must be a string (binary data: "payload_base64")')
        try:
            entry["payload"] = obj["payload"].encode()
        except UnicodeEncodeError:
            raise LineError('"payload" is not valid Unicode') from None
    else:
        try:
            entry["payload"] = base64.b64decode(obj["payload_base64"], validate=True)
        except (TypeError, ValueError):
            raise LineError('"payload_base64" must be a base64 string') from None
    try:
        item_of(entry, max_size)
    except InvalidArgument as exc:
        raise LineError(one_line(exc)) from None
    return entry["payload"] if len(entry) == 1 else entry  # bare payloads take less memory


def read_file_items(path: str, defaults: dict[str, Any], max_size: int, err: Console) -> list[Item]:
    """Every message of a JSON Lines file, all checked before any is enqueued."""
    label = "stdin" if path == "-" else path
    items: list[Item] = []
    with contextlib.ExitStack() as stack:
        stream = sys.stdin.buffer if path == "-" else stack.enter_context(open(path, "rb"))
        size = None if path == "-" else os.fstat(stream.fileno()).st_size
        bar = stack.enter_context(progress_bar(err, show=(size or 0) > 2**20))
        task = bar.add_task(f"checking {label}", total=size)
        for number, raw in enumerate(stream, 1):
            if size and number % 10_000 == 0:
                bar.update(task, completed=stream.tell())
            if not raw.strip():
                continue  # blank lines are allowed, as in most JSON Lines files
            try:
                items.append(file_item(raw, defaults, max_size))
            except LineError as exc:
                raise click.ClickException(
                    f"{label} line {number}: {exc}; nothing was enqueued"
                ) from None
    return items


def read_stdin_items(defaults: dict[str, Any], max_size: int) -> list[Item]:
    """Each line of standard input (without its line ending) as a message, all checked."""
    if sys.stdin.isatty():
        click.echo("reading messages from stdin, one per line; end with Ctrl-D", err=True)
    lines = sys.stdin.buffer.read().split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the final line ending does not start another message
    items: list[Item] = []
    for number, line in enumerate(lines, 1):
        entry = {"payload": line.removesuffix(b"\r"), **defaults}
        try:
            item_of(entry, max_size)
        except InvalidArgument as exc:
            raise click.ClickException(
                f"stdin line {number}: {one_line(exc)}; nothing was enqueued"
            ) from None
        items.append(entry if defaults else entry["payload"])
    return items


def _writer_seconds(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """A writer option in seconds, checked as a queue checks it (BadParameter if not)."""
    if value is None:
        return None
    try:
        seconds: Any = float(value)
    except ValueError:
        seconds = value
    try:
        QueueConfig(**{str(param.name): seconds})
    except InvalidConfig as exc:
        raise click.BadParameter(str(exc)) from None
    return seconds


def lease_ttl_option(command: F) -> F:
    """``--lease-ttl SECONDS`` of ``s3q serve``."""
    return click.option(
        "--lease-ttl",
        metavar="SECONDS",
        callback=_writer_seconds,
        help="On an object store, how long the broker's lease (and so each queue it leads) "
        "outlives its last renewal: another broker takes its queues over this long after it "
        "stops; renewals cost a PUT every third of it [default: 10].",
    )(command)


def writer_options(**given: float | None) -> dict[str, Any] | None:
    """The writer options of ``s3q serve`` given (those not None), or None if none was."""
    return {k: v for k, v in given.items() if v is not None} or None
