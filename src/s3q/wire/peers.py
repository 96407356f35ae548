"""Brokers' URLs as a cluster compares them: normalised, and whether a host is this machine's.

The broker (its peers, the leases it writes) and the client (the brokers it learns) spell a
broker's URL the same way, so that one broker is one string wherever it is named.
"""

from __future__ import annotations

import functools
import ipaddress
from urllib.parse import urlsplit

from ..errors import InvalidConfig

LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


@functools.lru_cache(maxsize=256)
def normalize(url: str) -> str:
    """``url`` of a broker as ``scheme://host:port[/path]``: lower case, the port explicit, no
    trailing slash, no query. InvalidConfig if it is not an http(s) URL with a host."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise InvalidConfig(f"not a broker URL: {url!r} ({exc})") from None
    scheme = parts.scheme.lower()
    host = parts.hostname
    if scheme not in ("http", "https") or not host:
        raise InvalidConfig(f"not a broker URL: {url!r} (give http://HOST:PORT)")
    if ":" in host:
        host = f"[{host}]"
    if port is None:
        port = 443 if scheme == "https" else 80
    return f"{scheme}://{host}:{port}{parts.path.rstrip('/')}"


def is_loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine (a broker's own, or a peer's)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
