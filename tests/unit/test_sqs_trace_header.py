"""SQS's AWSTraceHeader and the W3C traceparent: one trace context in two spellings."""

from __future__ import annotations

import pytest

from s3q.broker.sqs.xray import aws_trace_header, traceparent

HEADER = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
PARENT = "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"


def test_a_header_and_a_traceparent_name_the_same_context() -> None:
    assert traceparent(HEADER) == PARENT
    assert aws_trace_header(PARENT) == HEADER
    unsampled = HEADER.replace("Sampled=1", "Sampled=0")
    assert traceparent(unsampled) == PARENT[:-2] + "00"
    assert aws_trace_header(PARENT[:-2] + "00") == unsampled
    # other fields and their order do not matter; an unknown sampling decision is not sampled
    assert (
        traceparent("Parent=53995C3F42CD8AD8;Root=1-5759E988-BD862E3FE1BE46A994272793;Lineage=a:1")
        == PARENT[:-2] + "00"
    )
    assert aws_trace_header(PARENT[:-2] + "03") == HEADER  # only the sampled bit crosses


@pytest.mark.parametrize(
    "header",
    [
        "Root=1-abc",  # as test_sqs.py sends
        "Root=1-5759e988-bd862e3fe1be46a994272793",  # no parent: nothing to continue
        "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=0000000000000000",
        "Root=2-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8",
        "Root=1-00000000-000000000000000000000000;Parent=53995c3f42cd8ad8",
        "",
    ],
)
def test_a_header_that_names_no_parent_span_makes_no_traceparent(header: str) -> None:
    assert traceparent(header) is None


@pytest.mark.parametrize(
    "value",
    [
        "",
        "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8",
        "00-00000000000000000000000000000000-53995c3f42cd8ad8-01",
        "ff-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01",
        "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-zz",
    ],
)
def test_what_is_no_traceparent_makes_no_header(value: str) -> None:
    assert aws_trace_header(value) is None
