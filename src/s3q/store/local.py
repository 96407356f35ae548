"""A directory on the local file system: the embedded default store.

Every write is acknowledged only once it is durable, so an acknowledged write survives a
process kill and an OS crash. Create-if-absent is an atomic ``link`` of a fully written
temporary file (readers never see a part of an object); on ext4, XFS and btrfs one fsync of
the file, after the link, makes both durable (``link_syncs_with_file``), elsewhere the file is
fsynced before the link and the directory after it. On the former an OS crash may leave the
newest log object linked but not written (never acknowledged: its fsync had not returned),
which the writer's recovery removes (``s3q.snapshot``). A write that fails leaves nothing behind (no
temporary file, no object): a full disk (ENOSPC, EDQUOT) raises :class:`StoreFull`, and the
same write succeeds once space is freed. A small write (a single call's commit) blocks the
event loop for its system calls rather than paying a thread's round trip, while the disk is
quick (``Writes``); larger ones, and every read, run in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from ..errors import StoreError, StoreFull
from .base import AlreadyExists, Conflict, NotFound, Store, levels_up

_TMP = ".tmp-"
#: writes up to this size may run on the caller's thread (see ``Writes``)
INLINE_WRITE_BYTES = 64 * 1024
#: a write on the caller's thread that blocked it longer than this (a slow or busy disk) sends
#: the next ``THREADED_AFTER_SLOW`` writes to a thread, so the event loop keeps serving
SLOW_WRITE_SECONDS = 0.002
THREADED_AFTER_SLOW = 256


class LocalStore(Store):
    """Objects as files under ``root``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        super().__init__()
        self.root = Path(root).absolute()
        self._made_dirs: set[Path] = set()
        self._writes = Writes()
        #: whether a new object's link is made durable by its file's fsync (one fsync a write)
        self._link_syncs = link_syncs_with_file(self.root)

    @property
    def url(self) -> str:
        return self.root.as_uri()

    @property
    def tears(self) -> bool:
        return self._link_syncs

    def beside(self, name: str) -> LocalStore:
        folder = self.root
        for _ in range(levels_up(folder.as_posix())):
            folder = folder.parent
        return LocalStore(folder / name)

    def path(self, key: str) -> Path:
        parts = key.split("/")
        if not key or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"invalid key {key!r}")
        return self.root.joinpath(*parts)

    # -- writes ------------------------------------------------------------------------------

    async def put_new(self, key: str, data: bytes | bytearray) -> None:
        self._wrote(data)
        await self._writes.run(self._put_new, key, data)

    async def put(self, key: str, data: bytes | bytearray) -> None:
        self._wrote(data)
        await self._writes.run(self._replace, key, data)

    def _put_new(self, key: str, data: bytes | bytearray) -> None:
        path = self.path(key)
        with _os_errors(self):
            if not self._link_syncs:
                self._put_new_synced_twice(key, path, data)
                return
            tmp, fd = self._write_tmp(path, data, sync=False)
            try:
                try:
                    os.link(tmp, path)  # (readers see the object whole or not at all)
                except FileExistsError:
                    raise AlreadyExists(key) from None
                finally:
                    os.unlink(tmp)
                try:
                    os.fsync(fd)  # its bytes, and the link with them (``link_syncs_with_file``)
                except OSError:
                    os.unlink(path)  # not known to be durable: take it back, so nothing changed
                    raise
            finally:
                os.close(fd)

    def _put_new_synced_twice(self, key: str, path: Path, data: bytes | bytearray) -> None:
        """``put_new`` on a file system not known to make a link durable with its file's
        fsync: the file fsynced, linked, and its directory fsynced."""
        tmp, fd = self._write_tmp(path, data, sync=True)
        os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise AlreadyExists(key) from None
        finally:
            os.unlink(tmp)
        try:
            _fsync_dir(path.parent)
        except OSError:
            os.unlink(path)  # not known to be durable: take it back, so nothing changed
            raise

    def _replace(self, key: str, data: bytes | bytearray) -> None:
        path = self.path(key)
        with _os_errors(self):
            tmp, fd = self._write_tmp(path, data, sync=True)
            os.close(fd)
            os.replace(tmp, path)
            _fsync_dir(path.parent)

    def _write_tmp(self, path: Path, data: bytes | bytearray, sync: bool) -> tuple[Path, int]:
        """A temporary file beside ``path`` holding ``data`` (fsynced if ``sync``), and its
        descriptor, still open."""
        self._ensure_dir(path.parent)
        tmp = path.parent / f"{_TMP}{uuid.uuid4().hex}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)  # a partial file would hold on to the space that ran out
            raise
        return tmp, fd

    def _ensure_dir(self, directory: Path) -> None:
        if directory in self._made_dirs:
            return
        missing = []
        d = directory
        while not d.exists():
            missing.append(d)
            d = d.parent
        for d in reversed(missing):
            with contextlib.suppress(FileExistsError):
                d.mkdir()
            _fsync_dir(d.parent)
        self._made_dirs.add(directory)

    # -- reads -------------------------------------------------------------------------------

    async def get(self, key: str) -> bytes:
        self.counts.gets += 1
        return await asyncio.to_thread(self._read, key, 0, None)

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        self.counts.gets += 1
        return await asyncio.to_thread(self._read, key, start, end)

    async def get_tail(self, key: str, size: int) -> bytes:
        self.counts.gets += 1
        return await asyncio.to_thread(self._read, key, -size, None)

    def _read(self, key: str, start: int, end: int | None) -> bytes:
        path = self.path(key)
        with _os_errors(self):
            try:
                with open(path, "rb") as f:
                    if start < 0:  # the last -start bytes
                        f.seek(max(0, f.seek(0, os.SEEK_END) + start))
                    elif start:
                        f.seek(start)
                    return f.read() if end is None else f.read(end - start)
            except FileNotFoundError:
                raise NotFound(key) from None

    async def keys(self, prefix: str, after: str | None = None) -> list[str]:
        self.counts.lists += 1
        return await asyncio.to_thread(self._keys, prefix, after)

    def _keys(self, prefix: str, after: str | None) -> list[str]:
        keys = []
        with _os_errors(self):
            if not self.root.exists():
                return []
            for dirpath, dirs, files in os.walk(self.root):
                rel = os.path.relpath(dirpath, self.root)
                base = "" if rel == "." else rel.replace(os.sep, "/") + "/"
                # only into directories that can hold keys of the prefix: a listing of
                # checkpoint/ never reads the log's directory, however many objects it holds
                dirs[:] = [d for d in dirs if _may_hold(base + d + "/", prefix)]
                for name in files:
                    key = base + name
                    if name.startswith(_TMP) or not key.startswith(prefix):
                        continue
                    if after is None or key > after:
                        keys.append(key)
        keys.sort()
        return keys

    async def usage(self) -> tuple[int, int]:
        self.counts.lists += 1
        return await asyncio.to_thread(self._usage)

    def _usage(self) -> tuple[int, int]:
        count = size = 0
        for key in self._keys("", None):
            with contextlib.suppress(FileNotFoundError):
                size += self.path(key).stat().st_size
                count += 1
        return count, size

    async def delete(self, key: str) -> None:
        self.counts.deletes += 1
        path = self.path(key)
        with _os_errors(self), contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(os.unlink, path)

    # -- versioned (used only for small metadata; the writer lease here is an OS lock) --------

    async def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        try:
            data = await self.get(key)
        except NotFound:
            return None
        return data, _version(data)

    async def put_versioned(self, key: str, data: bytes, version: str | None) -> str:
        current = await self.get_versioned(key)
        if (current[1] if current else None) != version:
            raise Conflict(key)
        await self.put(key, data)
        return _version(data)

    # -- the writer's OS lock ------------------------------------------------------------------

    def lock(self, key: str) -> int | None:
        """Take an exclusive OS lock on ``key``'s file; its descriptor, or None if held."""
        path = self.path(key)
        with _os_errors(self):
            self._ensure_dir(path.parent)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return None
            return fd


class Writes:
    """Where a local store's blocking writes run. A small one (a single call's commit) runs on
    the caller's thread, blocking the event loop for its system calls: handing it to a thread
    and back costs more CPU than they do (a single call's commit took 25-30 % less CPU and time
    so). A large one runs in a thread, and so do small ones for a while after one blocked the
    caller longer than ``SLOW_WRITE_SECONDS`` (a slow or busy disk, when the loop has other
    callers, other queues, to serve meanwhile)."""

    def __init__(self) -> None:
        self.threaded = 0  # small writes left to send to a thread

    async def run(
        self, write: Callable[[str, bytes | bytearray], None], key: str, data: bytes | bytearray
    ) -> None:
        if len(data) > INLINE_WRITE_BYTES or self.threaded:
            self.threaded = max(0, self.threaded - 1)
            await asyncio.to_thread(write, key, data)
            return
        started = time.perf_counter()
        try:
            write(key, data)
        finally:
            if time.perf_counter() - started > SLOW_WRITE_SECONDS:
                self.threaded = THREADED_AFTER_SLOW


def _may_hold(directory: str, prefix: str) -> bool:
    """Whether keys under ``directory`` (a key prefix ending in "/") may begin with ``prefix``."""
    return directory.startswith(prefix) or prefix.startswith(directory)


def _version(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


#: file systems whose fsync of a file also makes durable the links made to it before: their
#: journal (ext4's jbd2, XFS's log) or log tree (btrfs) commits the directory entry with the
#: inode (ext4 in its default data=ordered mode)
LINK_SYNCS = frozenset({"ext4", "xfs", "btrfs"})


def link_syncs_with_file(path: Path, mounts: str = "/proc/self/mounts") -> bool:
    """Whether ``path`` lies on a file system of LINK_SYNCS (the longest mount point that
    holds it, from ``mounts``); False where that cannot be told (not Linux): every object is
    then fsynced with its directory too."""
    try:
        lines = Path(mounts).read_text().splitlines()
    except OSError:
        return False
    best, kind = "", ""
    where = path.as_posix()
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = where == point or where.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind in LINK_SYNCS


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _os_errors(store: LocalStore):  # type: ignore[no-untyped-def]
    try:
        yield
    except OSError as exc:
        if isinstance(exc, FileNotFoundError | FileExistsError | BlockingIOError):
            raise
        store.counts.errors += 1
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StoreFull(
                f"no space left for local store {store.root} (nothing was written; the same "
                f"call succeeds once space is freed): {exc}"
            ) from exc
        what = "access denied" if exc.errno == errno.EACCES else "I/O error"
        raise StoreError(f"{what} on local store {store.root}: {exc}") from exc
