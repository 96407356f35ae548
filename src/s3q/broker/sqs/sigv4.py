"""Checking AWS Signature Version 4 on SQS requests, against the broker's access keys.

The canonical request is rebuilt from what arrived (method, path, query, the headers the client
signed, the body's SHA-256) exactly as botocore builds it when signing, and the signature
recomputed with the secret of the access key named in the credential scope. Every refusal is
a 403 with the SQS error shape, raised before the request is looked at further.
"""

from __future__ import annotations

import calendar
import functools
import hashlib
import hmac
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

from .protocol import SqsError

ALGORITHM = "AWS4-HMAC-SHA256"
MAX_SKEW = 300.0  # seconds between X-Amz-Date and now
SERVICE = "sqs"


def _refuse(name: str, message: str) -> SqsError:
    return SqsError(name, message, 403)


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()


@functools.lru_cache(maxsize=256)
def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    """The key a day's signatures in ``region`` are made with: four HMACs, derived once per
    access key (its secret), day, region and service, then remembered."""
    key = _hmac(("AWS4" + secret).encode("utf-8"), date)
    return _hmac(_hmac(_hmac(key, region), service), "aws4_request")


@functools.lru_cache(maxsize=64)
def _epoch(stamp: str) -> int:
    """The time an ``X-Amz-Date`` names (ValueError if malformed): parsed once per second's
    stamp, since a busy caller's requests share it."""
    return calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ"))


def _fields(authorization: str) -> dict[str, str]:
    algorithm, _, rest = authorization.partition(" ")
    if algorithm != ALGORITHM:
        raise _refuse("IncompleteSignature", f"Unsupported authorization algorithm {algorithm!r}")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        key, sep, value = part.strip().partition("=")
        if sep:
            fields[key] = value
    if not {"Credential", "SignedHeaders", "Signature"} <= set(fields):
        raise _refuse(
            "IncompleteSignature",
            "Authorization header requires Credential, SignedHeaders and Signature.",
        )
    return fields


def _canonical_path(raw_path: str) -> str:
    """The path as botocore signs it: dot segments resolved, then quoted (keeping ``/~``)."""
    segments: list[str] = []
    for segment in raw_path.split("/"):
        if segment == "..":
            if segments:
                segments.pop()
        elif segment not in (".", ""):
            segments.append(segment)
    path = "/" + "/".join(segments)
    if raw_path.endswith("/") and path != "/":
        path += "/"
    return quote(path, safe="/~")


def _canonical_query(query: str) -> str:
    if not query:
        return ""
    pairs = [tuple(pair.partition("=")[::2]) for pair in query.split("&")]
    return "&".join(f"{k}={v}" for k, v in sorted(pairs))


@dataclass(frozen=True)
class Credential:
    """A request's signature fields, checked as far as they go without its body: a known
    access key, scoped to SQS, dated within ``MAX_SKEW`` of now."""

    key_id: str
    secret: str
    fields: dict[str, str]
    scope: list[str]
    stamp: str


def credential(
    headers: Mapping[str, list[str]], keys: Mapping[str, str], now: float | None = None
) -> Credential:
    """What ``verify`` checks before it needs the body; SqsError (403) on the first failure,
    so an unknown or stale caller is refused before its body is read."""
    authorization = _header(headers, "authorization")
    if not authorization:
        raise _refuse(
            "MissingAuthenticationToken", "Request is missing Authentication Token (sign it)."
        )
    if not authorization.isascii():
        raise _refuse("IncompleteSignature", "The Authorization header must be ASCII.")
    fields = _fields(authorization)
    scope = fields["Credential"].split("/")
    if len(scope) != 5 or scope[4] != "aws4_request":
        raise _refuse("IncompleteSignature", f"Malformed credential scope {fields['Credential']!r}")
    key_id, date, _, service = scope[:4]
    secret = keys.get(key_id)
    if secret is None:
        raise _refuse(
            "InvalidClientTokenId", "The security token included in the request is invalid."
        )
    if service != SERVICE:
        raise _refuse("SignatureDoesNotMatch", f"Credential should be scoped to {SERVICE!r}.")
    signed = fields["SignedHeaders"].split(";")
    if "host" not in signed or "x-amz-date" not in signed:
        raise _refuse("SignatureDoesNotMatch", "Host and X-Amz-Date must be signed.")
    if "x-amz-target" in headers and "x-amz-target" not in signed:
        raise _refuse("SignatureDoesNotMatch", "X-Amz-Target must be signed.")
    stamp = _header(headers, "x-amz-date") or ""
    try:
        when = _epoch(stamp)
    except ValueError:
        raise _refuse("IncompleteSignature", f"Malformed X-Amz-Date {stamp!r}") from None
    if abs((time.time() if now is None else now) - when) > MAX_SKEW:
        raise _refuse(
            "RequestExpired", f"Signature expired or not yet valid: X-Amz-Date is {stamp}."
        )
    if stamp[:8] != date:
        raise _refuse("SignatureDoesNotMatch", "Credential date does not match X-Amz-Date.")
    return Credential(key_id, secret, fields, scope, stamp)


def _header(headers: Mapping[str, list[str]], name: str) -> str | None:
    values = headers.get(name)
    return ",".join(values) if values else None


def verify(
    method: str,
    raw_path: str,
    query: str,
    headers: Mapping[str, list[str]],
    body: bytes,
    keys: Mapping[str, str],
    now: float | None = None,
) -> str:
    """The access key id that signed this request; SqsError (403) if none did.

    ``raw_path``: the path as sent (still percent-encoded). ``headers``: every value of each
    header, by lower-case name. ``keys``: access key id -> secret.
    """
    return verify_body(credential(headers, keys, now), method, raw_path, query, headers, body)


def verify_body(
    checked: Credential,
    method: str,
    raw_path: str,
    query: str,
    headers: Mapping[str, list[str]],
    body: bytes,
) -> str:
    """The rest of ``verify``, once ``credential`` has passed: the signature over the request
    and its body. The access key id, or SqsError (403)."""
    fields, scope, stamp = checked.fields, checked.scope, checked.stamp
    _, date, region, service = scope[:4]
    signed = fields["SignedHeaders"].split(";")
    payload_hash = hashlib.sha256(body).hexdigest()
    claimed = _header(headers, "x-amz-content-sha256")
    if claimed is not None and claimed != payload_hash:
        raise _refuse("SignatureDoesNotMatch", "The body does not match X-Amz-Content-SHA256.")
    canonical_headers = "".join(
        f"{name}:{','.join(' '.join(v.split()) for v in headers.get(name, []))}\n"
        for name in signed
    )
    canonical = "\n".join(
        (
            method.upper(),
            _canonical_path(raw_path),
            _canonical_query(query),
            canonical_headers,
            fields["SignedHeaders"],
            claimed if claimed is not None else payload_hash,
        )
    )
    to_sign = "\n".join(
        (
            ALGORITHM,
            stamp,
            "/".join(scope[1:]),
            hashlib.sha256(canonical.encode("utf-8")).hexdigest(),
        )
    )
    expected = hmac.new(
        signing_key(checked.secret, date, region, service), to_sign.encode("utf-8"), hashlib.sha256
    ).hexdigest()
    # as bytes: a header may carry any Latin-1 character, and compare_digest takes only ASCII str
    if not hmac.compare_digest(expected.encode(), fields["Signature"].encode("utf-8")):
        raise _refuse(
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided.",
        )
    return checked.key_id
