"""The lean request path: the broker's hot calls answered straight from the HTTP parser, without
the ASGI stack (:mod:`.protocol`), as Starlette's routes would answer them: the native API's
(:mod:`.native`) and the SQS endpoint's (:mod:`.sqs`), chosen by :mod:`.routes`, written as
bytes by :mod:`.writing`."""

from __future__ import annotations

from .native import NativeCalls
from .protocol import LeanProtocol
from .routes import LeanRoutes
from .sqs import SqsCalls

__all__ = ["LeanProtocol", "LeanRoutes", "NativeCalls", "SqsCalls"]
