"""AddPermission and RemovePermission: statements of the queue's ``Policy`` attribute, written
as SQS writes them (one statement a label) and, like every policy s3q keeps, not enforced:
access to the endpoint is the broker's access keys."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from . import queues
from .protocol import SqsError, invalid, missing

POLICY = queues.KEY + "Policy"  # where the queue's saved attributes keep it
MAX_ACTIONS = 7
LABEL = re.compile(r"[A-Za-z0-9_-]{1,80}")
#: the actions a permission may grant (their batch versions come with them, as on SQS)
GRANTABLE = frozenset(
    {
        "*",
        "ChangeMessageVisibility",
        "DeleteMessage",
        "GetQueueAttributes",
        "GetQueueUrl",
        "ListDeadLetterSourceQueues",
        "PurgeQueue",
        "ReceiveMessage",
        "SendMessage",
    }
)


def _one_or_list(items: list[str]) -> str | list[str]:
    return items[0] if len(items) == 1 else items


def _policy(name: str, saved: dict[str, str]) -> dict[str, Any]:
    """The queue's policy document, with its statements as a list (a new one if it has none)."""
    text = saved.get(POLICY)
    if not text:
        return {"Version": "2008-10-17", "Id": f"{queues.arn(name)}/SQSDefaultPolicy"}
    try:
        policy = msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError):
        policy = None
    if not isinstance(policy, dict) or not isinstance(policy.get("Statement", []), list | dict):
        raise invalid(
            "The queue's Policy is not a JSON policy document: set a valid one, or an empty "
            "one, before adding a permission."
        )
    return policy


def _statements(policy: dict[str, Any]) -> list[Any]:
    statements = policy.get("Statement", [])
    return [statements] if isinstance(statements, dict) else list(statements)


def _has_label(statement: Any, label: str) -> bool:
    return isinstance(statement, dict) and statement.get("Sid") == label


def add(
    name: str, saved: dict[str, str], label: str, accounts: list[str], actions: list[str]
) -> None:
    """Add to queue ``name``'s policy (in its ``saved`` attributes) the statement that lets
    ``accounts`` call ``actions``, labelled ``label``; nothing changes if the input is not valid."""
    if not LABEL.fullmatch(label):
        raise invalid(
            f"Value {label} for parameter Label is invalid. Reason: Can only include "
            "alphanumeric characters, hyphens, or underscores. 1 to 80 in length."
        )
    if not actions:
        raise missing("Actions")
    if not accounts:
        raise invalid("Value [] for parameter PrincipalId is invalid. Reason: Unable to verify.")
    if len(actions) > MAX_ACTIONS:
        raise SqsError(
            "OverLimit",
            f"{len(actions)} Actions were found, maximum allowed is {MAX_ACTIONS}.",
            403,
        )
    for action in actions:
        if action not in GRANTABLE:
            raise invalid(
                f"Value SQS:{action} for parameter ActionName is invalid. Reason: Only the queue "
                "owner is allowed to invoke this action."
            )
    policy = _policy(name, saved)
    statements = _statements(policy)
    if any(_has_label(s, label) for s in statements):
        raise invalid(f"Value {label} for parameter Label is invalid. Reason: Already exists.")
    principals = [f"arn:aws:iam::{account}:root" for account in accounts]
    statements.append(
        {
            "Sid": label,
            "Effect": "Allow",
            "Principal": {"AWS": _one_or_list(principals)},
            "Action": _one_or_list([f"SQS:{action}" for action in actions]),
            "Resource": queues.arn(name),
        }
    )
    policy["Statement"] = statements
    saved[POLICY] = msgspec.json.encode(policy).decode()


def remove(name: str, saved: dict[str, str], label: str) -> None:
    """Remove the statement labelled ``label``; the policy goes with its last statement."""
    policy = _policy(name, saved)
    statements = _statements(policy)
    kept = [s for s in statements if not _has_label(s, label)]
    if len(kept) == len(statements):
        raise invalid(f"Value {label} for parameter Label is invalid. Reason: can't find label.")
    if kept:
        policy["Statement"] = kept
        saved[POLICY] = msgspec.json.encode(policy).decode()
    else:
        saved.pop(POLICY, None)
