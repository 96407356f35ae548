"""S3 and every S3-compatible store, GCS, Azure and memory, through obstore."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import obstore
from obstore.exceptions import (
    AlreadyExistsError,
    NotFoundError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)

from ..errors import StoreError
from .base import AlreadyExists, Conflict, NotFound, Store

#: Bounded retries: a store that stays down surfaces as StoreError within seconds, not minutes.
RETRY = {"max_retries": 4, "retry_timeout": timedelta(seconds=20)}
CLIENT = {"connect_timeout": "5s", "timeout": "60s"}


class ObjectStore(Store):
    """Adapter over an ``obstore`` store object."""

    def __init__(self, inner: Any, url: str) -> None:
        super().__init__()
        self.inner = inner
        self._url = url

    @property
    def url(self) -> str:
        return self._url

    async def put_new(self, key: str, data: bytes | bytearray) -> None:
        self._wrote(data)
        async with self._errors(key, read=False):
            try:
                await obstore.put_async(self.inner, key, data, mode="create")
            except AlreadyExistsError:
                raise AlreadyExists(key) from None
            except PreconditionError:  # some servers answer 412 rather than 409
                raise AlreadyExists(key) from None

    async def put(self, key: str, data: bytes | bytearray) -> None:
        self._wrote(data)
        async with self._errors(key, read=False):
            await obstore.put_async(self.inner, key, data)

    async def get(self, key: str) -> bytes:
        self.gets += 1
        async with self._errors(key):
            result = await obstore.get_async(self.inner, key)
            return bytes(await result.bytes_async())

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        self.gets += 1
        if end <= start:
            return b""
        async with self._errors(key):
            return bytes(await obstore.get_range_async(self.inner, key, start=start, end=end))

    async def keys(self, prefix: str, after: str | None = None) -> list[str]:
        keys: list[str] = []
        async with self._errors(prefix):
            stream = obstore.list(self.inner, prefix=prefix or None, offset=after)
            async for chunk in stream:
                self.lists += 1
                keys.extend(meta["path"] for meta in chunk)
        keys.sort()
        return keys

    async def usage(self) -> tuple[int, int]:
        count = size = 0
        async with self._errors(""):
            async for chunk in obstore.list(self.inner):
                self.lists += 1
                count += len(chunk)
                size += sum(meta["size"] for meta in chunk)
        return count, size

    async def delete(self, key: str) -> None:
        self.deletes += 1
        async with self._errors(key):
            with contextlib.suppress(NotFound):
                await obstore.delete_async(self.inner, key)

    async def close(self) -> None:
        # obstore hands each result back to Python from a tokio thread, which lets go of its
        # Python references a moment after the awaiting coroutine resumed. A process that
        # exits in that moment aborts (SIGABRT in interpreter finalisation); a short pause
        # at close lets those threads finish.
        await asyncio.sleep(0.02)

    async def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        self.gets += 1
        try:
            async with self._errors(key):
                result = await obstore.get_async(self.inner, key)
                data = bytes(await result.bytes_async())
        except NotFound:
            return None
        etag = result.meta["e_tag"]
        if etag is None:
            raise StoreError(f"{self._url} returned no ETag for {key}: cannot compare-and-swap")
        return data, etag

    async def put_versioned(self, key: str, data: bytes, version: str | None) -> str:
        self._wrote(data)
        mode: Any = "create" if version is None else {"e_tag": version}
        async with self._errors(key, read=False):
            try:
                result = await obstore.put_async(self.inner, key, data, mode=mode)
            except (AlreadyExistsError, PreconditionError):
                raise Conflict(key) from None
        etag = result["e_tag"]
        if etag is None:
            raise StoreError(f"{self._url} returned no ETag for {key}: cannot compare-and-swap")
        return str(etag)

    @contextlib.asynccontextmanager
    async def _errors(self, key: str, read: bool = True) -> AsyncIterator[None]:
        try:
            yield
        except (AlreadyExists, Conflict, NotFound, StoreError):
            raise
        except (NotFoundError, FileNotFoundError) as exc:
            if read:
                raise NotFound(key) from None
            self.errors += 1
            raise StoreError(
                f"{self._url} answered 'not found' to a write of {key}: does the bucket exist? "
                f"({_first_line(exc)})"
            ) from exc
        except Exception as exc:
            self.errors += 1
            if isinstance(exc, PermissionDeniedError | UnauthenticatedError) or any(
                sign in str(exc) for sign in _DENIED
            ):
                raise StoreError(
                    f"access denied by {self._url} for {key}: check the credentials "
                    f"({_first_line(exc)})"
                ) from exc
            raise StoreError(f"store {self._url} failed on {key}: {_first_line(exc)}") from exc


_DENIED = (
    "403 Forbidden",
    "401 Unauthorized",
    "AccessDenied",
    "SignatureDoesNotMatch",
    "InvalidAccessKeyId",
)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
