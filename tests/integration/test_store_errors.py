"""Failed store requests are StoreErrors and counted; transient ones are retried."""

from __future__ import annotations

from pathlib import Path

import pytest

import s3q


def test_failed_store_requests_are_counted(tmp_path: Path) -> None:
    """A store that cannot be reached, or a directory that is a file: each failed request is a
    StoreError and counts in ``errors`` (``stats().store_errors``, the broker's metrics). A
    refused connection is transient: sent again until the store's patience runs out, each
    attempt counted, each repeat a retry; a local I/O error is not tried again."""
    import asyncio

    from conftest import free_port

    from s3q.store import RetryingStore, TransientError, open_store

    async def main() -> None:
        dead = open_store(
            f"s3://bucket/q?endpoint_url=http://127.0.0.1:{free_port()}&allow_http=true"
            "&access_key_id=a&secret_access_key=b&region=us-east-1"
        )
        assert isinstance(dead, RetryingStore)
        impatient = RetryingStore(dead.inner, patience=0.5)
        assert impatient.counts.errors == 0
        with pytest.raises(TransientError):
            await impatient.get("log/x")
        assert impatient.counts.errors >= 2
        assert impatient.counts.retries == impatient.counts.errors - 1
        await dead.close()
        (tmp_path / "not-a-dir").write_bytes(b"")
        local = open_store(str(tmp_path / "not-a-dir"))
        with pytest.raises(s3q.StoreError):
            await local.put("log/x", b"data")
        assert local.counts.errors == 1
        assert local.counts.retries == 0

    asyncio.run(main())
    with s3q.open(str(tmp_path / "fine")) as q:
        q.enqueue(b"x")
        assert q.stats().store_errors == 0
