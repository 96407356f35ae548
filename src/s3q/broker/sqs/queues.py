"""SQS queue attributes, and where each lives.

``VisibilityTimeout``, ``MaximumMessageSize``, ``MessageRetentionPeriod`` and the
``maxReceiveCount`` of ``RedrivePolicy`` are the queue's own settings (``visibility_timeout``,
``max_message_size``, ``retention``, ``max_attempts``), so the native API honours them too. The
others are kept in the queue's saved ``attributes`` setting under ``sqs.<Name>``.

A queue that never set ``MessageRetentionPeriod`` keeps its messages until they are deleted (the
native default: nothing leaves unless asked) and shows SQS's default, 345600; one whose
``sqs.MessageRetentionPeriod`` an earlier build kept without enforcing it shows that value
until it is set again, which enforces it. A queue without a RedrivePolicy never dead-letters
a message on its receive count, as in SQS: its ``max_attempts`` is :data:`NO_REDRIVE_ATTEMPTS`.
"""

from __future__ import annotations

import msgspec

from ...config import Setting
from ...wire.codec import QUEUE_NAME
from .protocol import SqsError, invalid

ACCOUNT = "000000000000"
REGION = "us-east-1"
NO_REDRIVE_ATTEMPTS = 2**31 - 1
MIN_VISIBILITY = 0.001  # SQS's VisibilityTimeout 0: s3q leases must last a moment
KEY = "sqs."
MAX_RECEIVE_COUNT = 1000

RANGES = {
    "DelaySeconds": (0, 900),
    "MaximumMessageSize": (1024, 1048576),
    "MessageRetentionPeriod": (60, 1209600),
    "ReceiveMessageWaitTimeSeconds": (0, 20),
    "VisibilityTimeout": (0, 43200),
    "KmsDataKeyReusePeriodSeconds": (60, 86400),
}
DEFAULTS = {
    "DelaySeconds": "0",
    "MaximumMessageSize": "1048576",  # SQS's default since 2025
    "MessageRetentionPeriod": "345600",
    "ReceiveMessageWaitTimeSeconds": "0",
    "VisibilityTimeout": "30",
}
FIFO_DEFAULTS = {
    "ContentBasedDeduplication": "false",
    "DeduplicationScope": "queue",
    "FifoThroughputLimit": "perQueue",
}
OPAQUE = frozenset({"Policy", "RedriveAllowPolicy", "KmsMasterKeyId", "SqsManagedSseEnabled"})
SETTABLE = frozenset(RANGES) | OPAQUE | frozenset(FIFO_DEFAULTS) | {"RedrivePolicy", "FifoQueue"}
COUNTS = frozenset(
    {
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    }
)
READ_ONLY = COUNTS | {"CreatedTimestamp", "LastModifiedTimestamp", "QueueArn"}
ALL = SETTABLE | READ_ONLY


class RedrivePolicy(msgspec.Struct):
    deadLetterTargetArn: str
    maxReceiveCount: int | str


def arn(name: str) -> str:
    return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"


def name_of_arn(value: str) -> str:
    """The queue name an SQS queue ARN ends with; InvalidParameterValue unless it is one."""
    parts = value.split(":")
    if len(parts) != 6 or parts[:3] != ["arn", "aws", "sqs"] or not QUEUE_NAME.fullmatch(parts[5]):
        raise invalid(f"Value {value} for parameter deadLetterTargetArn is invalid.")
    return parts[5]


def is_fifo(name: str) -> bool:
    return name.endswith(".fifo")


def check_new_name(name: str, attributes: dict[str, str]) -> None:
    """A CreateQueue's name, as SQS checks it: a FIFO queue's (``FifoQueue=true``) ends in
    ``.fifo``, any other does not; InvalidParameterValue with SQS's text otherwise."""
    fifo = attributes.get("FifoQueue", "").lower() == "true"
    if not QUEUE_NAME.fullmatch(name) or is_fifo(name) != fifo:
        raise invalid(
            "The name of a FIFO queue can only include alphanumeric characters, hyphens, or "
            "underscores, must end with .fifo suffix and be 1 to 80 in length."
            if fifo
            else "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in "
            "length"
        )


def _boolean(name: str, value: str) -> str:
    if value.lower() not in ("true", "false"):
        raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
    return value.lower()


def redrive_policy(value: str) -> tuple[str, int] | None:
    """The dead-letter target's name and maxReceiveCount of a RedrivePolicy ('' is none)."""
    if not value:
        return None
    try:
        policy = msgspec.json.decode(value, type=RedrivePolicy)
        count = int(policy.maxReceiveCount)
    except (msgspec.DecodeError, ValueError, RecursionError):
        raise invalid(
            f"Value {value} for parameter RedrivePolicy is invalid. Reason: Redrive policy is "
            "not a valid JSON map of deadLetterTargetArn and maxReceiveCount."
        ) from None
    if not 1 <= count <= MAX_RECEIVE_COUNT:
        raise invalid(
            f"Value {value} for parameter RedrivePolicy is invalid. Reason: Invalid value for "
            f"maxReceiveCount: {count}, valid values are from 1 to {MAX_RECEIVE_COUNT} both "
            "inclusive."
        )
    return name_of_arn(policy.deadLetterTargetArn), count


def check(name: str, given: dict[str, str], creating: bool) -> dict[str, str]:
    """The attributes of a CreateQueue or SetQueueAttributes, checked and normalised."""
    checked: dict[str, str] = {}
    fifo = is_fifo(name)
    for attribute, value in given.items():
        if not isinstance(value, str):
            raise SqsError("InvalidAttributeValue", f"Invalid value for {attribute}.")
        if attribute not in SETTABLE:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {attribute}.")
        if attribute in RANGES:
            low, high = RANGES[attribute]
            if not value.strip().isdigit() or not low <= int(value) <= high:
                raise SqsError(
                    "InvalidAttributeValue",
                    f"Invalid value for the parameter {attribute}: must be from {low} to {high}.",
                )
            value = str(int(value))
        elif attribute == "FifoQueue":
            if not creating:
                raise SqsError("InvalidAttributeName", "FifoQueue can only be set by CreateQueue.")
            value = _boolean(attribute, value)  # matches the name: see check_new_name
        elif attribute in FIFO_DEFAULTS:
            if not fifo:
                raise SqsError(
                    "InvalidAttributeName", f"Unknown Attribute {attribute} for a standard queue."
                )
            if attribute == "ContentBasedDeduplication":
                value = _boolean(attribute, value)
        elif attribute == "RedrivePolicy":
            policy = redrive_policy(value)
            if policy is not None:
                value = redrive_json(*policy)
        checked[attribute] = value
    return checked


def redrive_json(target: str, count: int) -> str:
    return msgspec.json.encode(
        {"deadLetterTargetArn": arn(target), "maxReceiveCount": count}
    ).decode()


def settings_for(checked: dict[str, str], saved: dict[str, str]) -> dict[str, Setting]:
    """The queue settings that carry ``checked`` attributes (the others go to ``saved``)."""
    settings: dict[str, Setting] = {}
    if "VisibilityTimeout" in checked:
        settings["visibility_timeout"] = float(checked["VisibilityTimeout"]) or MIN_VISIBILITY
    if "MaximumMessageSize" in checked:
        settings["max_message_size"] = int(checked["MaximumMessageSize"])
    if "MessageRetentionPeriod" in checked:
        settings["retention"] = float(checked["MessageRetentionPeriod"])
    if "RedrivePolicy" in checked:
        policy = redrive_policy(checked["RedrivePolicy"])
        settings["max_attempts"] = NO_REDRIVE_ATTEMPTS if policy is None else policy[1]
    kept = dict(saved)
    for attribute, value in checked.items():
        if attribute == "Policy" and not value:
            kept.pop(KEY + attribute, None)  # Policy="" removes the policy, as on SQS
        elif attribute == "MessageRetentionPeriod":
            kept.pop(KEY + attribute, None)  # (an earlier build's, kept and not enforced)
        elif attribute not in ("VisibilityTimeout", "MaximumMessageSize"):
            kept[KEY + attribute] = value
    settings["attributes"] = kept
    return settings


def saved_of(settings: dict[str, Setting]) -> dict[str, str]:
    """The queue's saved attributes (all of them: other tools' keys are kept as they are)."""
    attributes = settings.get("attributes")
    return dict(attributes) if isinstance(attributes, dict) else {}


def current(name: str, settings: dict[str, Setting]) -> dict[str, str]:
    """The settable attributes of a queue as GetQueueAttributes shows them."""
    saved = saved_of(settings)
    values = dict(DEFAULTS)
    if is_fifo(name):
        values.update(FIFO_DEFAULTS, FifoQueue="true")
    values.update((k[len(KEY) :], v) for k, v in saved.items() if k.startswith(KEY))
    visibility = settings.get("visibility_timeout")
    if isinstance(visibility, int | float):
        values["VisibilityTimeout"] = str(round(visibility))
    size = settings.get("max_message_size")
    if isinstance(size, int):
        values["MaximumMessageSize"] = str(size)
    retention = settings.get("retention")
    if isinstance(retention, int | float) and retention > 0:
        values["MessageRetentionPeriod"] = str(round(retention))
    policy = redrive_policy(values.get("RedrivePolicy", ""))
    attempts = settings.get("max_attempts")
    if policy is not None and isinstance(attempts, int):
        values["RedrivePolicy"] = redrive_json(policy[0], attempts)
    elif "RedrivePolicy" in values and not values["RedrivePolicy"]:
        del values["RedrivePolicy"]
    values = {k: v for k, v in values.items() if not k.endswith("Timestamp")}
    return values


def dead_letter_target(name: str, settings: dict[str, Setting]) -> str | None:
    policy = redrive_policy(current(name, settings).get("RedrivePolicy", ""))
    return None if policy is None else policy[0]


def timestamp(settings: dict[str, Setting], which: str) -> str | None:
    return saved_of(settings).get(KEY + which)
