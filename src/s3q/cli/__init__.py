"""The ``s3q`` command line: :func:`main`, the click group of every command.

:mod:`.commands` parses and hands off; :mod:`.render` prints, :mod:`.inputs` reads enqueue's
input, :mod:`.stores` turns ``--store`` and queue names into URLs, :mod:`.errors` makes errors
one line, :mod:`.demo` is ``s3q demo``.
"""

from __future__ import annotations

from .commands import main

__all__ = ["main"]
