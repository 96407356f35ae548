"""The broker's web dashboard: a page at ``GET /`` and the one JSON summary it polls.

The page (HTML, CSS and JS shipped in ``static/``, no network needed) holds no queue data: it
reads everything with ``fetch`` from ``GET /dashboard/summary`` and the ``/v1`` API
(dead letters, redrive), sending the bearer token the user typed, kept in ``sessionStorage``.
So the summary is guarded exactly like ``/v1``, and shows only the queues its caller's
principal may read; no cookie is used, hence no CSRF to mind.
The throughput of the last minutes is kept by the broker (:class:`.history.History`) and sent
once, when the page opens.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from importlib import resources
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...errors import S3QError
from ...wire.codec import error_body, status_of
from ..access import Access
from ..metrics import REQUEST_KINDS, STATUSES, BrokerMetrics, by_kind
from ..registry import QueueRegistry
from .history import History, finished

STATIC = resources.files(__package__) / "static"
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}
# The page runs only its own script and style and talks only to this broker.
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
STAT_FIELDS = (
    *STATUSES,
    "total_enqueued",
    "commits",
    "mean_ops_per_commit",
    "store_requests",
    "noisy_tenants",
    "quiet_visible",
    "quiet_in_flight",
    "quiet_delayed",
    "quiet_oldest_age",
)


def public_url(store: str) -> str:
    """``store`` without its query, which may hold credentials."""
    if "://" not in store:
        return store
    return urlunsplit(urlsplit(store)._replace(query="", fragment=""))


def _static(name: str) -> bytes:
    return (STATIC / name).read_bytes()


def routes(
    registry: QueueRegistry, metrics: BrokerMetrics, history: History, access: Access
) -> list[Route]:
    """The dashboard's routes; its summary's caller is identified as the API's are (the same
    AuthError if it cannot be) and shown only the queues it may read.
    ``GET /dashboard/summary?history=1`` adds the throughput ``history`` of the last minutes."""
    assets = {
        name: (_static(name), MEDIA_TYPES["." + name.rsplit(".", 1)[-1]])
        for name in ("dashboard.css", "dashboard.js")
    }
    page = _static("index.html")

    async def index(request: Request) -> Response:
        return Response(page, media_type=MEDIA_TYPES[".html"], headers=HEADERS)

    async def asset(request: Request) -> Response:
        found = assets.get(request.path_params["file"])
        if found is None:
            return Response("not found", 404, media_type="text/plain")
        return Response(found[0], media_type=found[1], headers=HEADERS)

    async def summary(request: Request) -> Response:
        try:
            caller = access.identify(request, "dashboard", None)
        except S3QError as exc:
            return JSONResponse(error_body(exc), status_of(exc), headers=HEADERS)
        sees = functools.partial(access.allows, caller, "read")
        answer = await build_summary(registry, metrics, auth=access.authenticated, sees=sees)
        if request.query_params.get("history") == "1":
            answer["history"] = history.summary(sees)
        access.done(caller, "read", "dashboard", None, "ok")
        return JSONResponse(answer, headers=HEADERS)

    return [
        Route("/", index, methods=["GET"]),
        Route("/dashboard/static/{file}", asset, methods=["GET"]),
        Route("/dashboard/summary", summary, methods=["GET"]),
    ]


def _everyone(name: str) -> bool:
    return True


async def build_summary(
    registry: QueueRegistry,
    metrics: BrokerMetrics,
    *,
    auth: bool,
    sees: Callable[[str], bool] = _everyone,
) -> dict[str, Any]:
    """Every open queue's figures now, the commit latency of the last minutes, and what the
    broker's store requests cost (``cost``: since it started and per month at the rate of the
    last ten minutes, with the prices reckoned at and the requests by kind).

    A queue whose figures cannot be read (its writer stopped) is listed with its ``error``;
    one its caller may not read (``sees``) is not listed.
    Throughput is left to the page: it differentiates ``total_enqueued`` and ``finished``
    (messages that left the queue's live states: completed, purged or retired) between two polls.
    """
    queues: list[dict[str, Any]] = []
    for name in registry.names():
        if not sees(name):
            continue
        queue = registry.local(name)
        if queue is None:  # closed meanwhile
            continue
        entry: dict[str, Any] = {"name": name, "error": None}
        try:  # read as it is: watching a queue does not keep it open
            stats = await queue.stats()
        except S3QError as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"
        else:
            entry.update({f: getattr(stats, f) for f in STAT_FIELDS})
            entry["finished"] = finished(stats)
        queues.append(entry)
    return {
        "store": public_url(registry.store),
        "time": time.time(),
        "auth": auth,
        "queues": queues,
        "commit_latency": metrics.commit_latency.summary(),
        "cost": cost(registry, metrics),
    }


def cost(registry: QueueRegistry, metrics: BrokerMetrics) -> dict[str, Any]:
    """The ``cost`` of the summary; ``store_kind`` tells a local directory (or memory), which
    charges nothing per request unless prices were given, from an object store."""
    requests = registry.requests()
    dollars = metrics.dollars(requests)
    return {
        "store_kind": registry.lease.kind,
        "dollars": dollars,
        "per_month": metrics.spend_rate.per_month(dollars),
        "put_price": metrics.prices.put,
        "get_price": metrics.prices.get,
        "requests": dict(zip(REQUEST_KINDS, by_kind(requests), strict=True)),
    }
