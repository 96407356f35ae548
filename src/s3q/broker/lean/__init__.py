"""The lean request path: the broker's hot calls answered straight from the HTTP parser, without
the ASGI stack (:mod:`.protocol`), as Starlette's routes would answer them (:mod:`.native`)."""

from __future__ import annotations

from .native import NativeCalls
from .protocol import LeanProtocol

__all__ = ["LeanProtocol", "NativeCalls"]
