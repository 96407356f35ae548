"""The worker's API without a running worker: loading handlers, refused arguments, metrics
registries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from worker_harness import memory_url

import s3q
from s3q.worker import (
    HandlerImportError,
    HandlerNotCallable,
    HandlerNotFound,
    InvalidHandlerPath,
    Worker,
    handler_options,
    load_handler,
    run_worker,
)
from s3q.worker.metrics import WorkerMetrics


def test_each_worker_metrics_has_its_own_registry() -> None:
    a, b = WorkerMetrics(), WorkerMetrics()
    a.completed.inc()
    assert a.registry is not b.registry
    assert (
        b.registry.get_sample_value("s3q_worker_messages_handled_total", {"outcome": "completed"})
        == 0
    )


def test_handler_decorator_records_options() -> None:
    fn = load_handler("worker_handlers:emails")
    options = handler_options(fn)
    assert options is not None
    assert (options.queue, options.concurrency, dict(options.options)) == (
        "emails",
        4,
        {"max_attempts": 5},
    )
    assert handler_options(load_handler("worker_handlers:plain")) is None
    assert load_handler("worker_handlers:Handlers.upper")(s3q.Message("i", b"x")) == b"X"
    with pytest.raises(s3q.InvalidConfig):
        s3q.worker.handler("q", no_such_option=1)
    with pytest.raises(s3q.InvalidArgument, match="concurrency"):
        s3q.worker.handler("q", concurrency=0)


@pytest.mark.parametrize(
    ("target", "error", "text"),
    [
        ("worker_handlers", InvalidHandlerPath, "must look like 'package.module:function'"),
        ("worker_handlers:", InvalidHandlerPath, "must look like"),
        ("a b:c", InvalidHandlerPath, "must look like"),
        ("no_such_module_s3q:f", HandlerImportError, "no module named 'no_such_module_s3q'"),
        ("worker_handlers:missing", HandlerNotFound, "has no attribute 'missing'"),
        ("worker_handlers:not_callable", HandlerNotCallable, "is a int, not a callable"),
    ],
)
def test_bad_handler_paths_give_precise_errors(
    target: str, error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=text) as info:
        load_handler(target)
    assert isinstance(info.value, s3q.InvalidArgument)
    assert "\n" not in str(info.value)


def test_handler_module_that_fails_to_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_handlers_s3q.py").write_text("raise RuntimeError('bad config\\nline 2')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(HandlerImportError) as info:
        load_handler("broken_handlers_s3q:fn")
    assert str(info.value) == "importing 'broken_handlers_s3q' failed: RuntimeError: bad config"


def test_run_worker_needs_a_queue() -> None:
    with pytest.raises(s3q.InvalidArgument, match="names no queue"):
        run_worker("worker_handlers:plain")
    with pytest.raises(InvalidHandlerPath):
        run_worker("nonsense", queue_url=memory_url())


def test_bad_worker_arguments() -> None:
    async def handle(msg: s3q.Message) -> None:
        return None

    with s3q.open(memory_url()) as q:
        cases: list[tuple[dict[str, Any], str]] = [
            ({"concurrency": 0}, "concurrency"),
            ({"prefetch": 0}, "prefetch"),
            ({"visibility_timeout": 0}, "visibility_timeout"),
            ({"ack_interval": -1}, "ack_interval"),
            ({"grace": float("inf")}, "grace"),
            ({"options": {"max_attempts": 2}}, "options apply only"),
        ]
        for kwargs, text in cases:
            with pytest.raises(s3q.InvalidArgument, match=text):
                Worker(q, handle, **kwargs)
        with pytest.raises(s3q.InvalidArgument, match="await serve"):
            Worker(q._aq, handle).run()
    with pytest.raises(s3q.InvalidArgument, match="handler must be callable"):
        Worker("memory://x", 42)  # type: ignore[arg-type]
    with pytest.raises(s3q.InvalidConfig):
        Worker("memory://x", handle, options={"bogus": 1})


def test_the_worker_is_importable_from_the_top_level() -> None:
    """``s3q.Worker`` and ``s3q.handler`` are the worker module's, imported on first use."""
    import s3q.worker

    assert s3q.Worker is s3q.worker.Worker and s3q.handler is s3q.worker.handler
    with pytest.raises(AttributeError, match="no attribute 'Workers'"):
        s3q.Workers  # noqa: B018
