"""``python -m s3q.cli``: the ``s3q`` command."""

from __future__ import annotations

from .commands import main

main()
