"""How an SQS message lives in an s3q message, and the checks SQS makes of what is sent.

The body is the payload (UTF-8). Typed message attributes are kept in ``Message.attributes``
under reserved keys, so they round-trip exactly: ``sqs.attr.<Name>`` holds ``<DataType>`` and
the value on the next line (a Binary value in base64); ``sqs.sys.<Name>`` holds a message system
attribute (``AWSTraceHeader``) the same way. Attributes set by the native API (other keys) are
shown to SQS clients as String attributes. The attribute ``s3q.priority`` (a Number, 0-255)
sets the message's priority and is kept like any other.

A message's trace context (``s3q.tracing``) comes from its String attribute ``traceparent``
(and ``tracestate``), else from its ``AWSTraceHeader``, and is copied to the reserved attributes
of those names, where s3q's workers find it. SQS clients are not shown the reserved attributes:
they see a message's trace context as its ``AWSTraceHeader`` (as sent, or made from it).

A message sent becomes an item for ``enqueue_batch`` and the digests SendMessage answers with
(:func:`sent`); a message received, the entry ReceiveMessage answers with (:func:`received`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from typing import Any

from ...config import Setting
from ...message import Message
from ...tracing import TRACEPARENT, TRACESTATE
from . import handles, queues, xray
from .digest import md5_of_attributes, md5_of_body
from .protocol import SqsError, invalid
from .shapes import Attributes, AttributeValue, MessageFields

ATTRIBUTE = "sqs.attr."
SYSTEM = "sqs.sys."
GROUP = "sqs.group"  # MessageGroupId on a standard queue, as builds before tenants kept it
PRIORITY = "s3q.priority"
MAX_ATTRIBUTES = 10
TRACE_HEADER = "AWSTraceHeader"
SYSTEM_NAMES = (TRACE_HEADER,)
HIDDEN = frozenset((GROUP, TRACEPARENT, TRACESTATE))  # kept, not shown as message attributes

NAME = re.compile(r"[A-Za-z0-9_.-]{1,256}")
DATA_TYPE = re.compile(r"(String|Number|Binary)(\.[A-Za-z0-9_.-]+)?")
NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
# the characters SQS accepts in a body or a string value
BAD_CHARACTER = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
ID_TEXT = re.compile(r"[!-~]{1,128}")  # MessageGroupId, MessageDeduplicationId


def check_body(body: str) -> None:
    if not body:
        raise SqsError("MissingParameter", "The request must contain the parameter MessageBody.")
    if BAD_CHARACTER.search(body):
        raise SqsError("InvalidMessageContents", "Invalid characters found in the message body.")


def check_id_text(what: str, value: str) -> str:
    if not ID_TEXT.fullmatch(value):
        raise invalid(
            f"Value {value} for parameter {what} is invalid. Reason: {what} can only include "
            "alphanumeric and punctuation characters. 1 to 128 in length."
        )
    return value


def check_attributes(attributes: Attributes, system: bool = False) -> None:
    """SQS's rules for message attributes; InvalidParameterValue at the first broken one."""
    kind = "system attribute" if system else "attribute"
    owner = "(system)" if system else "(user)"
    if len(attributes) > MAX_ATTRIBUTES:
        raise invalid(f"Number of message {kind}s [{len(attributes)}] exceeds the allowed 10.")
    for name, value in attributes.items():
        if system and name not in SYSTEM_NAMES:
            raise invalid(f"Message system attribute name '{name}' is invalid.")
        lowered = name.lower()
        if (
            not NAME.fullmatch(name)
            or ".." in name
            or name.startswith(".")
            or name.endswith(".")
            or lowered.startswith(("aws.", "amazon."))
        ):
            raise invalid(
                f"The message {kind} name '{name}' is invalid. Attribute name can contain "
                "A-Z, a-z, 0-9, underscore (_), hyphen (-), and period (.) characters."
            )
        _check_value(name, value, kind, owner)


def _check_value(name: str, value: AttributeValue, kind: str, owner: str) -> None:
    if not value.DataType:
        raise invalid(f"The message {kind} '{name}' must contain a non-empty DataType.")
    if len(value.DataType) > 256 or not DATA_TYPE.fullmatch(value.DataType):
        raise invalid(
            f"The message {kind} '{name}' has an invalid message attribute type, the set of "
            "supported type prefixes is Binary, Number, and String."
        )
    if value.StringListValues or value.BinaryListValues:
        raise invalid(f"Message {kind} '{name}': list values are not supported.")
    base = value.DataType.split(".", 1)[0]
    if base == "Binary":
        if not value.BinaryValue or value.StringValue is not None:
            raise invalid(
                f"Message {owner} attribute '{name}' must contain a non-empty value of type "
                "'Binary'."
            )
        return
    text = value.StringValue
    if not text or value.BinaryValue is not None:
        raise invalid(
            f"Message {owner} attribute '{name}' must contain a non-empty value of type '{base}'."
        )
    if BAD_CHARACTER.search(text):
        raise invalid(f"The message {kind} '{name}' contains invalid characters.")
    if base == "Number" and not NUMBER.fullmatch(text.strip()):
        raise invalid(f"Can't cast the value of message {kind} '{name}' to a number.")


def priority_of(attributes: Attributes) -> int:
    """The priority the ``s3q.priority`` attribute asks for (0 without it)."""
    value = attributes.get(PRIORITY)
    if value is None:
        return 0
    text = value.StringValue or ""
    if not value.DataType.startswith("Number") or not text.strip().isdigit():
        raise invalid(f"Message attribute '{PRIORITY}' must be a Number from 0 to 255.")
    priority = int(text)
    if priority > 255:
        raise invalid(f"Message attribute '{PRIORITY}' must be a Number from 0 to 255.")
    return priority


def size_of(body: str, attributes: Attributes) -> int:
    """What SQS counts against MaximumMessageSize: the body, attribute names, types, values."""
    size = len(body.encode("utf-8"))
    for name, value in attributes.items():
        size += len(name.encode()) + len(value.DataType.encode())
        size += len(value.BinaryValue or b"") + len((value.StringValue or "").encode())
    return size


def _encode(value: AttributeValue) -> str:
    if value.BinaryValue is not None:
        return f"{value.DataType}\n{base64.b64encode(value.BinaryValue).decode()}"
    return f"{value.DataType}\n{value.StringValue}"


def _decode(stored: str) -> AttributeValue | None:
    data_type, sep, text = stored.partition("\n")
    if not sep:
        return None
    if data_type.startswith("Binary"):
        try:
            return AttributeValue(DataType=data_type, BinaryValue=base64.b64decode(text))
        except (binascii.Error, ValueError):
            return None
    return AttributeValue(DataType=data_type, StringValue=text)


def stored_attributes(attributes: Attributes, system: Attributes) -> dict[str, str] | None:
    """``Message.attributes`` for an SQS message's attributes, its trace context too."""
    stored = {ATTRIBUTE + name: _encode(value) for name, value in attributes.items()}
    stored.update((SYSTEM + name, _encode(value)) for name, value in system.items())
    stored.update(trace_context(attributes, system))
    return stored or None


def trace_context(attributes: Attributes, system: Attributes) -> dict[str, str]:
    """The W3C trace context an SQS message carries: its String attributes ``traceparent`` and
    ``tracestate``, else the one its ``AWSTraceHeader`` names."""
    found = {
        key: value.StringValue
        for key in (TRACEPARENT, TRACESTATE)
        if (value := attributes.get(key)) is not None
        and value.DataType.startswith("String")
        and value.StringValue
    }
    if TRACEPARENT in found:
        return found
    header = system.get(TRACE_HEADER)
    made = None if header is None else xray.traceparent(header.StringValue or "")
    return {} if made is None else {TRACEPARENT: made}


def user_attributes(message: Message) -> Attributes:
    """The message attributes of ``message`` as an SQS client sent them."""
    found: Attributes = {}
    for key, stored in message.attributes.items():
        if key.startswith(ATTRIBUTE):
            value = _decode(stored)
            if value is not None:
                found[key[len(ATTRIBUTE) :]] = value
        elif not key.startswith(SYSTEM) and key not in HIDDEN:  # set by the native API
            found[key] = AttributeValue(DataType="String", StringValue=stored)
    return found


def system_attribute(message: Message, name: str) -> str | None:
    """A message system attribute's string value (AWSTraceHeader, DeadLetterQueueSourceArn)."""
    stored = message.attributes.get(SYSTEM + name)
    value = None if stored is None else _decode(stored)
    return None if value is None else value.StringValue


def trace_header(message: Message) -> str | None:
    """The ``AWSTraceHeader`` of a message: as sent, or made from its ``traceparent``."""
    sent = system_attribute(message, TRACE_HEADER)
    if sent is not None:
        return sent
    context = message.attributes.get(TRACEPARENT)
    return None if context is None else xray.aws_trace_header(context)


def select(attributes: Attributes, names: list[str]) -> Attributes:
    """The attributes ``MessageAttributeNames`` asks for: ``All``, ``*`` or ``.*``, names, and
    prefix wildcards: ``meta.*`` is every attribute whose name starts with ``meta`` (as on
    SQS, where ``Hel.*`` selects ``Hello`` and ``Help.Me``)."""
    if not names:
        return {}
    if "All" in names or ".*" in names or "*" in names:
        return dict(attributes)
    exact = {n for n in names if not n.endswith(".*")}
    prefixes = tuple(n[:-2] for n in names if n.endswith(".*"))
    return {
        k: v for k, v in attributes.items() if k in exact or (prefixes and k.startswith(prefixes))
    }


def system_value(text: str) -> str:
    """The stored form of a String system attribute (e.g. DeadLetterQueueSourceArn)."""
    return _encode(AttributeValue(DataType="String", StringValue=text))


def sent(
    name: str, settings: dict[str, Setting], fields: MessageFields
) -> tuple[dict[str, Any], dict[str, Any]]:
    """What to enqueue for one message sent to queue ``name`` (an ``enqueue_batch`` item),
    and the digests to answer with."""
    body = fields.MessageBody
    check_body(body)
    attributes, system = fields.MessageAttributes, fields.MessageSystemAttributes
    check_attributes(attributes)
    check_attributes(system, system=True)
    limit = settings.get("max_message_size")
    if isinstance(limit, int) and size_of(body, attributes) > limit:
        raise invalid(
            f"One or more parameters are invalid. Reason: Message must be shorter than "
            f"{limit} bytes."
        )
    values = queues.current(name, settings)
    fifo = queues.is_fifo(name)
    delay = fields.DelaySeconds
    if delay is not None:
        if not 0 <= delay <= 900:
            raise invalid(
                f"Value {delay} for parameter DelaySeconds is invalid. Reason: must be >= 0 "
                "and <= 900."
            )
        if fifo and delay:  # 0 is valid: the queue's own delay applies
            raise invalid(
                f"Value {delay} for parameter DelaySeconds is invalid. Reason: The request "
                "include parameter that is not valid for this queue type."
            )
    if delay is None or fifo:
        delay = int(values.get("DelaySeconds", "0"))
    group = dedup = tenant = None
    if fifo:
        if fields.MessageGroupId is None:
            raise SqsError(
                "MissingParameter", "The request must contain the parameter MessageGroupId."
            )
        group = check_id_text("MessageGroupId", fields.MessageGroupId)
        if fields.MessageDeduplicationId is not None:
            dedup = check_id_text("MessageDeduplicationId", fields.MessageDeduplicationId)
        elif values.get("ContentBasedDeduplication") == "true":
            dedup = hashlib.sha256(body.encode("utf-8")).hexdigest()
        else:
            raise SqsError(
                "InvalidParameterValue",
                "The queue should either have ContentBasedDeduplication enabled or "
                "MessageDeduplicationId provided explicitly",
                whole_request=True,
            )
    else:
        if fields.MessageDeduplicationId is not None:
            raise invalid(
                f"Value {fields.MessageDeduplicationId} for parameter MessageDeduplicationId "
                "is invalid. Reason: The request includes a parameter that is not valid for "
                "this queue type."
            )
        if fields.MessageGroupId is not None:  # a fair queue's tenant
            tenant = check_id_text("MessageGroupId", fields.MessageGroupId)
    item = {
        "payload": body.encode("utf-8"),
        "priority": priority_of(attributes),
        "delay": float(delay),
        "dedup_id": dedup,
        "group": group,
        "attributes": stored_attributes(attributes, system),
        "tenant": tenant,
    }
    answer: dict[str, Any] = {"MD5OfMessageBody": md5_of_body(body)}
    if attributes:
        answer["MD5OfMessageAttributes"] = md5_of_attributes(attributes)
    if system:
        answer["MD5OfMessageSystemAttributes"] = md5_of_attributes(system)
    return item, answer


def received(
    name: str,
    message: Message,
    now: float,
    system: set[str],
    attribute_names: list[str],
) -> dict[str, Any]:
    """``message`` of queue ``name`` as ReceiveMessage answers it, at ``now``: ``system``, the
    system attributes asked for; ``attribute_names``, the message attributes."""
    body = message.payload.decode("utf-8", errors="replace")
    first = message.first_delivered_at
    answer: dict[str, Any] = {
        "MessageId": message.id,
        "ReceiptHandle": handles.encode(name, message, now),
        "MD5OfBody": md5_of_body(body),
        "Body": body,
    }
    everything = "All" in system
    known: dict[str, str | None] = {
        "SenderId": queues.ACCOUNT,
        "SentTimestamp": str(int(message.enqueued_at * 1000)),
        "ApproximateReceiveCount": str(message.attempts),
        "ApproximateFirstReceiveTimestamp": None if first is None else str(int(first * 1000)),
        "AWSTraceHeader": trace_header(message),
        "DeadLetterQueueSourceArn": system_attribute(message, "DeadLetterQueueSourceArn"),
    }
    if queues.is_fifo(name):
        known["MessageGroupId"] = message.group
        known["MessageDeduplicationId"] = message.dedup_id
        known["SequenceNumber"] = sequence(name, message.id).get("SequenceNumber")
    else:
        known["MessageGroupId"] = message.tenant or message.attributes.get(GROUP)
    attributes = {k: v for k, v in known.items() if v is not None and (everything or k in system)}
    if attributes:
        answer["Attributes"] = attributes
    chosen = select(user_attributes(message), attribute_names)
    if chosen:
        answer["MessageAttributes"] = chosen
        answer["MD5OfMessageAttributes"] = md5_of_attributes(chosen)
    return answer


def sequence(name: str, mid: str) -> dict[str, str]:
    """A FIFO message's SequenceNumber: its id (ids sort in enqueue order) as a number."""
    if not queues.is_fifo(name):
        return {}
    try:
        return {"SequenceNumber": str(int(mid, 16))}
    except ValueError:
        return {}
