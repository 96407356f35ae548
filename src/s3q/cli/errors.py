"""Errors as the command line reports them: one line and exit code 1, no traceback."""

from __future__ import annotations

import binascii
import json
import os
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import click

from ..errors import S3QError, StoreError

F = TypeVar("F", bound=Callable[..., Any])


def friendly_errors(command: F) -> F:
    """Turn s3q, file and JSON errors into a one-line message and exit code 1: no traceback."""

    @wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except S3QError as exc:
            hint = ""
            if isinstance(exc, StoreError):
                hint = " (check --store / S3Q_STORE, the endpoint and the credentials)"
            raise click.ClickException(f"{type(exc).__name__}: {one_line(exc)}{hint}") from None
        except BrokenPipeError:  # `s3q ... | head`: the reader left; say nothing more
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            sys.exit(1)
        except OSError as exc:
            where = f": {exc.filename}" if exc.filename else ""
            raise click.ClickException(f"{exc.strerror or one_line(exc)}{where}") from None
        except (json.JSONDecodeError, UnicodeDecodeError, binascii.Error) as exc:
            raise click.ClickException(f"{type(exc).__name__}: {one_line(exc)}") from None

    return run  # type: ignore[return-value]


def one_line(exc: BaseException) -> str:
    """An exception's message with its whitespace (newlines included) folded to single spaces."""
    return " ".join(str(exc).split())
