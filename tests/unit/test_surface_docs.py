"""The queue is documented once: every queue class has the surface's docstrings."""

from __future__ import annotations

import inspect
import pydoc
import re
from pathlib import Path

import pytest

import s3q
from s3q import client
from s3q.broker.forward import ForwardedQueue
from s3q.surface import NAMES, AsyncQueueSurface, documented

QUEUE_CLASSES = [
    s3q.AsyncQueue,
    s3q.Queue,
    client.AsyncRemoteQueue,
    client.RemoteQueue,
    *client.AsyncRemoteQueue.__mro__[1:-1],  # their shared base
    ForwardedQueue,
]


def test_the_surface_documents_every_method() -> None:
    assert {"enqueue", "dequeue", "complete", "fail", "discard", "close", "url"} <= set(NAMES)
    for name in NAMES:
        doc = getattr(AsyncQueueSurface, name).__doc__
        assert doc and doc.strip(), f"AsyncQueueSurface.{name} has no docstring"


@pytest.mark.parametrize("cls", QUEUE_CLASSES, ids=lambda c: c.__qualname__)
def test_each_queue_class_has_the_surfaces_docstrings(cls: type) -> None:
    for name in NAMES:
        expected = getattr(AsyncQueueSurface, name).__doc__
        assert getattr(cls, name).__doc__ == expected, f"{cls.__qualname__}.{name}"


@pytest.mark.parametrize("cls", QUEUE_CLASSES, ids=lambda c: c.__qualname__)
def test_every_public_member_of_a_queue_class_is_documented(cls: type) -> None:
    for name, member in inspect.getmembers(cls):
        if not name.startswith("_") and (callable(member) or isinstance(member, property)):
            assert member.__doc__ and member.__doc__.strip(), f"{cls.__qualname__}.{name}"


def test_help_shows_the_docstring() -> None:
    shown = pydoc.render_doc(s3q.Queue.enqueue, renderer=pydoc.plaintext)
    assert "Add a message; its id once it is durable" in shown
    assert "priority: 'int' = 0" in shown  # and the signature of the coroutine it runs
    assert "dead if out of attempts" in pydoc.render_doc(client.RemoteQueue.fail)


def test_a_docstring_of_its_own_is_refused_at_class_creation() -> None:
    class Drifted:
        @property
        def url(self) -> str:
            return ""

        async def enqueue(self) -> str:
            """Add a message, as I remember it."""
            return ""

    for name in NAMES:
        if name not in ("url", "enqueue"):
            setattr(Drifted, name, lambda self: None)
    with pytest.raises(TypeError, match=r"Drifted\.enqueue has a docstring of its own"):
        documented(Drifted)


def test_a_class_lacking_a_method_of_the_surface_is_refused() -> None:
    class Partial:
        async def enqueue(self) -> str:
            return ""

    with pytest.raises(TypeError, match="Partial lacks"):
        documented(Partial)


def test_a_method_without_a_docstring_takes_the_surfaces() -> None:
    class Bare:
        @property
        def url(self) -> str:
            return "memory://bare"

    for name in NAMES[1:]:
        setattr(Bare, name, lambda self: None)
    documented(Bare)
    assert Bare.url.__doc__ == AsyncQueueSurface.url.__doc__
    assert Bare().url == "memory://bare"
    assert Bare.purge.__doc__ == AsyncQueueSurface.purge.__doc__


def test_docs_api_tables_every_method_of_the_surface() -> None:
    """docs/api.md's table of methods has a row for each of the surface's (``configure``, the
    only way to change a served queue's settings, among them)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    table = doc.split("| method | what it does |", 1)[1].split("\n\n", 1)[0]
    rows = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    named = {name for row in rows for name in re.findall(r"`(\w+)", row)}
    assert set(NAMES) - named == set()
