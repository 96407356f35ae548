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

A call forwarded on behalf of a caller also names, signed with the rest, the caller's principal
and the action class the call was checked for (``p=`` and ``a=``): the leader checks that
principal's grant, trusting the forwarding broker for the name because it holds the cluster's
token. What a task acts as is :data:`ACTING` (none: the broker itself, every grant), set where
a call enters (:mod:`.access`); :func:`sign` reads it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import quote, unquote, urlencode

from ..wire.codec import AuthError
from ..wire.peers import normalize

AUTH_SCHEME = "S3Q-HMAC-SHA256"
WINDOW = 60.0  # seconds a signature is good for, either side of the receiver's clock
_VERSION = "s3q-peer-1"
#: the request id a forwarded call carries, for the leader's audit trail (not signed)
REQUEST_ID = "x-s3q-request-id"


@dataclass(slots=True)
class Acting:
    """Whom a task's calls are made for: a principal's name, the action class its call was
    checked for, and the call's request id (made when first needed)."""

    principal: str
    action: str | None
    request_id: str | None = None


#: what the running task acts as; None: the broker itself (its own work: every grant)
ACTING: ContextVar[Acting | None] = ContextVar("s3q_acting", default=None)


@contextlib.contextmanager
def as_broker() -> Iterator[None]:
    """Within: the running task acts as the broker itself (its own work, such as dead letters
    moved as a queue's redrive policy asks, whoever's call set it going)."""
    token = ACTING.set(None)
    try:
        yield
    finally:
        ACTING.reset(token)


class Signed(NamedTuple):
    """What a valid signature vouches for: the body's digest, and the principal and action
    class the call was made for (None: the forwarding broker's own call)."""

    digest: str
    principal: str | None
    action: str | None


def _canonical(
    target: str,
    method: str,
    path: str,
    query: Iterable[tuple[str, Any]],
    stamp: int,
    digest: str,
    acting: tuple[str, str] | None = None,
) -> bytes:
    pairs = sorted((str(k), str(v)) for k, v in query)
    fields = (_VERSION, method.upper(), normalize(target), unquote(path), urlencode(pairs))
    lines = (*fields, str(stamp), digest, *(acting or ()))
    return "\n".join(lines).encode()


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
    acting: Acting | None = None,
) -> dict[str, str]:
    """The headers of a call to the broker at ``target``: its ``Authorization``, signed with
    ``key`` (a token of the cluster) over the call (``path`` as sent, quoted or not), naming
    the principal and action class of ``acting`` (default: :data:`ACTING`'s)."""
    stamp = int(time.time() if now is None else now)
    digest = hashlib.sha256(body or b"").hexdigest()
    acting = ACTING.get() if acting is None else acting
    fields = f"t={stamp},d={digest}"
    signed = None
    headers: dict[str, str] = {}
    if acting is not None:
        signed = (quote(acting.principal, safe="@:._-"), acting.action or "")
        fields += f",p={signed[0]},a={signed[1]}"
        if acting.request_id is None:
            acting.request_id = new_request_id()
        headers[REQUEST_ID] = acting.request_id
    message = _canonical(target, method, path, params.items(), stamp, digest, signed)
    signature = _mac(key.encode(), message)
    headers["authorization"] = f"{AUTH_SCHEME} {fields},s={signature}"
    return headers


def new_request_id() -> str:
    """A fresh request id (for the audit trail)."""
    return os.urandom(8).hex()


def verify(
    keys: Iterable[bytes],
    address: str | None,
    method: str,
    path: str,
    query: Iterable[tuple[str, str]],
    credential: str,
    *,
    now: float | None = None,
) -> Signed:
    """Check ``credential`` (an ``Authorization`` value after its scheme) of a call received
    by the broker at ``address``, signed with one of ``keys``: the digest its body must have,
    and whom it was made for. AuthError 401 if it is malformed, 403 if it is not valid here
    and now."""
    fields = dict(part.strip().partition("=")[::2] for part in credential.split(","))
    try:
        stamp, digest, signature = int(fields["t"]), fields["d"], fields["s"]
    except (KeyError, ValueError):
        raise AuthError(f"malformed {AUTH_SCHEME} credential (t=, d= and s= needed)", 401) from None
    if address is None:
        raise AuthError("this broker has no advertised address: it takes no forwarded calls", 403)
    acting = (fields["p"], fields.get("a", "")) if "p" in fields else None
    message = _canonical(address, method, path, query, stamp, digest, acting)
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
    if acting is None:
        return Signed(digest, None, None)
    return Signed(digest, unquote(acting[0]), acting[1] or None)


def check_body(digest: str, body: bytes) -> None:
    """AuthError 403 unless ``body`` is what a verified credential's ``digest`` signed."""
    if not hmac.compare_digest(hashlib.sha256(body).hexdigest().encode(), digest.encode("utf-8")):
        raise AuthError("the request body does not match its signed digest", 403)
