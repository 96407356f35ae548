"""S3 and every S3-compatible store, GCS, Azure and memory, through obstore."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import obstore
from obstore.exceptions import (
    AlreadyExistsError,
    InvalidPathError,
    NotFoundError,
    NotSupportedError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
    UnknownConfigurationKeyError,
)
from obstore.store import AzureStore, MemoryStore

from ..errors import StoreError
from .base import AlreadyExists, Conflict, NotFound, Store, TransientError

if TYPE_CHECKING:
    from obstore import OffsetRange, SuffixRange

#: obstore sends each request once: :mod:`s3q.store.retry` tries again, the same way on
#: every store, recognising a write whose first attempt applied.
RETRY = {"max_retries": 0, "retry_timeout": timedelta(seconds=1)}

#: Seconds one request may take before it counts as hung (a transient fault, tried again).
DEFAULT_TIMEOUT = 5.0


def client_options(timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
    """obstore's HTTP client settings for a request timeout of ``timeout`` seconds."""
    millis = max(1, round(timeout * 1000))
    return {"connect_timeout": f"{min(millis, 5000)}ms", "timeout": f"{millis}ms"}


class _Calls:
    """obstore's calls as the adapter makes them: awaited, run on obstore's own threads (a store
    across a network)."""

    async def put(self, inner: Any, key: str, data: bytes | bytearray, mode: Any = None) -> Any:
        return await obstore.put_async(inner, key, data, mode=mode)

    async def get(self, inner: Any, key: str) -> tuple[bytes, Any]:
        result = await obstore.get_async(inner, key)
        return bytes(await result.bytes_async()), result.meta

    async def get_range(self, inner: Any, key: str, start: int, end: int) -> bytes:
        return bytes(await obstore.get_range_async(inner, key, start=start, end=end))

    async def delete(self, inner: Any, key: str) -> None:
        await obstore.delete_async(inner, key)


class _InlineCalls(_Calls):
    """The same calls made on the caller's thread, for a store whose calls never wait (obstore's
    MemoryStore): there the hand-off to a thread of obstore's and back costs a hundred times
    the call (about 110 µs of CPU against 2 for a put, 220 against 2 for a get)."""

    async def put(self, inner: Any, key: str, data: bytes | bytearray, mode: Any = None) -> Any:
        return obstore.put(inner, key, data, mode=mode)

    async def get(self, inner: Any, key: str) -> tuple[bytes, Any]:
        result = obstore.get(inner, key)
        return bytes(result.bytes()), result.meta

    async def get_range(self, inner: Any, key: str, start: int, end: int) -> bytes:
        return bytes(obstore.get_range(inner, key, start=start, end=end))

    async def delete(self, inner: Any, key: str) -> None:
        obstore.delete(inner, key)


class ObjectStore(Store):
    """Adapter over an ``obstore`` store object."""

    def __init__(self, inner: Any, url: str, reopen: Callable[[str], Store] | None = None) -> None:
        super().__init__()
        self.inner = inner
        self._calls = _InlineCalls() if isinstance(inner, MemoryStore) else _Calls()
        self._url = url
        self._reopen = reopen  # the store ``name`` beside this one, with the same options

    @property
    def url(self) -> str:
        return self._url

    def beside(self, name: str) -> Store:
        if self._reopen is None:
            return super().beside(name)
        return self._reopen(name)

    async def put_new(self, key: str, data: bytes | bytearray) -> None:
        self._wrote(data)
        async with self._errors(key, read=False):
            try:
                await self._calls.put(self.inner, key, data, mode="create")
            except AlreadyExistsError:
                raise AlreadyExists(key) from None
            except PreconditionError:  # some servers answer 412 rather than 409
                raise AlreadyExists(key) from None

    async def put(self, key: str, data: bytes | bytearray) -> None:
        self._wrote(data)
        async with self._errors(key, read=False):
            await self._calls.put(self.inner, key, data)

    async def get(self, key: str) -> bytes:
        self.counts.gets += 1
        async with self._errors(key):
            return (await self._calls.get(self.inner, key))[0]

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        self.counts.gets += 1
        if end <= start:
            return b""
        async with self._errors(key):
            data = await self._calls.get_range(self.inner, key, start, end)
        if len(data) < end - start:  # a body cut short, or an object shorter than asked for
            self.counts.errors += 1
            raise TransientError(
                f"store {self._url} returned {len(data)} of {end - start} bytes of {key}"
            )
        return data

    async def get_tail(self, key: str, size: int) -> bytes:
        self.counts.gets += 1
        async with self._errors(key):
            if isinstance(self.inner, AzureStore):  # Azure serves no suffix ranges (bytes=-N)
                self.counts.gets += 1
                whole = (await obstore.head_async(self.inner, key))["size"]
                if not whole:
                    return b""
                tail: OffsetRange | SuffixRange = {"offset": max(0, whole - size)}
            else:
                tail = {"suffix": size}
            result = await obstore.get_async(self.inner, key, options={"range": tail})
            data = bytes(await result.bytes_async())
            whole = result.meta["size"]
        if len(data) < min(size, whole):  # a body cut short
            self.counts.errors += 1
            raise TransientError(
                f"store {self._url} returned {len(data)} of the last {size} bytes of {key}"
            )
        return data

    async def keys(self, prefix: str, after: str | None = None) -> list[str]:
        keys: list[str] = []
        async with self._errors(prefix):
            stream = obstore.list(self.inner, prefix=prefix or None, offset=after)
            async for chunk in stream:
                self.counts.lists += 1
                keys.extend(meta["path"] for meta in chunk)
        keys.sort()
        return keys

    async def usage(self) -> tuple[int, int]:
        count = size = 0
        async with self._errors(""):
            async for chunk in obstore.list(self.inner):
                self.counts.lists += 1
                count += len(chunk)
                size += sum(meta["size"] for meta in chunk)
        return count, size

    async def delete(self, key: str) -> None:
        self.counts.deletes += 1
        async with self._errors(key):
            with contextlib.suppress(NotFound):
                await self._calls.delete(self.inner, key)

    async def close(self) -> None:
        # obstore hands each result back to Python from a tokio thread, which lets go of its
        # Python references a moment after the awaiting coroutine resumed. A process that
        # exits in that moment aborts (SIGABRT in interpreter finalisation); a short pause
        # at close lets those threads finish.
        await asyncio.sleep(0.02)

    async def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        self.counts.gets += 1
        try:
            async with self._errors(key):
                data, meta = await self._calls.get(self.inner, key)
        except NotFound:
            return None
        etag = meta["e_tag"]
        if etag is None:
            raise StoreError(f"{self._url} returned no ETag for {key}: cannot compare-and-swap")
        return data, etag

    async def put_versioned(self, key: str, data: bytes, version: str | None) -> str:
        self._wrote(data)
        mode: Any = "create" if version is None else {"e_tag": version}
        async with self._errors(key, read=False):
            try:
                result = await self._calls.put(self.inner, key, data, mode=mode)
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
            self.counts.errors += 1
            raise StoreError(
                f"{self._url} answered 'not found' to a write of {key}: does the bucket exist? "
                f"({_first_line(exc)})"
            ) from exc
        except Exception as exc:
            self.counts.errors += 1
            if isinstance(exc, PermissionDeniedError | UnauthenticatedError) or any(
                sign in str(exc) for sign in _DENIED
            ):
                raise StoreError(
                    f"access denied by {self._url} for {key}: check the credentials "
                    f"({_first_line(exc)})"
                ) from exc
            text = f"store {self._url} failed on {key}: {_first_line(exc)}"
            if _permanent(exc):
                raise StoreError(text) from exc
            raise TransientError(text) from exc


_DENIED = (
    "403 Forbidden",
    "401 Unauthorized",
    "AccessDenied",
    "SignatureDoesNotMatch",
    "InvalidAccessKeyId",
)


def _permanent(exc: Exception) -> bool:
    """Whether trying again cannot help: a bad key or setting, or a 4xx answer other than
    408 (timeout) and 429 (slow down). Everything else (5xx, resets, timeouts, bodies cut
    short) is transient."""
    if isinstance(exc, InvalidPathError | NotSupportedError | UnknownConfigurationKeyError):
        return True
    match = _STATUS.search(str(exc))
    return match is not None and match.group(1).startswith("4") and match.group(1) not in _RETRY_4XX


_STATUS = re.compile(r"\b([45]\d\d) [A-Z][A-Za-z ]+")
_RETRY_4XX = ("408", "429")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
