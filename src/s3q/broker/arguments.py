"""What a native API call must carry: arguments of the declared names and types, checked before
the queue is touched (its credentials and grants are :mod:`.access`'s), and, for a call another
broker forwarded, the body its signature names.

Both HTTP paths check calls here: Starlette's routes (:mod:`.app`) through :func:`arguments`, the
lean path (:mod:`.lean`) through :class:`Plan`, which accepts exactly what :func:`arguments`
accepts (anything else the lean path hands to Starlette's).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

import msgspec

from ..errors import InvalidArgument
from ..wire.codec import JSON, MSGPACK
from . import peerauth
from .limits import read_body
from .routes import Endpoint, Param

if TYPE_CHECKING:
    from starlette.requests import Request

MSGPACK_TYPES = (MSGPACK, "application/x-msgpack", "application/vnd.msgpack")
MAX_JSON_BODY = 4 * 2**20  # JSON bodies: calls of tools (payloads need msgpack)
_ABSENT = object()


async def _body(request: Request, limits: Limits) -> _Body:
    # a type no web page can send without the broker's consent (CORS), even for no body
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != JSON and kind not in MSGPACK_TYPES:
        raise InvalidArgument(
            f"unsupported content-type {kind or 'none'!r}: use {MSGPACK} or {JSON}"
        )
    as_json = kind == JSON
    # JSON is for tools (payloads cannot travel in it): its smaller limit bounds its decoding,
    # which cannot refuse a long list before reaching its end
    limit, setting = (
        (min(limits.body, MAX_JSON_BODY), "JSON bodies")
        if as_json
        else (limits.body, "s3q serve --max-body")
    )
    raw = await read_body(request, limit, setting, limits.body_timeout)
    signed: str | None = getattr(request.state, "peer_digest", None)
    if signed is not None:  # a call forwarded by another broker: its body is what it signed
        peerauth.check_body(signed, raw)
    if not raw:
        return _Body(as_json, {})
    try:
        # the arguments are split, not decoded: each is decoded by _value, against its type
        fields = (msgspec.json if as_json else msgspec.msgpack).decode(raw, type=_FIELDS)
    except msgspec.ValidationError:
        raise InvalidArgument("the request body must be a map of argument names") from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise InvalidArgument(f"malformed {kind} body: {str(exc)[:200]}") from None
    return _Body(as_json, fields)


_FIELDS = dict[str, msgspec.Raw]


class _Body(NamedTuple):
    as_json: bool
    fields: dict[str, msgspec.Raw]


class Limits(NamedTuple):
    body: int  # bytes
    batch: int  # entries of a list argument
    body_timeout: float  # seconds


@functools.lru_cache(maxsize=16)
def _list_of(max_batch: int, nullable: bool) -> Any:
    """The type of a list argument: a longer list is refused at its header (msgpack)."""
    bounded = Annotated[list[Any], msgspec.Meta(max_length=max_batch)]
    return bounded | None if nullable else bounded


def _value(param: Param, raw: msgspec.Raw, as_json: bool, max_batch: int) -> Any:
    """Body argument ``param``, decoded from its ``raw`` bytes. The queue checks values; types
    it does not check on a list-like argument, and the length of lists, are checked here."""
    decoder = msgspec.json if as_json else msgspec.msgpack
    names = _kinds(param)
    try:
        if "array" in names:
            return decoder.decode(raw, type=_list_of(max_batch, "null" in names))
        return decoder.decode(raw)
    except msgspec.ValidationError as exc:
        if "length" in str(exc):
            raise InvalidArgument(
                f"{param.name} has more than {max_batch:,} entries; this broker takes at most "
                f"{max_batch:,} per call (s3q serve --max-batch)"
            ) from None
        raise InvalidArgument(f"{param.name} must be a list: {exc}") from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise InvalidArgument(f"malformed {param.name}: {str(exc)[:200]}") from None


def _kinds(param: Param) -> list[str]:
    kinds = param.schema.get("type")
    return [kinds] if isinstance(kinds, str) else list(kinds or ())


def _query(param: Param, value: str) -> Any:
    if param.schema.get("type") == "integer":
        try:
            return int(value)
        except ValueError:
            raise InvalidArgument(f"{param.name} must be an integer, got {value!r}") from None
    return value


class Plan(NamedTuple):
    """What an endpoint takes, worked out once rather than on each request."""

    params: tuple[Param, ...]
    needs_body: bool
    declared: frozenset[str]  # body arguments
    allowed_query: frozenset[str]
    required: frozenset[str]  # body arguments
    lists: tuple[tuple[str, bool], ...]  # body arguments that are lists: (name, nullable)
    by_name_only: bool  # the queue's name is its only path parameter

    @classmethod
    def of(cls, endpoint: Endpoint) -> Plan:
        body = [p for p in endpoint.params if p.where == "body"]
        return cls(
            endpoint.params,
            bool(body),
            frozenset(p.name for p in body),
            frozenset(p.name for p in endpoint.params if p.where == "query"),
            frozenset(p.name for p in body if p.required),
            tuple((p.name, "null" in _kinds(p)) for p in body if "array" in _kinds(p)),
            all(p.name == "name" for p in endpoint.params if p.where == "path"),
        )

    def takes(self, args: Any, max_batch: int) -> bool:
        """Whether ``args``, a msgpack body decoded whole, are arguments :func:`arguments`
        would take as they are (no query string, no other path parameter): a map of declared
        names, the required ones there, each list a list of at most ``max_batch`` entries."""
        if type(args) is not dict or not args.keys() <= self.declared:
            return False
        if not self.required <= args.keys():
            return False
        for name, nullable in self.lists:
            value = args.get(name, _ABSENT)
            if value is None:
                if not nullable:
                    return False
            elif value is not _ABSENT and (type(value) is not list or len(value) > max_batch):
                return False
        return True


async def arguments(plan: Plan, request: Request, limits: Limits) -> dict[str, Any]:
    body = (
        await _body(request, limits)
        if plan.needs_body or request.method == "POST"
        else _Body(False, {})
    )
    unknown = body.fields.keys() - plan.declared
    if unknown:
        raise InvalidArgument(f"unknown argument(s): {', '.join(sorted(map(str, unknown)))}")
    # no query string (the calls of s3q's client): no QueryParams to parse
    query = request.query_params if request.scope.get("query_string") else {}
    unknown_query = query.keys() - plan.allowed_query
    if unknown_query:
        raise InvalidArgument(f"unknown query parameter(s): {', '.join(sorted(unknown_query))}")
    args: dict[str, Any] = {}
    for param in plan.params:
        if param.where == "path":
            if param.name != "name":  # the queue's name is the registry's to check
                args[param.name] = request.path_params[param.name]
        elif param.where == "query" and param.name in query:
            args[param.name] = _query(param, query[param.name])
        elif param.where == "body" and param.name in body.fields:
            raw = body.fields[param.name]
            args[param.name] = _value(param, raw, body.as_json, limits.batch)
        elif param.required:
            raise InvalidArgument(f"missing argument {param.name!r}")
    return args
