"""What open refuses before touching a store, and the commit window each kind of store gets."""

from __future__ import annotations

import pytest

import s3q
from s3q.config import OBJECT_WINDOW


@pytest.mark.parametrize("url", ["ftp://host/x", "nosuchscheme://a/b", "s3://"], ids=repr)
def test_bad_urls(url) -> None:
    with pytest.raises(s3q.InvalidArgument):
        s3q.open(url)


def test_url_wrong_type() -> None:
    with pytest.raises(s3q.InvalidArgument):
        s3q.open(42)


def test_the_default_window_is_the_stores() -> None:
    from s3q.store import open_store
    from s3q.writer.engine import commit_window

    for url, expected in (
        ("memory://w", 0.0),
        ("/tmp/s3q-window-default", 0.0),
        ("s3://bucket/q?endpoint_url=http://127.0.0.1:1&allow_http=true", OBJECT_WINDOW),
    ):
        assert commit_window(open_store(url), None) == expected
        assert commit_window(open_store(url), 0.25) == 0.25
    with pytest.raises(s3q.InvalidConfig):
        s3q.open("memory://w", commit_window=-1)
    with pytest.raises(s3q.InvalidConfig):
        s3q.open("memory://w", commit_window=11)
