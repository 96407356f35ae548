"""docs/sqs.md's tables of SQS actions and attributes say what the endpoint does: every action
and attribute of botocore's model of SQS has a row, and the rows marked supported are the ones
the endpoint serves (a new action in SQS's API, or one added or dropped here, fails this)."""

from __future__ import annotations

import re
from pathlib import Path

import botocore.session

from s3q.broker.sqs import queues
from s3q.broker.sqs.actions import ACTIONS, UNSUPPORTED

DOC = (Path(__file__).resolve().parents[2] / "docs" / "sqs.md").read_text()


def table(heading: str) -> dict[str, str]:
    """The rows of the table under ``heading``: each name in its first cell -> its status."""
    section = DOC.split(heading + "\n", 1)[1].split("\n#", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 2 and not set(cells[0]) <= {"-"}:
            for name in re.split(r",\s*", cells[0]):
                rows[name] = cells[1]
    return rows


def model_enum(shape: str) -> set[str]:
    model = botocore.session.get_session().get_service_model("sqs")
    return set(model.shape_for(shape).enum) - {"All"}


def test_every_action_is_in_the_table_as_the_endpoint_serves_it() -> None:
    rows = table("## Actions")
    model = botocore.session.get_session().get_service_model("sqs")
    assert set(rows) - {"action"} == set(model.operation_names)
    assert {a for a, status in rows.items() if status == "supported"} == set(ACTIONS)
    assert {a for a, status in rows.items() if status == "unsupported"} == set(UNSUPPORTED)


def test_every_queue_attribute_is_in_the_table_and_known_to_the_endpoint() -> None:
    rows = table("### Queue attributes")
    assert set(rows) - {"attribute"} == model_enum("QueueAttributeName")
    assert model_enum("QueueAttributeName") == queues.ALL


def test_every_message_system_attribute_is_in_the_table() -> None:
    rows = table("### Message system attributes")
    assert set(rows) - {"attribute"} == model_enum("MessageSystemAttributeName")
    assert {status for name, status in rows.items() if name != "attribute"} == {"supported"}
