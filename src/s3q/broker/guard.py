"""What keeps web pages out of a broker: requests from a foreign origin or a foreign host name.

A browser lets any page send a "simple" request (a POST of ``text/plain``, no custom header)
to any address, the broker's on 127.0.0.1 included, and a page whose DNS name is rebound to
127.0.0.1 may even read the answers. So the broker refuses, before routing:

* a request whose ``Origin`` is not the broker's own (a page elsewhere, or ``null``): 403;
* when it has no tokens (it then only listens on loopback), a request whose ``Host`` is not a
  loopback name or address: 400 (starlette's ``TrustedHostMiddleware``).

The native API also requires a msgpack or JSON body type on every POST (see ``app``), which
no simple request can have.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import msgspec
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]", "*.localhost"]


class SameOriginMiddleware:
    """Refuse requests that a browser sent on behalf of a page of another origin."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # (a page may open one to any address: refused too)
            headers = Headers(scope=scope)
            origin = headers.get("origin")
            if origin is not None and not _same(origin, headers.get("host"), websocket=True):
                await send({"type": "websocket.close", "code": 1008})  # (HTTP 403)
                return
        elif scope["type"] == "http":
            headers = Headers(scope=scope)
            origin = headers.get("origin")
            if origin is not None and not _same(origin, headers.get("host", "")):
                body = msgspec.json.encode(
                    {
                        "error": "AuthError",
                        "message": f"requests from pages of {origin} are refused: "
                        "the broker serves its own origin only",
                    }
                )
                await send(
                    {
                        "type": "http.response.start",
                        "status": 403,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def _same(origin: str, host: str | None, websocket: bool = False) -> bool:
    parts = urlsplit(origin)
    schemes = ("http", "https", "ws", "wss") if websocket else ("http", "https")
    return parts.scheme in schemes and parts.netloc.lower() == (host or "").lower()


class HostCheck:
    """Whether the broker's ``TrustedHostMiddleware`` lets a ``Host`` header through: asked
    of the middleware itself, once per value (for the few values a broker sees)."""

    def __init__(self, allowed: list[str] = LOOPBACK_HOSTS, remember: int = 64) -> None:
        self.remember = remember
        self._known: dict[bytes, bool] = {}
        self._passed = False

        async def inner(scope: Scope, receive: Receive, send: Send) -> None:
            self._passed = True

        self._middleware = TrustedHostMiddleware(inner, allowed_hosts=allowed)

    def allows(self, host: bytes) -> bool:
        known = self._known.get(host)
        if known is None:
            known = self._decide(host)
            if len(self._known) < self.remember:
                self._known[host] = known
        return known

    def _decide(self, host: bytes) -> bool:
        async def nothing(*args: object) -> Any:
            return None

        headers = [(b"host", host)] if host else []
        scope: dict[str, Any] = {"type": "http", "method": "GET", "path": "/", "root_path": ""}
        scope |= {"scheme": "http", "server": None, "headers": headers, "query_string": b""}
        self._passed = False
        run = self._middleware(scope, nothing, nothing)
        try:  # neither the guard's refusal nor ``inner`` waits: one step runs it through
            run.send(None)
        except StopIteration:
            return self._passed
        run.close()
        return False


def middleware(*, tokens: bool) -> list[Middleware]:
    """The guards of a broker (``tokens``: whether it has bearer tokens)."""
    guards = [Middleware(SameOriginMiddleware)]
    if not tokens:
        guards.append(Middleware(TrustedHostMiddleware, allowed_hosts=LOOPBACK_HOSTS))
    return guards
