"""Traces that cross the queue (s3q.tracing), recorded by OpenTelemetry's SDK in memory: from a
request's span through an enqueue, the broker and a worker to the handler's own spans; the SQS
endpoint's two spellings of a trace context; and s3q without OpenTelemetry, which it never
imports."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from broker_harness import Broker
from conftest import SUPPORT_DIR, child_env
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.util._once import Once
from sqs_broker import SqsBroker
from worker_harness import memory_url, serve_until

import s3q
from s3q import tracing
from s3q.client import connect, connect_async
from s3q.worker import Completed, Dead, Event, Retry, Worker

FAST_RETRY = {"max_attempts": 2, "retry_delay": 0.01, "retry_delay_max": 0.02}


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """A global tracer provider whose spans are kept in memory, taken away afterwards."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        # a program sets its provider once; the tests put the API's default back, as
        # OpenTelemetry's own test utilities do, so no other test is traced
        trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
        trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]
        provider.shutdown()


def app_tracer() -> trace.Tracer:
    return trace.get_tracer("app")


def described(found: Sequence[ReadableSpan]) -> str:
    """The spans, one a line: name, kind, trace and span ids, parent, links, attributes."""
    lines = []
    for span in sorted(found, key=lambda s: s.start_time or 0):
        ctx = span.get_span_context()
        assert ctx is not None
        parent = f"{span.parent.span_id:016x}" if span.parent else "-"
        links = [f"{link.context.span_id:016x}" for link in span.links]
        status = span.status.status_code.name
        lines.append(
            f"{span.name} [{span.kind.name}] trace={ctx.trace_id:032x} span={ctx.span_id:016x} "
            f"parent={parent} links={links} status={status} {dict(span.attributes or {})}"
        )
    return "\n".join(lines)


def one(found: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    named = [s for s in found if s.name == name]
    assert len(named) == 1, f"{len(named)} spans named {name!r}:\n{described(found)}"
    return named[0]


def span_id(span: ReadableSpan) -> int:
    ctx = span.get_span_context()
    assert ctx is not None
    return ctx.span_id


def trace_id_of(span: ReadableSpan) -> int:
    ctx = span.get_span_context()
    assert ctx is not None
    return ctx.trace_id


def traceparent_of(span: ReadableSpan) -> str:
    ctx = span.get_span_context()
    assert ctx is not None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"


def parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


# --------------------------------------------------------------------------- one trace


def test_one_trace_from_a_request_through_the_broker_and_a_worker_to_the_handler(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    app = app_tracer()
    with Broker(f"file://{tmp_path}/store") as broker:  # made once the provider is set
        with (
            connect(broker.url) as client,
            app.start_as_current_span("POST /signup", kind=SpanKind.SERVER),
        ):
            mid = client.queue("emails").enqueue(b"hi", attributes={"to": "ann"})

        delivered: list[s3q.Message] = []

        async def handle(msg: s3q.Message) -> None:
            delivered.append(msg)
            with app.start_as_current_span("send email"):
                pass

        worker = Worker(f"{broker.url}/emails", handle, poll_wait=0.05)
        serve_until(worker, lambda event: isinstance(event, Completed))
    found = spans.get_finished_spans()  # the broker has stopped: every span has ended
    print(described(found))

    request = one(found, "POST /signup")
    send = one(found, "send emails")
    enqueue = one(found, "POST /v1/queues/{name}/enqueue")
    process = one(found, "process emails")
    handler = one(found, "send email")
    trace_id = trace_id_of(request)
    assert all(trace_id_of(s) == trace_id for s in (send, enqueue, process, handler))
    [msg] = delivered
    assert msg.attributes == {"to": "ann", tracing.TRACEPARENT: traceparent_of(send)}

    assert send.kind is SpanKind.PRODUCER and parent_id(send) == span_id(request)
    assert dict(send.attributes or {}) == {
        "messaging.system": "s3q",
        "messaging.destination.name": "emails",
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.message.id": mid,
    }
    # the client's request carries the producer's context: the broker serves it as its child
    assert enqueue.kind is SpanKind.SERVER and parent_id(enqueue) == span_id(send)
    assert enqueue.attributes is not None
    assert enqueue.attributes["http.route"] == "/v1/queues/{name}/enqueue"
    assert enqueue.attributes["http.response.status_code"] == 200
    # the handler's span: the child of the creation context the message carried, linked to it
    assert process.kind is SpanKind.CONSUMER and parent_id(process) == span_id(send)
    assert [link.context.span_id for link in process.links] == [span_id(send)]
    assert dict(process.attributes or {}) == {
        "messaging.system": "s3q",
        "messaging.destination.name": "emails",
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.message.id": mid,
        "messaging.s3q.message.delivery_count": 1,
        "messaging.s3q.outcome": "completed",
    }
    assert process.status.status_code is StatusCode.UNSET
    assert parent_id(handler) == span_id(process)
    # the broker made no producer span of its own: the message came with its context
    assert [s.name for s in found if s.kind is SpanKind.PRODUCER] == ["send emails"]


def test_the_async_client_carries_the_context_of_a_batch_and_of_a_failure(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    app = app_tracer()
    with Broker(f"file://{tmp_path}/store", retry_delay=60.0) as broker:  # one attempt here

        async def produce() -> list[str]:
            async with connect_async(broker.url) as client:
                with app.start_as_current_span("job"):
                    items: list[Any] = [b"bad", {"payload": b"good", "attributes": {"k": "v"}}]
                    return await client.queue("jobs").enqueue_batch(items)

        bad, good = asyncio.run(produce())
        delivered: dict[str, s3q.Message] = {}

        async def handle(msg: s3q.Message) -> None:
            delivered[msg.id] = msg
            if msg.id == bad:
                raise ValueError("no")

        seen: set[type[Any]] = set()

        def retried_and_completed(event: Event) -> bool:
            seen.add(type(event))
            return {Retry, Completed} <= seen

        serve_until(Worker(f"{broker.url}/jobs", handle, poll_wait=0.05), retried_and_completed)
    found = spans.get_finished_spans()

    job, send = one(found, "job"), one(found, "send jobs")
    assert parent_id(send) == span_id(job)
    assert (send.attributes or {})["messaging.batch.message_count"] == 2
    assert parent_id(one(found, "POST /v1/queues/{name}/enqueue-batch")) == span_id(send)
    assert delivered[bad].attributes == {tracing.TRACEPARENT: traceparent_of(send)}
    assert delivered[good].attributes == {"k": "v", tracing.TRACEPARENT: traceparent_of(send)}
    processes = {
        (s.attributes or {})["messaging.message.id"]: s
        for s in found
        if s.kind is SpanKind.CONSUMER
    }
    assert {i: (p.attributes or {})["messaging.s3q.outcome"] for i, p in processes.items()} == {
        bad: "retried",
        good: "completed",
    }
    assert all(parent_id(p) == span_id(send) for p in processes.values())
    # the worker fails the message inside its span: the broker serves that call as its child
    assert parent_id(one(found, "POST /v1/queues/{name}/fail")) == span_id(processes[bad])


# --------------------------------------------------------------------------- outcomes


def test_a_sync_handler_that_fails_is_retried_then_dead_each_in_a_span(
    spans: InMemorySpanExporter,
) -> None:
    app = app_tracer()
    with s3q.open(memory_url(), **FAST_RETRY) as q:
        with app.start_as_current_span("nightly job"):  # the queue's own thread sees it
            [mid] = q.enqueue_batch([b"bad"])

        def handle(msg: s3q.Message) -> None:  # on a worker thread: the span crosses to it
            with app.start_as_current_span("charge card"):
                raise ValueError(f"boom {msg.attempts}")

        serve_until(Worker(q, handle, poll_wait=0.05), lambda event: isinstance(event, Dead))
    found = spans.get_finished_spans()

    job, send = one(found, "nightly job"), one(found, "send " + q.url.rsplit("/", 1)[1])
    assert send.kind is SpanKind.PRODUCER and parent_id(send) == span_id(job)
    assert send.attributes is not None
    assert send.attributes["messaging.batch.message_count"] == 1
    assert "messaging.message.id" not in send.attributes  # a batch names no one message
    processes = sorted(
        (s for s in found if s.kind is SpanKind.CONSUMER),
        key=lambda s: (s.attributes or {})["messaging.s3q.message.delivery_count"],
    )
    assert [(s.attributes or {})["messaging.s3q.outcome"] for s in processes] == [
        "retried",
        "dead",
    ], described(found)
    for attempt, process in enumerate(processes, 1):
        assert parent_id(process) == span_id(send)
        assert [link.context.span_id for link in process.links] == [span_id(send)]
        assert process.attributes is not None
        assert process.attributes["messaging.message.id"] == mid
        assert process.attributes["error.type"] == "ValueError"
        assert process.status.status_code is StatusCode.ERROR
        assert process.status.description == f"ValueError: boom {attempt}"
        assert [e.name for e in process.events] == ["exception"]
    charges = [s for s in found if s.name == "charge card"]
    assert sorted(parent_id(s) for s in charges) == sorted(span_id(p) for p in processes)
    assert {trace_id_of(s) for s in found} == {trace_id_of(job)}


# --------------------------------------------------------------------------- producers


def test_a_context_the_caller_gave_is_kept_and_no_span_is_made_for_it(
    spans: InMemorySpanExporter,
) -> None:
    given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with s3q.open(memory_url()) as q, app_tracer().start_as_current_span("request"):
        mid = q.enqueue(b"x", attributes={tracing.TRACEPARENT: given})
        [msg] = q.dequeue()
    assert msg.id == mid and msg.attributes == {tracing.TRACEPARENT: given}
    assert [s.name for s in spans.get_finished_spans()] == ["request"]


def test_without_a_provider_a_valid_span_s_context_is_carried_as_it_is() -> None:
    assert tracing.tracer() is None  # the API's default: no provider
    remote = trace.SpanContext(
        0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, True, trace.TraceFlags(1)
    )
    with s3q.open(memory_url()) as q:
        with trace.use_span(trace.NonRecordingSpan(remote)):
            q.enqueue(b"traced", attributes={"k": "v"})
            q.enqueue_batch([b"traced too"])
        q.enqueue(b"not traced")
        messages = q.dequeue(3)
    carried = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert [m.attributes for m in messages] == [
        {"k": "v", tracing.TRACEPARENT: carried},
        {tracing.TRACEPARENT: carried},
        {},
    ]


# --------------------------------------------------------------------------- SQS


def test_sqs_trace_header_and_traceparent_attribute_are_one_context(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    parent = "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"
    header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
    with SqsBroker(f"file://{tmp_path}/store") as broker:
        sqs = broker.client()
        url = sqs.create_queue(QueueName="jobs")["QueueUrl"]
        string = {"DataType": "String", "StringValue": parent}
        sqs.send_message(
            QueueUrl=url,
            MessageBody="by header",
            MessageSystemAttributes={
                "AWSTraceHeader": {"DataType": "String", "StringValue": header}
            },
        )
        sqs.send_message(
            QueueUrl=url, MessageBody="by attribute", MessageAttributes={"traceparent": string}
        )
        with connect(broker.url) as client:
            native = client.queue("jobs")
            delivered = native.dequeue(2)
            native.release(delivered)
            native.enqueue(b"native", attributes={tracing.TRACEPARENT: parent})
        received = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=3,
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["AWSTraceHeader"],
            VisibilityTimeout=0,  # for the worker next
        )["Messages"]
        bodies = {m["Body"]: m for m in received}
        handled: list[str] = []

        def handle(msg: s3q.Message) -> None:
            handled.append(msg.id)

        serve_until(
            Worker(f"{broker.url}/jobs", handle, poll_wait=0.05),
            lambda event: isinstance(event, Completed) and len(handled) == 3,
        )
    # s3q's workers find the context in the reserved attribute, whichever way SQS sent it
    assert [m.attributes[tracing.TRACEPARENT] for m in delivered] == [parent, parent]
    # SQS clients see it as AWSTraceHeader, as sent or made from the traceparent; the reserved
    # copies are no message attributes of theirs
    assert {b: m["Attributes"]["AWSTraceHeader"] for b, m in bodies.items()} == dict.fromkeys(
        ("by header", "by attribute", "native"), header
    )
    assert "MessageAttributes" not in bodies["by header"]
    assert bodies["by attribute"]["MessageAttributes"] == {"traceparent": string}
    assert "MessageAttributes" not in bodies["native"]
    processes = [s for s in spans.get_finished_spans() if s.kind is SpanKind.CONSUMER]
    assert len(processes) == 3
    for process in processes:
        assert process.parent is not None and process.parent.is_remote
        assert (process.parent.trace_id, process.parent.span_id) == (
            0x5759E988BD862E3FE1BE46A994272793,
            0x53995C3F42CD8AD8,
        )


# --------------------------------------------------------------------------- without OpenTelemetry


def test_without_opentelemetry_s3q_imports_none_of_it_and_works(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SUPPORT_DIR / "child_no_otel.py"), f"file://{tmp_path}/store"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    assert report["handled"] == [b.decode() for b in (b"embedded", b"remote")]
    assert report["attributes"] == [{}, {}]
    assert report["asked_for"] == [] and report["loaded"] == []


def test_a_traced_broker_adds_no_trace_to_messages_of_untraced_callers(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    """A broker with a tracer provider serves each request in a SERVER span, but a message
    whose sender sent no trace context carries none: no ``traceparent`` for native consumers,
    no ``AWSTraceHeader`` for SQS ones (an X-Ray header made from the broker's own random
    trace id would not even begin with the epoch X-Ray's format wants). A traced caller's
    context is carried as before."""
    parent = "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"
    with SqsBroker(f"file://{tmp_path}/store") as broker:
        sqs = broker.client()
        url = sqs.create_queue(QueueName="plain")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="untraced sqs")
        with connect(broker.url) as client:
            native = client.queue("plain")
            native.enqueue(b"untraced native")
            native.enqueue(b"traced", attributes={tracing.TRACEPARENT: parent})
            delivered = {m.payload: m.attributes for m in native.dequeue(3)}
        assert delivered[b"untraced sqs"] == {} and delivered[b"untraced native"] == {}
        assert delivered[b"traced"] == {tracing.TRACEPARENT: parent}
    assert any(s.kind is SpanKind.SERVER for s in spans.get_finished_spans())
