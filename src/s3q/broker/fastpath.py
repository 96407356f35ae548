"""The broker's hot routes without the generic stack: a request to a native API call or to the
SQS endpoint goes straight to its handler.

Starlette would take such a request through five layers of middleware and try every route's
pattern in turn (the SQS endpoint is matched after the native API's and the dashboard's) before
calling the same handler. Here a table built once from the same routes finds it in one lookup,
and the guards (:mod:`.guard`) are checked on the raw headers. Anything the table does not
hold, and any request a guard might refuse (one with an ``Origin``, or whose ``Host`` is not
one it allows), takes the generic stack, so answers stay exactly those of Starlette.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Receive, Scope, Send

from .guard import HostCheck

Handler = Callable[[Request], Awaitable[Response]]
QUEUES = "/v1/queues/"


def _probe(method: str, path: str) -> Scope:
    return {"type": "http", "method": method, "path": path, "root_path": "", "headers": []}


def table(
    routes: Iterable[BaseRoute],
) -> tuple[
    dict[tuple[str, str], tuple[Route, Handler]], dict[tuple[str, str], tuple[Route, Handler]]
]:
    """The routes a request reaches by a lookup: ``(method, path)`` for those without
    parameters, ``(method, operation)`` for ``/v1/queues/{name}/<operation>``. A route is only
    taken if no route before it would match the same request (Starlette takes the first)."""
    routes = list(routes)
    exact: dict[tuple[str, str], tuple[Route, Handler]] = {}
    by_queue: dict[tuple[str, str], tuple[Route, Handler]] = {}
    for index, route in enumerate(routes):
        if (
            not isinstance(route, Route)
            or not route.methods
            or not inspect.iscoroutinefunction(route.endpoint)
        ):
            continue
        path = route.path
        if "{" not in path:
            key, into, probe = path, exact, path
        elif path.startswith(QUEUES + "{name}/") and "{" not in path[len(QUEUES) + 7 :]:
            key = path[len(QUEUES) + 7 :]
            into, probe = by_queue, QUEUES + "probe-name/" + key
        else:
            continue
        for method in route.methods:
            scope = _probe(method, probe)
            if route.matches(scope)[0] is not Match.FULL:
                continue
            if any(r.matches(scope)[0] is Match.FULL for r in routes[:index]):
                continue
            into.setdefault((method, key), (route, route.endpoint))
    return exact, by_queue


class Broker(Starlette):
    """Starlette, with the hot routes looked up (see the module's documentation)."""

    _fast: tuple[dict[tuple[str, str], Any], dict[tuple[str, str], Any]] | None = None
    host_check: HostCheck | None = None  # None: any Host (the broker has tokens)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("root_path"):
            found = self._route(scope)
            if found is not None:
                scope["app"] = self
                await _serve(found, scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    def _route(self, scope: Scope) -> tuple[Route, Handler] | None:
        if self._fast is None:
            if getattr(self, "max_body_size", None) is not None:
                return None  # a layer the lookup would skip
            self._fast = table(self.router.routes)
        host = b""
        for name, value in scope["headers"]:
            if name == b"origin":
                return None  # the guard decides
            if name == b"host" and not host:
                host = value
        if self.host_check is not None and not self.host_check.allows(host):
            return None
        path: str = scope["path"]
        method: str = scope["method"]
        exact, by_queue = self._fast
        if path.startswith(QUEUES):
            name, slash, operation = path[len(QUEUES) :].partition("/")
            if not name or not slash or "/" in operation:
                return None
            found = by_queue.get((method, operation))
            if found is not None:
                scope["path_params"] = {"name": name}
            return found
        found = exact.get((method, path))
        if found is not None:
            scope["path_params"] = {}
        return found


async def _serve(found: tuple[Route, Handler], scope: Scope, receive: Receive, send: Send) -> None:
    route, handler = found
    scope["route"] = route
    scope["endpoint"] = handler
    started = False

    async def tracked(message: Any) -> None:
        nonlocal started
        if message["type"] == "http.response.start":
            started = True
        await send(message)

    try:
        response = await handler(Request(scope, receive, send))
        await response(scope, receive, tracked)
    except Exception:
        # as Starlette's ServerErrorMiddleware: a plain 500 if nothing was sent, and the
        # error raised on, for the server to log
        if not started:
            await PlainTextResponse("Internal Server Error", status_code=500)(scope, receive, send)
        raise
