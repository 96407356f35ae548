"""What one broker of a cluster sends another instead of its bearer token.

A call forwarded to the broker that leads a queue carries no bearer token, but
``Authorization: S3Q-HMAC-SHA256 t=<unix seconds>,d=<body SHA-256>,s=<signature>``: an
HMAC-SHA256, keyed by the cluster's token, over the call's method, its destination (the URL the
leader advertises, normalised), path, query, the digest of its body and the time. The receiver
checks it with each of its tokens against its own advertised address and clock (within
:data:`WINDOW` seconds either way, so clocks may drift that far apart), and the body against
its digest once the body is in. Whoever receives a forwarded call (a peer, or an address a
forged lease names) holds no secret: the signature is good for that one call, to that one
address, for a minute; sent to any other broker, it is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote, urlencode

from ..wire.codec import AuthError
from ..wire.peers import normalize

AUTH_SCHEME = "S3Q-HMAC-SHA256"
WINDOW = 60.0  # seconds a signature is good for, either side of the receiver's clock
_VERSION = "s3q-peer-1"


def _canonical(
    target: str, method: str, path: str, query: Iterable[tuple[str, Any]], stamp: int, digest: str
) -> bytes:
    pairs = sorted((str(k), str(v)) for k, v in query)
    fields = (_VERSION, method.upper(), normalize(target), unquote(path), urlencode(pairs))
    return "\n".join((*fields, str(stamp), digest)).encode()


def _mac(key: bytes, message: bytes) -> str:
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def sign(
    key: str,
    target: str,
    method: str,
    path: str,
    params: Mapping[str, Any],
    body: bytes | None,
    *,
    now: float | None = None,
) -> dict[str, str]:
    """The headers of a call to the broker at ``target``: its ``Authorization``, signed with
    ``key`` (a token of the cluster) over the call (``path`` as sent, quoted or not)."""
    stamp = int(time.time() if now is None else now)
    digest = hashlib.sha256(body or b"").hexdigest()
    message = _canonical(target, method, path, params.items(), stamp, digest)
    signature = _mac(key.encode(), message)
    return {"authorization": f"{AUTH_SCHEME} t={stamp},d={digest},s={signature}"}


def verify(
    keys: Iterable[bytes],
    address: str | None,
    method: str,
    path: str,
    query: Iterable[tuple[str, str]],
    credential: str,
    *,
    now: float | None = None,
) -> str:
    """Check ``credential`` (an ``Authorization`` value after its scheme) of a call received
    by the broker at ``address``, signed with one of ``keys``: the digest its body must have.
    AuthError 401 if it is malformed, 403 if it is not valid here and now."""
    fields = dict(part.strip().partition("=")[::2] for part in credential.split(","))
    try:
        stamp, digest, signature = int(fields["t"]), fields["d"], fields["s"]
    except (KeyError, ValueError):
        raise AuthError(f"malformed {AUTH_SCHEME} credential (t=, d= and s= needed)", 401) from None
    if address is None:
        raise AuthError("this broker has no advertised address: it takes no forwarded calls", 403)
    message = _canonical(address, method, path, query, stamp, digest)
    given = signature.encode()
    # compare with every key, so the time taken does not tell which one nearly matched
    if not any([hmac.compare_digest(given, _mac(k, message).encode()) for k in keys]):
        raise AuthError(
            "invalid peer signature: not signed with a token of this broker, or for another "
            "broker's address, or over another call",
            403,
        )
    skew = (time.time() if now is None else now) - stamp
    if abs(skew) > WINDOW:
        raise AuthError(
            f"peer signature made {skew:+.0f} s from this broker's clock (at most {WINDOW:g} s "
            "either way): a replay, or clocks too far apart",
            403,
        )
    return digest


def check_body(digest: str, body: bytes) -> None:
    """AuthError 403 unless ``body`` is what a verified credential's ``digest`` signed."""
    if not hmac.compare_digest(hashlib.sha256(body).hexdigest().encode(), digest.encode("utf-8")):
        raise AuthError("the request body does not match its signed digest", 403)
