"""Running the broker: ``serve()`` under uvicorn, and where its bearer tokens come from."""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidConfig

if TYPE_CHECKING:
    from .registry import QueueRegistry

TOKENS_ENV = "S3Q_TOKENS"
LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


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


def is_loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, tokens: set[str] | None) -> None:
    """Refuse to serve a non-loopback address without authentication."""
    if not tokens and not is_loopback(host):
        raise InvalidConfig(
            f"refusing to listen on {host} without tokens: give --token-file or ${TOKENS_ENV}, "
            "or listen on 127.0.0.1"
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
    options: dict[str, Any] | None = None,
    advertise: str | None = None,
    graceful_timeout: int = 10,
    log_level: str = "info",
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve every queue of ``store`` over HTTP until SIGTERM or Ctrl-C.

    ``tokens`` (plus those of ``token_file`` and ``$S3Q_TOKENS``): when any, every request needs
    one as a bearer token; listening beyond loopback without any raises InvalidConfig. On
    SIGTERM uvicorn stops accepting, lets requests in flight finish (``graceful_timeout``
    seconds at most), then every queue is closed: pending commits finish, leases are released.

    ``advertise``: the URL other brokers over the same store reach this one at (default: the
    address it listens on); they forward the requests of the queues this broker leads to it.
    ``on_ready`` is called with the broker's URL (where its dashboard is) once it listens.
    """
    try:
        import uvicorn

        from .app import create_app
    except ImportError as exc:
        raise InvalidConfig(
            f"the broker needs its extra ({exc}): pip install 's3q[broker]'"
        ) from None

    all_tokens = set(tokens or ()) | load_tokens(token_file)
    check_exposure(host, all_tokens)
    app = create_app(store, tokens=all_tokens, options=options, address=advertise)
    registry: QueueRegistry = app.state.registry
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        lifespan="on",
        log_level=log_level,
        timeout_graceful_shutdown=graceful_timeout,
        server_header=False,
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

    Server(config).run()
