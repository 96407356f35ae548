"""The AWS JSON 1.0 protocol of SQS as botocore speaks it: request decoding and error answers.

A request is ``POST /`` with ``X-Amz-Target: AmazonSQS.<Action>`` and a JSON body; an answer is
JSON (``application/x-amz-json-1.0``). An error answer carries ``{"__type":
"com.amazonaws.sqs#<Shape>", "message": ...}`` and the header ``x-amzn-query-error:
<legacy code>;Sender``, from which botocore takes the error code users see (e.g.
``AWS.SimpleQueueService.NonExistentQueue``) and the modeled exception class it raises
(``client.exceptions.QueueDoesNotExist``).
"""

from __future__ import annotations

import uuid
from typing import Any, TypeVar

import msgspec

from ...errors import S3QError

CONTENT_TYPE = "application/x-amz-json-1.0"
TARGET_PREFIX = "AmazonSQS."

#: Legacy (query protocol) codes of the errors whose code is not their shape name.
QUERY_CODES = {
    "QueueDoesNotExist": "AWS.SimpleQueueService.NonExistentQueue",
    "QueueNameExists": "QueueAlreadyExists",
    "BatchEntryIdsNotDistinct": "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
    "TooManyEntriesInBatchRequest": "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
    "EmptyBatchRequest": "AWS.SimpleQueueService.EmptyBatchRequest",
    "InvalidBatchEntryId": "AWS.SimpleQueueService.InvalidBatchEntryId",
    "BatchRequestTooLong": "AWS.SimpleQueueService.BatchRequestTooLong",
    "MessageNotInflight": "AWS.SimpleQueueService.MessageNotInflight",
    "UnsupportedOperation": "AWS.SimpleQueueService.UnsupportedOperation",
}

T = TypeVar("T")


class SqsError(S3QError):
    """An SQS error answer: the error's shape name, its HTTP status and a message."""

    def __init__(
        self, name: str, message: str, status: int = 400, *, whole_request: bool = False
    ) -> None:
        super().__init__(message)
        self.name = name
        self.status = status
        self.whole_request = whole_request  # in a batch, fails the request, not the entry

    @property
    def code(self) -> str:
        """The code botocore reports (``Error.Code``)."""
        return QUERY_CODES.get(self.name, self.name)

    @property
    def sender_fault(self) -> bool:
        return self.status < 500


def invalid(message: str) -> SqsError:
    return SqsError("InvalidParameterValue", message)


def missing(parameter: str) -> SqsError:
    return SqsError("MissingParameter", f"The request must contain the parameter {parameter}.")


def json_action(target: str | None) -> str:
    """The action an ``X-Amz-Target`` header names."""
    if not target or not target.startswith(TARGET_PREFIX):
        raise SqsError(
            "InvalidAction",
            f"Give the action as X-Amz-Target: {TARGET_PREFIX}<Action> (the AWS JSON 1.0 "
            "protocol) or as the Action parameter of a form (the AWS query protocol).",
        )
    return target[len(TARGET_PREFIX) :]


def error_response(error: SqsError) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of an error answer."""
    body = {"__type": f"com.amazonaws.sqs#{error.name}", "message": str(error)}
    fault = "Sender" if error.sender_fault else "Receiver"
    headers = {**response_headers(), "x-amzn-query-error": f"{error.code};{fault}"}
    return error.status, headers, msgspec.json.encode(body)


def response_headers() -> dict[str, str]:
    return {"content-type": CONTENT_TYPE, "x-amzn-requestid": str(uuid.uuid4())}


def within(what: str, value: int | None, low: int, high: int, default: int) -> int:
    """``value`` of parameter ``what`` (``default`` when absent); InvalidParameterValue unless
    it lies in ``[low, high]``."""
    if value is None:
        return default
    if isinstance(value, bool) or not low <= value <= high:
        raise invalid(
            f"Value {value} for parameter {what} is invalid. Reason: Must be between {low} and "
            f"{high}, if provided."
        )
    return value


def decode(body: bytes, shape: type[T]) -> T:
    """The request ``body`` as ``shape``; MissingParameter or InvalidParameterValue if not."""
    try:
        return msgspec.json.decode(body or b"{}", type=shape)
    except msgspec.ValidationError as exc:
        raise decode_error(exc) from None
    except (msgspec.DecodeError, RecursionError) as exc:  # RecursionError: nested too deep
        raise SqsError("SerializationException", f"Malformed JSON body: {exc}") from None


def decode_error(exc: msgspec.ValidationError) -> SqsError:
    """The SQS error for a request that does not fit its action's shape."""
    text = str(exc)
    if text.startswith("Object missing required field"):
        return missing(text.split("`")[1] if "`" in text else text)
    return invalid(f"Invalid request: {text}")


def encode(result: Any) -> bytes:
    return msgspec.json.encode(result)
