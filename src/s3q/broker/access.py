"""Who is calling, and whether they may: the broker's principals checked wherever a call enters.

:class:`Access` holds the principals in force (:mod:`.principals`: a principals file's, and
those of ``--token-file`` and ``--sqs-credentials``, which have every grant) and answers, for
each entry point (the native API's two paths, subscriptions, the SQS endpoint, the dashboard,
``/metrics``, calls forwarded by another broker), who the caller is (:meth:`Access.identify`,
:meth:`Access.bearer_caller`, :meth:`Access.sqs_caller`) and whether the call's action class
is granted on its queue (:meth:`Access.check`), before anything of the queue is read. A refusal
is counted (``s3q_broker_refusals_total``) and written to the audit trail (:mod:`.audit`),
with every admin action (and every call with ``--audit-all``: :meth:`Access.done`).

The principals file is read again on SIGHUP and when it changes (:meth:`Access.watch`); a file
that cannot be used is refused, logged, and the principals loaded before stay in force.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from ..errors import InvalidConfig, S3QError
from ..wire.codec import AuthError
from . import peerauth
from .audit import Audit
from .principals import (
    ADMIN,
    ANONYMOUS,
    BROKER,
    DENIED,
    EVERYTHING,
    READ,
    RECEIVE,
    SEND,
    Principal,
    build,
)
from .tallies import Count

if TYPE_CHECKING:
    from starlette.requests import HTTPConnection

log = logging.getLogger("s3q.broker")

#: the action class of each native API operation; None: no queue's grant is needed (the list
#: of queues shows only those the caller may read)
OPERATIONS: dict[str, str | None] = {
    "listQueues": None,
    "cluster": None,
    "enqueue": SEND,
    "enqueueBatch": SEND,
    "enqueueStaged": SEND,
    "dequeue": RECEIVE,
    "complete": RECEIVE,
    "fail": RECEIVE,
    "extend": RECEIVE,
    "release": RECEIVE,
    "status": READ,
    "stats": READ,
    "peek": READ,
    "deadLetters": READ,
    "redrive": ADMIN,
    "discard": ADMIN,
    "configure": ADMIN,
    "cleanup": ADMIN,
    "purge": ADMIN,
    "compact": ADMIN,
}
#: why a call was refused, as ``s3q_broker_refusals_total`` counts it
NO_CREDENTIAL, BAD_CREDENTIAL, UNKNOWN_PRINCIPAL = "no-credential", "bad-credential", "unknown"
_REQUEST_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
WATCH_EVERY = 1.0  # seconds between two looks at the principals file

Refuse = Callable[[str], S3QError]


class Caller:
    """Who made a call: its principal, the credential it showed (``bearer``, ``sqs``,
    ``peer``: a call another broker forwarded; ``none``: a broker without credentials), its
    source address, the action class a forwarded call was checked for, and its request id.
    ``named``: its forwarded calls name it (a broker with a principals file); else they are
    signed as the broker's own, as brokers before principals signed them (every principal of
    a broker without the file has every grant, so its leader has nothing to tell apart)."""

    __slots__ = ("carried", "credential", "named", "principal", "request_id", "source")

    def __init__(
        self,
        principal: Principal,
        credential: str,
        source: str | None,
        carried: str | None = None,
        request_id: str | None = None,
        *,
        named: bool = True,
    ) -> None:
        self.principal, self.credential, self.source = principal, credential, source
        self.carried, self.request_id, self.named = carried, request_id, named

    def acting(self, action: str | None) -> None:
        """The running task acts for this caller from now on (its forwarded calls name it)."""
        if not self.named:
            peerauth.ACTING.set(None)
            return
        peerauth.ACTING.set(
            peerauth.Acting(self.principal.name, self.carried or action, self.request_id)
        )

    def rid(self) -> str:
        if self.request_id is None:
            acting = peerauth.ACTING.get()
            self.request_id = (acting and acting.request_id) or peerauth.new_request_id()
        return self.request_id


class Access:
    """The principals of a broker and the checks made with them.

    ``tokens`` and ``sqs_keys``: those of ``--token-file`` and ``--sqs-credentials`` (each a
    principal with every grant; the tokens also sign and check the calls the brokers of a
    cluster forward to each other); ``principals``: the principals file, if any. A broker
    with neither tokens nor a principals file is open: every caller is ``@anonymous``, with
    every grant. ``audit``: the audit trail; ``refusals``: the count of refused calls."""

    def __init__(
        self,
        tokens: Iterable[str] = (),
        sqs_keys: Mapping[str, str] | None = None,
        principals: str | os.PathLike[str] | None = None,
        *,
        audit: Audit | None = None,
        refusals: Count | None = None,
    ) -> None:
        self.tokens = {t for t in tokens if t}
        self.legacy_keys = dict(sqs_keys or {})
        self.path = principals
        self.authenticated = bool(self.tokens) or principals is not None
        self.named = principals is not None  # forwarded calls name their callers
        self.cluster_token = min(self.tokens, default=None)
        self.cluster_keys = [t.encode() for t in sorted(self.tokens)]
        self.principals = build(principals, self.tokens, self.legacy_keys)
        self._stamp = _stamp(principals)
        self.audit = audit
        self.refusals = refusals or Count("s3q_broker_refusals", "", ("reason", "principal"))
        self.anonymous = Principal(ANONYMOUS, EVERYTHING)
        self.broker = Principal(BROKER, EVERYTHING)

    def forwarding(self, peers: Iterable[str] | None) -> list[str] | None:
        """The peers this broker may forward calls to (see :class:`.forward.Peers`): none if
        it has credentials but no cluster token to sign forwarded calls with."""
        if not self.authenticated or self.cluster_token is not None:
            return list(peers) if peers else None
        if peers:
            log.warning(
                "this broker has no token of the cluster (--token-file) to sign forwarded "
                "calls with: it forwards none, and takes none forwarded"
            )
        return []

    # -- who calls -------------------------------------------------------------------------

    def identify(
        self,
        request: HTTPConnection,
        operation: str,
        queue: str | None,
        address: str | None = None,
        peers: bool = False,
    ) -> Caller:
        """The caller of an HTTP request (or WebSocket) to ``operation`` of ``queue``: its
        bearer token's principal or, with ``peers`` (the native API), that of a call another
        broker forwarded, signed for this broker's ``address``. AuthError 401 without a
        credential, 403 with one that is not valid; either refusal counted and audited."""
        client = request.client
        source = None if client is None else client.host
        if not self.authenticated:
            return Caller(self.anonymous, "none", source, named=self.named)
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if peers and scheme.lower() == peerauth.AUTH_SCHEME.lower():
            return self._peer(request, token, source, operation, queue, address)
        if scheme.lower() != "bearer" or not token.strip():
            error = AuthError("missing bearer token (Authorization: Bearer <token>)", 401)
            raise self.refused(error, NO_CREDENTIAL, None, "none", source, operation, queue)
        principal = self.principals.bearer(token.strip())
        if principal is None:
            error = AuthError("invalid bearer token", 403)
            raise self.refused(error, BAD_CREDENTIAL, None, "bearer", source, operation, queue)
        return Caller(principal, "bearer", source, named=self.named)

    def _peer(
        self,
        request: HTTPConnection,
        credential: str,
        source: str | None,
        operation: str,
        queue: str | None,
        address: str | None,
    ) -> Caller:
        scope = request.scope
        try:
            signed = peerauth.verify(
                self.cluster_keys,
                address,
                scope.get("method", "GET"),
                scope["path"],
                request.query_params.multi_items(),
                credential,
            )
        except AuthError as exc:
            why = BAD_CREDENTIAL
            raise self.refused(exc, why, None, "peer", source, operation, queue) from None
        request.state.peer_digest = signed.digest
        given = request.headers.get(peerauth.REQUEST_ID, "")
        rid = given if _REQUEST_ID.fullmatch(given) else None
        if signed.principal is None or signed.principal == BROKER:
            return Caller(self.broker, "peer", source, signed.action, rid, named=self.named)
        principal = self.principals.named.get(signed.principal)
        if principal is None:
            error = AuthError(
                f"a call forwarded for principal {signed.principal}, whom this broker does "
                "not know (give every broker of a cluster the same principals file)",
                403,
            )
            raise self.refused(error, UNKNOWN_PRINCIPAL, None, "peer", source, operation, queue)
        return Caller(principal, "peer", source, signed.action, rid, named=self.named)

    def bearer_caller(self, authorization: str, source: str | None) -> Caller | None:
        """The caller of a bearer token (the lean path's look); None if it would be refused
        (the generic stack then refuses it, and counts and audits the refusal)."""
        if not self.authenticated:
            return Caller(self.anonymous, "none", source, named=self.named)
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        principal = self.principals.bearer(token.strip())
        return None if principal is None else Caller(principal, "bearer", source, named=self.named)

    def sqs_keys(self) -> dict[str, str] | None:
        """The access keys SQS requests are checked against now (None: the endpoint takes
        unsigned requests; empty: it is closed, the broker having other credentials)."""
        keys = self.principals.sqs_secrets
        if keys or self.authenticated:
            return keys
        return None

    def sqs_caller(self, key_id: str | None, source: str | None) -> Caller | None:
        """The caller of an SQS request signed with ``key_id`` (None: unsigned, on a broker
        that takes them); None if the key is no principal's (any more)."""
        if key_id is None:
            return Caller(self.anonymous, "none", source, named=self.named)
        principal = self.principals.of_key(key_id)
        return None if principal is None else Caller(principal, "sqs", source, named=self.named)

    # -- what they may do ------------------------------------------------------------------

    def check(
        self,
        caller: Caller,
        action: str | None,
        queue: str | None,
        operation: str,
        refuse: Refuse | None = None,
    ) -> None:
        """Nothing if ``caller`` may do ``action`` (the class a forwarded call carries, if
        any) to ``queue``; else the refusal (``refuse`` makes it from its text: default an
        AuthError 403), counted and audited."""
        if action is None or queue is None:
            return
        action = caller.carried or action
        principal = caller.principal
        why = principal.decide(queue, action)
        if why is None:
            return
        grants = "denied by a grant" if why == DENIED else "granted by none of its grants"
        text = f"principal {principal.name} may not {action} queue {queue} ({operation}: {grants})"
        error = refuse(text) if refuse is not None else AuthError(text, 403)
        raise self.refused(error, why, caller, caller.credential, caller.source, operation, queue)

    def allows(self, caller: Caller, action: str | None, queue: str) -> bool:
        """Whether :meth:`check` passes (nothing counted or audited)."""
        if action is None:
            return True
        return caller.principal.decide(queue, caller.carried or action) is None

    def current(self, caller: Caller) -> Caller:
        """``caller`` with its principal as the principals in force now have it (reloaded
        since, it may have other grants, or none: no principal of that name is left)."""
        principal = caller.principal
        if principal is self.anonymous or principal is self.broker:
            return caller
        now = self.principals.named.get(principal.name)
        if now is principal:
            return caller
        found = Caller(
            now or Principal(principal.name),
            caller.credential,
            caller.source,
            caller.carried,
            caller.request_id,
            named=caller.named,
        )
        return found

    def readable(self, caller: Caller, names: Iterable[str]) -> list[str]:
        """Those of ``names`` ``caller`` may read: what a listing of queues shows it."""
        principal = caller.principal
        return [n for n in names if principal.decide(n, READ) is None]

    def refused(
        self,
        error: S3QError,
        reason: str,
        caller: Caller | None,
        credential: str,
        source: str | None,
        operation: str,
        queue: str | None,
        action: str | None = None,
    ) -> S3QError:
        """``error``, once counted and written to the audit trail as a refused call."""
        name = None if caller is None else caller.principal.name
        self.refusals.add((reason, name or ""))
        if self.audit is not None:
            self.audit.record(
                principal=name,
                credential=credential,
                source=source,
                action=action or (caller and caller.carried) or _action_of(operation),
                operation=operation,
                queue=queue,
                outcome="refused",
                reason=reason,
                request_id=caller.rid() if caller is not None else _rid(),
            )
        return error

    def done(
        self,
        caller: Caller | None,
        action: str | None,
        operation: str,
        queue: str | None,
        outcome: str,
    ) -> None:
        """A call let through was answered (``outcome``: ``ok`` or its error's class): an
        admin action goes to the audit trail, and with ``--audit-all`` every call."""
        audit = self.audit
        if audit is None or caller is None or (action != ADMIN and not audit.everything):
            return
        audit.record(
            principal=caller.principal.name,
            credential=caller.credential,
            source=caller.source,
            action=caller.carried or action,
            operation=operation,
            queue=queue,
            outcome=outcome,
            request_id=caller.rid(),
        )

    # -- reloading -------------------------------------------------------------------------

    def reload(self) -> bool:
        """Read the principals file again: True if its principals are in force now; False
        (logged; those before stay in force) if it cannot be used, or there is no file."""
        if self.path is None:
            return False
        self._stamp = _stamp(self.path)
        try:
            fresh = build(self.path, self.tokens, self.legacy_keys)
        except InvalidConfig as exc:
            log.error("principals not reloaded, those loaded before stay in force: %s", exc)
            return False
        self.principals = fresh
        log.info("principals reloaded from %s: %d", self.path, len(fresh.named))
        return True

    def hangup(self) -> None:
        """SIGHUP: the principals file read again, the audit trail's file opened again."""
        self.reload()
        if self.audit is not None:
            self.audit.reopen()

    async def watch(self, every: float = WATCH_EVERY) -> None:
        """Reload the principals file whenever it changes (looked at each ``every`` s)."""
        if self.path is None:
            return
        while True:
            await asyncio.sleep(every)
            if _stamp(self.path) != self._stamp:
                self.reload()


def _stamp(path: str | os.PathLike[str] | None) -> tuple[int, int, int] | None:
    if path is None:
        return None
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_mtime_ns, found.st_size, found.st_ino


def _action_of(operation: str) -> str | None:
    return OPERATIONS.get(operation)


def _rid() -> str:
    acting = peerauth.ACTING.get()
    return (acting and acting.request_id) or peerauth.new_request_id()
