"""The AWS query protocol of SQS: form-encoded requests, XML answers.

Older SDKs and tools speak it (boto3 before 1.31.81, the AWS SDK for Java v1, the Go SDK v1).
A request is ``POST`` of ``application/x-www-form-urlencoded`` parameters: ``Action``,
``Version`` and the action's members, lists and maps flattened with 1-based indexes
(``AttributeName.1``, ``Attribute.1.Name``/``Attribute.1.Value``,
``SendMessageBatchRequestEntry.2.MessageAttribute.1.Value.StringValue``). It may be sent to the
queue's URL instead of ``/``, the queue then taken from the path (the Java SDK v1 does so).

Nothing here runs an action: :class:`QueryRequest` turns the parameters into the JSON
protocol's request shapes and :func:`answer` turns an action's JSON-shaped result into XML, so
both protocols share every action and every check. Names follow the query model of SQS
(``sqs/2012-11-05``, ``protocol: query``).
"""

from __future__ import annotations

import uuid
from typing import Any, TypeVar
from urllib.parse import parse_qsl
from xml.sax.saxutils import escape

import msgspec

from .protocol import SqsError, decode_error

CONTENT_TYPE = "text/xml"
FORM_TYPE = "application/x-www-form-urlencoded"
NAMESPACE = "http://queue.amazonaws.com/doc/2012-11-05/"
MAX_PARAMETERS = 10_000  # far above any valid request (a full batch has a few hundred)

T = TypeVar("T")

#: The flattened lists of requests: the JSON member -> the name of each item.
REQUEST_LISTS = {
    "AttributeNames": "AttributeName",
    "MessageAttributeNames": "MessageAttributeName",
    "MessageSystemAttributeNames": "MessageSystemAttributeName",
    "TagKeys": "TagKey",
    "AWSAccountIds": "AWSAccountId",  # AddPermission's
    "Actions": "ActionName",
    "StringListValues": "StringListValue",
    "BinaryListValues": "BinaryListValue",
}

#: The flattened lists of answers, likewise.
ANSWER_LISTS = {
    "StringListValues": "StringListValue",
    "BinaryListValues": "BinaryListValue",
    "QueueUrls": "QueueUrl",
    "queueUrls": "QueueUrl",  # ListDeadLetterSourceQueues's
    "Messages": "Message",
    "Failed": "BatchResultErrorEntry",
    "Results": "ListMessageMoveTasksResultEntry",
}

#: A flattened map's member (JSON name) -> the name of each entry, its key and its value.
MAPS = {
    "Attributes": ("Attribute", "Name", "Value"),
    "MessageAttributes": ("MessageAttribute", "Name", "Value"),
    "MessageSystemAttributes": ("MessageSystemAttribute", "Name", "Value"),
    "Tags": ("Tag", "Key", "Value"),
    "tags": ("Tag", "Key", "Value"),  # CreateQueue's
}


def _list_item(member: str, action: str) -> str:
    """The name of each item of the list ``member`` in ``action``'s answer."""
    if member == "Successful":
        return f"{action}ResultEntry"
    return ANSWER_LISTS.get(member, member)


def _member_of(name: str, action: str) -> tuple[str, str]:
    """The JSON member a query parameter name stands for, and its kind: list, map or plain."""
    if name == f"{action}RequestEntry":
        return "Entries", "list"
    if name in REQUEST_LISTS or name == "Entries":  # an empty list is sent as ``Member=``
        return name, "list"
    if name in MAPS:
        return name, "map"
    if name == "Tag":
        return ("tags" if action == "CreateQueue" else "Tags"), "map"
    for member, (entry, _, _) in MAPS.items():
        if entry == name:
            return member, "map"
    for member, item in REQUEST_LISTS.items():
        if item == name:
            return member, "list"
    return name, "plain"


def is_query(content_type: str | None, target: str | None) -> bool:
    """Whether a request with these headers speaks the query protocol."""
    return not target and (content_type or "").split(";")[0].strip().lower() == FORM_TYPE


Tree = dict[str, "str | Tree"]


class QueryRequest:
    """The parameters of one query-protocol request, as a tree of their dotted names."""

    def __init__(self, body: bytes, queue_url: str | None = None) -> None:
        try:
            pairs = parse_qsl(
                body.decode("utf-8"),
                keep_blank_values=True,
                strict_parsing=bool(body),
                max_num_fields=MAX_PARAMETERS,
            )
        except (UnicodeDecodeError, ValueError) as exc:
            raise SqsError(
                "MalformedQueryString", f"The request is not a valid form: {exc}"
            ) from None
        self.tree: Tree = {}
        for name, value in pairs:
            self._put(name, value)
        self.action = self.tree.pop("Action", None)
        self.tree.pop("Version", None)
        if not isinstance(self.action, str) or not self.action:
            raise SqsError("MissingAction", "The request must contain the parameter Action.")
        if queue_url is not None and "QueueUrl" not in self.tree:
            self.tree["QueueUrl"] = queue_url

    def _put(self, name: str, value: str) -> None:
        *path, last = name.split(".")
        node = self.tree
        for part in path:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise _malformed(name)
            node = child
        if last in node:
            raise _malformed(name)
        node[last] = value

    def arguments(self, shape: type[T]) -> T:
        """The request as ``shape``; MissingParameter or InvalidParameterValue if not."""
        data = _structure(self.tree, str(self.action))
        try:
            return msgspec.convert(data, shape, strict=False)
        except msgspec.ValidationError as exc:
            raise decode_error(exc) from None


def _malformed(name: str) -> SqsError:
    return SqsError("MalformedQueryString", f"The parameter {name} is given twice or malformed.")


def _structure(node: Tree, action: str) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for name, value in node.items():
        member, kind = _member_of(name, action)
        if kind == "plain":
            data[member] = value if isinstance(value, str) else _structure(value, action)
            continue
        items = _indexed(value, name)
        if kind == "list":
            data[member] = [v if isinstance(v, str) else _structure(v, action) for v in items]
        else:
            _, key, val = MAPS[member]
            entries: dict[str, Any] = {}
            for entry in items:
                if isinstance(entry, str) or not isinstance(entry.get(key), str):
                    raise SqsError("MissingParameter", f"{name}: every entry needs a {key}.")
                given = entry.get(val, "")
                entries[str(entry[key])] = (
                    given if isinstance(given, str) else _structure(given, action)
                )
            data[member] = entries
    return data


def _indexed(value: str | Tree, name: str) -> list[str | Tree]:
    """A flattened list's items (``Name.1``, ``Name.2``, ...) in index order (``Name=`` is
    an empty list)."""
    if value == "":
        return []
    if isinstance(value, str) or not all(_is_index(i) for i in value):
        raise _malformed(name)
    return [item for _, item in sorted(value.items(), key=lambda pair: int(pair[0]))]


def _is_index(text: str) -> bool:
    return text.isascii() and text.isdigit() and not text.startswith("0") and len(text) < 6


# -- answers ---------------------------------------------------------------------------------


def answer(action: str, result: Any) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and XML body of ``action``'s answer, from its JSON-shaped ``result``."""
    out = [f'<?xml version="1.0"?><{action}Response xmlns="{NAMESPACE}"><{action}Result>']
    _members(out, msgspec.to_builtins(result), action)
    out.append(f"</{action}Result>")
    request_id = str(uuid.uuid4())
    out.append(f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata>")
    out.append(f"</{action}Response>")
    return 200, _headers(request_id), "".join(out).encode()


#: The errors whose text differs on this protocol, as SQS words them there.
TEXTS = {"QueueDoesNotExist": "The specified queue does not exist for this wsdl version."}


def error_response(error: SqsError) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and XML body of an error answer."""
    request_id = str(uuid.uuid4())
    fault = "Sender" if error.sender_fault else "Receiver"
    text = TEXTS.get(error.name, str(error))
    body = (
        f'<?xml version="1.0"?><ErrorResponse xmlns="{NAMESPACE}"><Error><Type>{fault}</Type>'
        f"<Code>{_text(error.code)}</Code><Message>{_text(text)}</Message><Detail/>"
        f"</Error><RequestId>{request_id}</RequestId></ErrorResponse>"
    )
    return error.status, _headers(request_id), body.encode()


def _headers(request_id: str) -> dict[str, str]:
    return {"content-type": CONTENT_TYPE, "x-amzn-requestid": request_id}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    # a carriage return would reach the client as a newline unless written as a reference
    return escape(str(value), {"\r": "&#xD;"})


def _members(out: list[str], value: dict[str, Any], action: str) -> None:
    for member, item in value.items():
        if isinstance(item, list):
            name = _list_item(member, action)
            for each in item:
                _element(out, name, each, action)
        elif isinstance(item, dict) and member in MAPS:
            entry, key, val = MAPS[member]
            for k, v in item.items():
                out.append(f"<{entry}><{key}>{_text(k)}</{key}>")
                _element(out, val, v, action)
                out.append(f"</{entry}>")
        else:
            _element(out, member, item, action)


def _element(out: list[str], name: str, value: Any, action: str) -> None:
    if isinstance(value, dict):
        out.append(f"<{name}>")
        _members(out, value, action)
        out.append(f"</{name}>")
    else:
        out.append(f"<{name}>{_text(value)}</{name}>")
