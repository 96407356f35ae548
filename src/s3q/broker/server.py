"""Running the broker: ``serve()`` under uvicorn, and where its bearer tokens come from."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidConfig
from ..prices import Prices
from ..wire.peers import is_loopback, normalize
from . import request_log
from .limits import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEAD_TIMEOUT,
    DEFAULT_IDLE_CLOSE,
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_CONNECTIONS,
)

if TYPE_CHECKING:
    import uvicorn

    from .registry import QueueRegistry

TOKENS_ENV = "S3Q_TOKENS"

SQS_CREDENTIALS_ENV = "S3Q_SQS_CREDENTIALS"


def load_tokens(
    token_file: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> set[str]:
    """Tokens from ``token_file`` (one per line; blank lines and ``#`` comments skipped) and
    from ``$S3Q_TOKENS`` (comma-separated)."""
    env = os.environ if env is None else env
    tokens = {t.strip() for t in env.get(TOKENS_ENV, "").split(",") if t.strip()}
    if token_file is not None:
        for line in Path(token_file).read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                tokens.add(line)
    return tokens


def load_sqs_keys(
    credentials_file: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """SQS access keys (id -> secret) from ``credentials_file`` (``ACCESS_KEY_ID:SECRET`` per
    line; blank lines and ``#`` comments skipped) and ``$S3Q_SQS_CREDENTIALS``
    (``AKID:SECRET,AKID2:SECRET2``). InvalidConfig for a malformed entry."""
    env = os.environ if env is None else env
    entries = [e for e in env.get(SQS_CREDENTIALS_ENV, "").split(",") if e.strip()]
    if credentials_file is not None:
        for line in Path(credentials_file).read_text().splitlines():
            if line.strip() and not line.strip().startswith("#"):
                entries.append(line)
    keys: dict[str, str] = {}
    for entry in entries:
        key_id, sep, secret = entry.strip().partition(":")
        if not sep or not key_id or not secret:
            raise InvalidConfig("SQS credentials must be ACCESS_KEY_ID:SECRET entries")
        keys[key_id] = secret
    return keys


def check_exposure(host: str, tokens: set[str] | None, principals: bool = False) -> None:
    """Refuse to serve a non-loopback address without authentication.

    Only bearer tokens and a principals file count: SQS access keys protect the SQS endpoint
    alone, and a broker with tokens (or principals) but no SQS keys refuses every SQS request,
    so no API is left open.
    """
    if not tokens and not principals and not is_loopback(host):
        raise InvalidConfig(
            f"refusing to listen on {host} without tokens: give --token-file or ${TOKENS_ENV} "
            "or --principals (SQS access keys alone leave the native API open), or listen on "
            "127.0.0.1"
        )


def base_url(address: tuple[str, int] | tuple[str, int, int, int]) -> str:
    """The URL to reach a server bound to ``address`` (a wildcard address: this machine's name)."""
    host, port = address[0], address[1]
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/"


def serve(
    store: str,
    host: str = "127.0.0.1",
    port: int = 8765,
    tokens: set[str] | None = None,
    *,
    token_file: str | os.PathLike[str] | None = None,
    sqs_keys: dict[str, str] | None = None,
    sqs_credentials: str | os.PathLike[str] | None = None,
    options: dict[str, Any] | None = None,
    advertise: str | None = None,
    peers: Iterable[str] | None = None,
    graceful_timeout: int = 10,
    log_level: str = "info",
    access_log: bool = False,
    lean: bool = True,
    summary_every: float = request_log.SUMMARY_EVERY,
    on_ready: Callable[[str], None] | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    max_batch: int = DEFAULT_MAX_BATCH,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    head_timeout: float = DEFAULT_HEAD_TIMEOUT,
    body_timeout: float = DEFAULT_BODY_TIMEOUT,
    idle_close: float = DEFAULT_IDLE_CLOSE,
    prices: Prices | None = None,
    principals: str | os.PathLike[str] | None = None,
    audit_log: str | None = None,
    audit_all: bool = False,
) -> None:
    """Serve every queue of ``store`` over HTTP until SIGTERM or Ctrl-C.

    ``tokens`` (plus those of ``token_file`` and ``$S3Q_TOKENS``): when any, every request needs
    one as a bearer token; listening beyond loopback without any raises InvalidConfig.
    ``sqs_keys`` (plus those of ``sqs_credentials`` and ``$S3Q_SQS_CREDENTIALS``): access key
    id -> secret; when any, requests to the SQS endpoint must be SigV4-signed with one. On
    SIGTERM uvicorn stops accepting, lets requests in flight finish (``graceful_timeout``
    seconds at most; long polls end at once, empty), then every queue is closed: pending
    commits finish, leases are released.

    ``advertise``: the URL other brokers over the same store reach this one at (default: the
    address it listens on); they forward the requests of the queues this broker leads to it.
    ``options``, ``peers`` (which may list this broker, so every broker can be given the same
    list), ``max_body``, ``max_batch``, ``body_timeout``, ``idle_close``, ``prices``: as
    :func:`.app.create_app` takes them. ``max_connections``: beyond it, requests are answered
    503 at once; ``head_timeout``: seconds a request's head may take to arrive (the connection
    is closed). ``on_ready`` is called with the broker's URL (where its dashboard is) once it
    listens. ``log_level``: what is logged (to standard error); at info a summary of the
    requests each ``summary_every`` seconds, and with ``access_log`` a line per request
    (``s3q.broker.request_log``). ``lean``: the hot calls answered straight from the HTTP
    parser (``s3q.broker.lean``; not with an access log).

    ``principals`` (one that cannot be used: InvalidConfig before anything starts),
    ``audit_log`` (default: standard output for a broker with credentials), ``audit_all``: as
    :func:`.app.create_app` takes them.
    """
    create_app = _app_maker()
    found = _credentials(host, tokens, token_file, sqs_keys, sqs_credentials, principals)
    authenticated = found.pop("authenticated")
    if advertise is not None:
        normalize(advertise)  # InvalidConfig now, not refused forwarded calls later
    app = create_app(
        store,
        **found,
        options=options,
        address=advertise,
        peers=peers,
        max_body=max_body,
        max_batch=max_batch,
        body_timeout=body_timeout,
        prices=prices,
        idle_close=idle_close,
        audit_log=audit_log if audit_log is not None or not authenticated else "-",
        audit_all=audit_all,
    )
    app.state.summary_every = summary_every
    app.state.lean = app.state.lean if lean and not access_log else None
    settings = (log_level, access_log, graceful_timeout, head_timeout, max_connections)
    _run(app, host, port, *settings, on_ready)


def _credentials(
    host: str,
    tokens: set[str] | None,
    token_file: str | os.PathLike[str] | None,
    sqs_keys: dict[str, str] | None,
    sqs_credentials: str | os.PathLike[str] | None,
    principals: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """The credentials a broker listening on ``host`` checks callers against, as
    :func:`.app.create_app` takes them (``tokens``, ``sqs_keys``, ``principals``: those
    given, and those of the files and the environment, :func:`load_tokens`,
    :func:`load_sqs_keys`), and whether it has any (``authenticated``); InvalidConfig if it
    would listen beyond loopback without tokens (or ``principals``)."""
    all_tokens = set(tokens or ()) | load_tokens(token_file)
    keys = {**load_sqs_keys(sqs_credentials), **(sqs_keys or {})}
    check_exposure(host, all_tokens, principals is not None)
    found: dict[str, Any] = {"tokens": all_tokens, "sqs_keys": keys, "principals": principals}
    return found | {"authenticated": bool(all_tokens or keys or principals is not None)}


def _app_maker() -> Callable[..., Any]:
    """:func:`.app.create_app`; InvalidConfig if the broker's extra is not installed (checked
    before anything starts)."""
    try:
        import uvicorn  # noqa: F401

        from .app import create_app
    except ImportError as exc:
        raise InvalidConfig(
            f"the broker needs its extra ({exc}): pip install 's3q[broker]'"
        ) from None
    return create_app


def _run(
    app: Any,
    host: str,
    port: int,
    log_level: str,
    access_log: bool,
    graceful_timeout: int,
    head_timeout: float,
    max_connections: int,
    on_ready: Callable[[str], None] | None,
) -> None:
    """Serve ``app`` under uvicorn until SIGTERM or Ctrl-C, the broker's own log lines shown at
    ``log_level`` (see :func:`serve`)."""
    import uvicorn

    request_log.show(log_level)
    registry: QueueRegistry = app.state.registry
    config = configure(
        app,
        host,
        port,
        log_level=log_level,
        access_log=access_log,
        graceful_timeout=graceful_timeout,
        head_timeout=head_timeout,
        max_connections=max_connections,
    )

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if not self.started:
                return
            url = next(base_url(s.getsockname()) for server in self.servers for s in server.sockets)
            if registry.address is None:  # before any request: no queue is open yet
                registry.advertise(url.rstrip("/"))
            if on_ready is not None:
                on_ready(url)

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            registry.drain()  # long polls answer now, so requests finish within the grace
            await super().shutdown(sockets)

    Server(config).run()


def configure(
    app: Any,
    host: str,
    port: int,
    *,
    log_level: str = "info",
    access_log: bool = False,
    graceful_timeout: int = 10,
    head_timeout: float = DEFAULT_HEAD_TIMEOUT,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
) -> uvicorn.Config:
    """uvicorn's settings for serving the broker ``app`` (of :func:`.app.create_app`): its
    HTTP protocol, with the lean path unless ``app.state.lean`` is None (see :func:`serve`),
    and its WebSocket protocol for subscriptions, frames up to ``app.state.max_frame``."""
    import uvicorn

    from . import connections

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        lifespan="on",
        log_level=log_level,
        access_log=access_log,
        timeout_graceful_shutdown=graceful_timeout,
        server_header=False,
        http=connections.protocol(head_timeout, lean=app.state.lean),  # httptools if installed
        loop="auto",  # uvloop when installed
        limit_concurrency=max_connections,
        # subscriptions (s3q.broker.subscriptions): frames up to the largest request body, no
        # compression (payloads are the user's, often compressed already), a ping every 20 s
        # that ends a channel whose consumer vanished (and gives its leases back)
        ws=_websockets(),
        ws_max_size=app.state.max_frame,
        ws_per_message_deflate=False,
        ws_ping_interval=20.0,
        ws_ping_timeout=20.0,
    )


def _websockets() -> str:
    """uvicorn's WebSocket protocol: websockets' sans-I/O one, or none without the package
    (clients then poll: a subscription's handshake is refused)."""
    try:
        import websockets  # noqa: F401
    except ImportError:
        return "none"
    return "websockets-sansio"


def spawn(
    store: str,
    port: int | None = None,
    options: dict[str, Any] | None = None,
    log_level: str = "warning",
    timeout: float = 30.0,
    **settings: Any,
) -> tuple[subprocess.Popen[bytes], str]:
    """:func:`serve` ``store`` in a child process on 127.0.0.1 (``port``: a free one if None);
    the process and the broker's URL, once it answers. ``options`` and ``settings`` (more
    keywords of :func:`serve`) must be literals (they are written into the child's command
    line). InvalidConfig if it exits or stays silent."""
    if port is None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
    code = (
        "from s3q.broker import serve; "
        f"serve({store!r}, port={port}, options={options or {}!r}, log_level={log_level!r}"
        + "".join(f", {name}={value!r}" for name, value in settings.items())
        + ")"
    )
    child = subprocess.Popen([sys.executable, "-c", code])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        if child.poll() is not None:
            raise InvalidConfig(f"the broker exited at start ({child.returncode})")
        with contextlib.suppress(OSError), urllib.request.urlopen(url + "/openapi.json", timeout=1):
            return child, url
        if time.monotonic() > deadline:
            child.kill()
            raise InvalidConfig(f"the broker did not answer within {timeout:g} s")
        time.sleep(0.05)  # a child process we do not control: poll until it answers
