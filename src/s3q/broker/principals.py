"""Principals and their grants: who may call the broker, and what each may do to which queues.

A principals file (TOML, docs/broker.md "Principals and grants") names each principal, its
credentials (bearer tokens, stored as SHA-256 hashes; SQS access keys; TLS client certificate
subjects, kept for later) and its grants: queue-name patterns (``fnmatch`` globs) by action
classes (:data:`ACTIONS`). A call is allowed when a grant allows its class on its queue and no
grant denies it: an explicit deny wins over any allow, and nothing is allowed unless granted.

:func:`load` reads a file, refusing it with :class:`InvalidPrincipals` naming the file, the
line and key, and what is wrong (never a value: tokens and secrets stay out of errors).
:func:`build` puts a file's principals beside those of the older options (``--token-file``
tokens and ``--sqs-credentials`` keys, principals with every grant) into :class:`Principals`,
which finds the principal of a bearer token or an access key. :meth:`Principal.decide` is the
decision, remembered per (queue, action) until the principals are loaded again.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import InvalidConfig

SEND, RECEIVE, READ, ADMIN = "send", "receive", "read", "admin"
#: the action classes a grant names (``*``: all of them)
ACTIONS = (SEND, RECEIVE, READ, ADMIN)
ANY = "*"
#: why a call is refused: its class is denied on the queue, or granted by nothing
DENIED, NOT_GRANTED = "denied", "not-granted"
#: the principals that are no file's: the older options' and the broker's own
TOKENS, ANONYMOUS, BROKER = "@tokens", "@anonymous", "@broker"
SQS_PREFIX = "@sqs:"

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
PATTERN = re.compile(r"[A-Za-z0-9_.*?!\[\]-]{1,200}")
TOKEN_HASH = re.compile(r"sha256:([0-9a-fA-F]{64})")
KEY_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")
PRINCIPAL_KEYS = ("tokens", "sqs_keys", "tls_subjects", "grants")
GRANT_KEYS = ("allow", "deny", "queues")
REMEMBERED = 10_000  # decisions a principal remembers (queue names come from callers)


class InvalidPrincipals(InvalidConfig):
    """A principals file that cannot be used: ``where`` (file and line), ``key`` (the TOML key
    at fault) and ``problem`` (what is wrong). Its text never holds a value of the file."""

    def __init__(self, where: str, key: str, problem: str) -> None:
        super().__init__(f"{where}: {key}: {problem}" if key else f"{where}: {problem}")
        self.where, self.key, self.problem = where, key, problem


class Rule(NamedTuple):
    """One grant: ``allow`` (else deny) the ``actions`` on queues matching ``patterns``."""

    allow: bool
    actions: frozenset[str]
    patterns: tuple[str, ...]
    match: Any  # the compiled patterns' ``match`` (re.Pattern.match)

    @classmethod
    def of(cls, allow: bool, actions: Iterable[str], patterns: Iterable[str]) -> Rule:
        patterns = tuple(patterns)
        regex = "|".join(f"(?:{fnmatch.translate(p)})" for p in patterns) or "(?!)"
        return cls(allow, frozenset(actions), patterns, re.compile(regex).match)

    def covers(self, queue: str, action: str) -> bool:
        return (action in self.actions or ANY in self.actions) and self.match(queue) is not None


EVERYTHING = (Rule.of(True, [ANY], [ANY]),)


class Principal:
    """Someone who calls the broker: its ``name``, credentials and grants (``rules``).

    ``tokens``: SHA-256 digests of its bearer tokens; ``sqs_keys``: access key id -> secret;
    ``tls_subjects``: client certificate subjects (read, not used yet)."""

    __slots__ = ("_decided", "name", "rules", "sqs_keys", "tls_subjects", "tokens")

    def __init__(
        self,
        name: str,
        rules: Iterable[Rule] = (),
        *,
        tokens: Iterable[bytes] = (),
        sqs_keys: Mapping[str, str] | None = None,
        tls_subjects: Iterable[str] = (),
    ) -> None:
        self.name = name
        self.rules = tuple(rules)
        self.tokens = tuple(tokens)
        self.sqs_keys = dict(sqs_keys or {})
        self.tls_subjects = tuple(tls_subjects)
        self._decided: dict[tuple[str, str], str | None] = {}

    def __repr__(self) -> str:  # (no credential in it)
        return f"<Principal {self.name}>"

    def decide(self, queue: str, action: str) -> str | None:
        """None if this principal may do ``action`` (a class of :data:`ACTIONS`) to queue
        ``queue`` (a partition ``NAME@i`` counts as its queue ``NAME``); else why not
        (:data:`DENIED`, :data:`NOT_GRANTED`). Remembered until the principals are reloaded."""
        key = (queue, action)
        decided = self._decided
        try:
            return decided[key]
        except KeyError:
            pass
        found = _decision(self.rules, queue.partition("@")[0], action)
        if len(decided) >= REMEMBERED:
            decided.clear()
        decided[key] = found
        return found

    def may(self, queue: str, action: str) -> bool:
        return self.decide(queue, action) is None

    def reads_all(self) -> bool:
        """Whether a grant allows ``read`` of every queue (pattern ``*``) and none denies
        ``read`` anywhere: what the broker-wide ``/metrics`` asks for."""
        reads = [r for r in self.rules if READ in r.actions or ANY in r.actions]
        return any(r.allow and ANY in r.patterns for r in reads) and all(r.allow for r in reads)


def _decision(rules: tuple[Rule, ...], queue: str, action: str) -> str | None:
    allowed = False
    for rule in rules:
        if rule.covers(queue, action):
            if not rule.allow:
                return DENIED
            allowed = True
    return None if allowed else NOT_GRANTED


def digest(token: str) -> bytes:
    """The SHA-256 digest a bearer token is known by."""
    return hashlib.sha256(token.encode()).digest()


class Principals:
    """Every principal of a broker, found by its bearer token, access key or name."""

    def __init__(self, principals: Iterable[Principal], source: str | None = None) -> None:
        self.source = source  # the file they came from, if any
        self.named: dict[str, Principal] = {}
        self._tokens: dict[bytes, Principal] = {}
        self._keys: dict[str, tuple[str, Principal]] = {}
        for p in principals:
            where = source or "the broker's options"
            if p.name in self.named:
                raise InvalidPrincipals(where, f"principals.{p.name}", "named twice")
            self.named[p.name] = p
            for d in p.tokens:
                other = self._tokens.setdefault(d, p)
                if other is not p:
                    raise InvalidPrincipals(
                        where, f"principals.{p.name}.tokens", f"a token of {other.name} too"
                    )
            for key_id, secret in p.sqs_keys.items():
                known = self._keys.setdefault(key_id, (secret, p))
                if known[1] is not p:
                    raise InvalidPrincipals(
                        where,
                        f"principals.{p.name}.sqs_keys",
                        f"access key {key_id} is {known[1].name}'s too",
                    )
        #: access key id -> secret, as the SQS endpoint checks signatures against them
        self.sqs_secrets = {k: secret for k, (secret, _) in self._keys.items()}
        self.has_tokens = bool(self._tokens)

    def bearer(self, token: str) -> Principal | None:
        """The principal of a bearer token, or None. The token is looked up by its SHA-256
        (the time that takes tells nothing of any token), then compared in constant time."""
        given = digest(token)
        found = self._tokens.get(given)
        if found is None:
            return None
        return found if any(hmac.compare_digest(given, d) for d in found.tokens) else None

    def of_key(self, key_id: str) -> Principal | None:
        """The principal an access key id belongs to."""
        known = self._keys.get(key_id)
        return None if known is None else known[1]


def legacy(tokens: Iterable[str], sqs_keys: Mapping[str, str]) -> list[Principal]:
    """The principals of the older options, each with every grant: ``@tokens`` (every
    ``--token-file`` token) and ``@sqs:<ACCESS_KEY_ID>`` (each ``--sqs-credentials`` key)."""
    found = [
        Principal(SQS_PREFIX + key_id, EVERYTHING, sqs_keys={key_id: secret})
        for key_id, secret in sorted(sqs_keys.items())
    ]
    digests = [digest(t) for t in sorted(set(tokens)) if t]
    return [Principal(TOKENS, EVERYTHING, tokens=digests), *found] if digests else found


def build(
    path: str | os.PathLike[str] | None, tokens: Iterable[str], sqs_keys: Mapping[str, str]
) -> Principals:
    """The principals of the file at ``path`` (none: no file) and of the older options;
    InvalidPrincipals if the file cannot be used or shares a credential with the options."""
    found = legacy(tokens, sqs_keys)
    if path is None:
        return Principals(found)
    return Principals([*load(path), *found], str(path))


def load(path: str | os.PathLike[str]) -> list[Principal]:
    """The principals of a principals file (see the module); InvalidPrincipals if it cannot
    be read or used."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problem = exc.strerror if isinstance(exc, OSError) and exc.strerror else "unreadable"
        raise InvalidPrincipals(where, "", f"cannot be read ({problem})") from None
    return parse(text, where)


def parse(text: str, where: str = "<principals>") -> list[Principal]:
    """The principals of a principals file's ``text`` (``where``: its name in errors)."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        at = re.search(r"at line (\d+)", str(exc))
        line = at.group(1) if at else str(max(1, len(text.splitlines())))
        raise InvalidPrincipals(f"{where}:{line}", "", f"not TOML: {exc}") from None
    lines = _Lines(text, where)
    unknown = sorted(set(document) - {"principals"})
    if unknown:
        raise lines.error("", unknown[0], "unknown key (a principals file has [principals.NAME])")
    table = document.get("principals", {})
    if not isinstance(table, dict):
        raise lines.error("", "principals", "must be a table of principals by name")
    return [_principal(name, entry, lines) for name, entry in table.items()]


class _Lines:
    """Where in a principals file a principal, key or grant is: its line, found by name."""

    def __init__(self, text: str, where: str) -> None:
        self.text, self.where = text.splitlines(), where

    def error(self, name: str, key: str, problem: str, index: int | None = None) -> Exception:
        line = self.line(name, key, index) if name else None
        where = f"{self.where}:{line}" if line is not None else self.where
        return InvalidPrincipals(where, f"principals.{name}.{key}" if name else key, problem)

    def line(self, name: str, key: str = "", index: int | None = None) -> int | None:
        quoted = rf"(?:{re.escape(name)}|\"{re.escape(name)}\"|'{re.escape(name)}')"
        header = re.compile(rf"\s*\[\[?\s*principals\s*\.\s*{quoted}\s*(\]|\.)")
        grant_header = re.compile(rf"\s*\[\[\s*principals\s*\.\s*{quoted}\s*\.\s*grants\s*\]\]")
        at = next((i for i, t in enumerate(self.text) if header.match(t)), None)
        if at is None:
            return None
        if key == "grants" and index is not None:
            headers = [i for i, t in enumerate(self.text) if grant_header.match(t)]
            if index < len(headers):
                return headers[index] + 1
            said = re.compile(r"\b(allow|deny)\b")
            found = [i for i in range(at, len(self.text)) if said.search(self.text[i])]
            return found[index] + 1 if index < len(found) else at + 1
        if key:
            assigned = re.compile(rf"\s*{re.escape(key)}\s*=")
            for i in range(at + 1, len(self.text)):
                if self.text[i].lstrip().startswith("["):
                    break
                if assigned.match(self.text[i]):
                    return i + 1
        return at + 1


def _principal(name: str, entry: Any, lines: _Lines) -> Principal:
    if not NAME.fullmatch(name):
        raise lines.error(
            name, "", "a principal's name is 1 to 64 of A-Z a-z 0-9 _ . - (a letter or digit first)"
        )
    if not isinstance(entry, dict):
        raise lines.error(name, "", "must be a table (tokens, sqs_keys, tls_subjects, grants)")
    unknown = sorted(set(entry) - set(PRINCIPAL_KEYS))
    if unknown:
        raise lines.error(name, unknown[0], f"unknown key (known: {', '.join(PRINCIPAL_KEYS)})")
    tokens = [_token(name, t, i, lines) for i, t in enumerate(_list(name, "tokens", entry, lines))]
    keys = dict(_key(name, k, lines) for k in _list(name, "sqs_keys", entry, lines))
    subjects = _list(name, "tls_subjects", entry, lines)
    if not all(isinstance(s, str) and s for s in subjects):
        raise lines.error(name, "tls_subjects", "must be a list of certificate subjects")
    if not tokens and not keys and not subjects:
        raise lines.error(name, "", "has no credential (tokens, sqs_keys or tls_subjects)")
    grants = _list(name, "grants", entry, lines)
    rules = [_rule(name, i, g, lines) for i, g in enumerate(grants)]
    return Principal(name, rules, tokens=tokens, sqs_keys=keys, tls_subjects=subjects)


def _list(name: str, key: str, entry: dict[str, Any], lines: _Lines) -> list[Any]:
    value = entry.get(key, [])
    if not isinstance(value, list):
        raise lines.error(name, key, "must be a list")
    return value


def _token(name: str, value: Any, index: int, lines: _Lines) -> bytes:
    found = TOKEN_HASH.fullmatch(value) if isinstance(value, str) else None
    if found is None:
        raise lines.error(
            name,
            "tokens",
            f'entry {index + 1} is not "sha256:<64 hex digits>" (the SHA-256 of a bearer '
            "token, e.g. printf %s TOKEN | sha256sum; never the token itself)",
        )
    return bytes.fromhex(found.group(1))


def _key(name: str, value: Any, lines: _Lines) -> tuple[str, str]:
    if not isinstance(value, dict) or set(value) != {"id", "secret"}:
        raise lines.error(name, "sqs_keys", 'each entry is { id = "ACCESS_KEY_ID", secret = "…" }')
    key_id, secret = value["id"], value["secret"]
    if not isinstance(key_id, str) or not KEY_ID.fullmatch(key_id):
        raise lines.error(name, "sqs_keys", "an id is 1 to 128 of A-Z a-z 0-9 _ . -")
    if not isinstance(secret, str) or not secret:
        raise lines.error(name, "sqs_keys", f"the secret of {key_id} must be a non-empty string")
    return key_id, secret


def _rule(name: str, index: int, grant: Any, lines: _Lines) -> Rule:
    def error(problem: str) -> Exception:
        return lines.error(name, "grants", f"grant {index + 1}: {problem}", index)

    if not isinstance(grant, dict):
        raise error('must be a table: { allow = ["send"], queues = ["orders-*"] }')
    unknown = sorted(set(grant) - set(GRANT_KEYS))
    if unknown:
        raise error(f"unknown key {unknown[0]!r} (known: allow or deny, and queues)")
    if ("allow" in grant) == ("deny" in grant):
        raise error("needs exactly one of allow and deny")
    allow = "allow" in grant
    actions = _strings(grant["allow" if allow else "deny"])
    if actions is None or not actions:
        raise error("allow/deny is an action or a list of them (send, receive, read, admin, *)")
    wrong = [i for i, a in enumerate(actions) if a not in (*ACTIONS, ANY)]
    if wrong:  # (which, not what: a value may be a secret pasted in the wrong place)
        raise error(f"action {wrong[0] + 1} is none of send, receive, read, admin, *")
    patterns = _strings(grant.get("queues"))
    if patterns is None or not patterns:
        raise error('needs queues: a pattern or a list of them ("orders-*", "*")')
    bad = [i for i, p in enumerate(patterns) if not PATTERN.fullmatch(p)]
    if bad:
        raise error(
            f"queue pattern {bad[0] + 1} may hold only A-Z a-z 0-9 _ . - and the globs * ? [ ] ! "
            "(1 to 200 of them)"
        )
    return Rule.of(allow, actions, patterns)


def _strings(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return None
