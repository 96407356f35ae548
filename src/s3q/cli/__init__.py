"""The ``s3q`` command line: :func:`main`, the click group of every command.

:mod:`.commands` holds the group and the queue's commands, :mod:`.serving` ``serve`` and
``worker``, :mod:`.history_commands` ``history`` and ``replay``: each parses and hands off;
:mod:`.render` prints, :mod:`.inputs` reads enqueue's
input, :mod:`.stores` turns ``--store`` and queue names into URLs, :mod:`.errors` makes errors
one line, :mod:`.demo` is ``s3q demo``.
"""

from __future__ import annotations

from . import history_commands, serving  # noqa: F401  (their commands join main)
from .commands import main

__all__ = ["main"]
