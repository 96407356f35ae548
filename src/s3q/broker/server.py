"""Running the broker: ``serve()`` under uvicorn, and where its bearer tokens come from."""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import InvalidConfig

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


def advertised_address(host: str, port: int) -> str:
    """Where other brokers reach one listening on ``host:port``: a wildcard address is
    replaced by this machine's name."""
    if host in ("0.0.0.0", "::", ""):
        host = socket.getfqdn()
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


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
) -> None:
    """Serve every queue of ``store`` over HTTP until SIGTERM or Ctrl-C.

    ``tokens`` (plus those of ``token_file`` and ``$S3Q_TOKENS``): when any, every request needs
    one as a bearer token; listening beyond loopback without any raises InvalidConfig. On
    SIGTERM uvicorn stops accepting, lets requests in flight finish (``graceful_timeout``
    seconds at most), then every queue is closed: pending commits finish, leases are released.

    ``advertise``: the URL other brokers over the same store reach this one at (default
    ``http://host:port``); they forward the requests of the queues this broker leads to it.
    """
    import uvicorn

    from .app import create_app

    all_tokens = set(tokens or ()) | load_tokens(token_file)
    check_exposure(host, all_tokens)
    address = advertise or advertised_address(host, port)
    app = create_app(store, tokens=all_tokens, options=options, address=address)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        lifespan="on",
        log_level=log_level,
        timeout_graceful_shutdown=graceful_timeout,
        server_header=False,
    )
    uvicorn.Server(config).run()
