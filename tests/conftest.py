"""Shared fixtures for the s3q test suite.

Everything here talks to real parts: a real directory, the in-process memory store, and a
real moto S3 server over HTTP on 127.0.0.1 (started once per session).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
SRC_DIR = REPO_ROOT / "src"

T0 = 1_700_000_000.0  # start of every FakeClock unless told otherwise

LEASE_FILES = ("writer.lease", "writer.lock")


# --------------------------------------------------------------------------- clock


class FakeClock:
    """A zero-argument callable returning unix seconds; only moves when told to."""

    def __init__(self, start: float = T0) -> None:
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        assert seconds >= 0
        self.now += float(seconds)
        return self.now

    def set(self, when: float) -> None:
        assert when >= self.now, "time must not go backwards"
        self.now = float(when)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


# --------------------------------------------------------------------------- helpers


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC_DIR), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def state_of(stats: Any) -> dict[str, Any]:
    """The fields of QueueStats that describe queue contents and history."""
    return {
        name: getattr(stats, name)
        for name in (
            "pending",
            "delayed",
            "processing",
            "retry",
            "completed",
            "dead",
            "total_enqueued",
            "commits",
        )
    }


def drain(q: Any, visibility_timeout: float | None = None) -> list[Any]:
    """Dequeue everything currently deliverable (leases them all)."""
    out: list[Any] = []
    while True:
        batch = q.dequeue(max_messages=1000, visibility_timeout=visibility_timeout)
        if not batch:
            return out
        out.extend(batch)


# --------------------------------------------------------------------------- moto


class MotoServer:
    def __init__(self, proc: subprocess.Popen[bytes], port: int) -> None:
        self.proc = proc
        self.port = port
        self.endpoint = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)

    def client(self) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
        )

    def store_options(self) -> dict[str, Any]:
        return {
            "endpoint_url": self.endpoint,
            "region": "us-east-1",
            "access_key_id": "testing",
            "secret_access_key": "testing",
            "allow_http": True,
        }


def start_moto(env: dict[str, str] | None = None) -> MotoServer:
    """A moto S3 server on a free loopback port, answering HTTP; ``server.stop()`` ends it."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    server = MotoServer(proc, port)
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"moto server exited early with {proc.returncode}")
        try:
            with urllib.request.urlopen(server.endpoint + "/moto-api/", timeout=1):
                return server
        except OSError:
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError("moto server did not answer within 60 s") from None
            time.sleep(0.05)  # polling a process we do not control; no event to await


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    server = start_moto()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_bucket(moto_server: MotoServer) -> str:
    name = "s3q-tests-" + uuid.uuid4().hex[:8]
    moto_server.client().create_bucket(Bucket=name)
    return name


# --------------------------------------------------------------------------- store envs


class StoreEnv:
    """One queue location on one kind of store, plus raw access to its objects."""

    kind: str
    url: str

    def __init__(self) -> None:
        self.options: dict[str, Any] = {}
        self.opened: list[Any] = []

    # -- opening ---------------------------------------------------------------
    def open(self, **kw: Any) -> Any:
        import s3q

        q = s3q.open(self.url, **{**self.options, **kw})
        self.opened.append(q)
        return q

    def close_all(self) -> None:
        """Close every queue this env opened (a failed test may have left some open)."""
        for q in self.opened:
            with contextlib.suppress(Exception):
                q.close()
        self.opened.clear()

    async def open_async(self, **kw: Any) -> Any:
        import s3q

        return await s3q.open_async(self.url, **{**self.options, **kw})

    @property
    def raw(self) -> bool:
        return False

    # -- raw access (file and s3 only) -------------------------------------------
    def keys(self) -> list[str]:
        raise NotImplementedError

    def read(self, key: str) -> bytes:
        raise NotImplementedError

    def put_if_absent(self, key: str, data: bytes) -> bool:
        raise NotImplementedError

    def sibling(self) -> StoreEnv:
        """A fresh, empty location on the same store."""
        raise NotImplementedError

    def log_keys(self) -> list[str]:
        return sorted(k for k in self.keys() if k.startswith("log/"))

    def log_seqs(self) -> list[int]:
        out = []
        for k in self.log_keys():
            tail = k[len("log/") :]
            if len(tail) == 20 and tail.isdigit():
                out.append(int(tail))
        return sorted(out)

    def copy_to(self, other: StoreEnv, exclude: tuple[str, ...] = LEASE_FILES) -> None:
        for k in self.keys():
            if k in exclude:
                continue
            assert other.put_if_absent(k, self.read(k))

    def __repr__(self) -> str:
        return f"<{self.kind} {self.url}>"


class MemoryEnv(StoreEnv):
    kind = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.url = "memory://t-" + uuid.uuid4().hex

    def sibling(self) -> StoreEnv:
        return MemoryEnv()


class FileEnv(StoreEnv):
    kind = "file"

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root
        self.path = root / ("q-" + uuid.uuid4().hex[:10])
        self.url = "file://" + str(self.path)

    @property
    def raw(self) -> bool:
        return True

    def keys(self) -> list[str]:
        if not self.path.exists():
            return []
        out = []
        for dirpath, _dirs, files in os.walk(self.path):
            for f in files:
                full = Path(dirpath) / f
                out.append(full.relative_to(self.path).as_posix())
        return sorted(out)

    def read(self, key: str) -> bytes:
        return (self.path / key).read_bytes()

    def put_if_absent(self, key: str, data: bytes) -> bool:
        target = self.path / key
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        return True

    def sibling(self) -> StoreEnv:
        return FileEnv(self.root)


class S3Env(StoreEnv):
    kind = "s3"

    def __init__(self, server: MotoServer, bucket: str) -> None:
        super().__init__()
        self.server = server
        self.bucket = bucket
        self.prefix = "q-" + uuid.uuid4().hex[:12]
        self.url = f"s3://{bucket}/{self.prefix}"
        self.options = server.store_options()
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self.server.client()
        return self._client

    @property
    def raw(self) -> bool:
        return True

    def keys(self) -> list[str]:
        out: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + "/"):
            for obj in page.get("Contents", []):
                out.append(obj["Key"][len(self.prefix) + 1 :])
        return sorted(out)

    def read(self, key: str) -> bytes:
        resp = self.client.get_object(Bucket=self.bucket, Key=f"{self.prefix}/{key}")
        return bytes(resp["Body"].read())

    def put_if_absent(self, key: str, data: bytes) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.put_object(
                Bucket=self.bucket, Key=f"{self.prefix}/{key}", Body=data, IfNoneMatch="*"
            )
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code")
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                return False
            raise
        return True

    def sibling(self) -> StoreEnv:
        return S3Env(self.server, self.bucket)


def make_env(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> StoreEnv:
    if kind == "memory":
        return MemoryEnv()
    if kind == "file":
        return FileEnv(tmp_path)
    if kind == "s3":
        server = request.getfixturevalue("moto_server")
        bucket = request.getfixturevalue("s3_bucket")
        return S3Env(server, bucket)
    raise AssertionError(kind)


@pytest.fixture(params=["memory", "file", "s3"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreEnv]:
    """A fresh queue location, parametrised over every store."""
    e = make_env(request.param, request, tmp_path)
    yield e
    e.close_all()


@pytest.fixture(params=["file", "s3"])
def durable_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreEnv]:
    """A fresh queue location on a store that outlives the process."""
    e = make_env(request.param, request, tmp_path)
    yield e
    e.close_all()


@pytest.fixture(params=["file", "s3"])
def raw_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreEnv]:
    """A fresh queue location whose objects the test can read and write directly."""
    e = make_env(request.param, request, tmp_path)
    yield e
    e.close_all()


@pytest.fixture
def make_queue(env: StoreEnv, clock: FakeClock) -> Iterator[Any]:
    """open(**options) on the parametrised store with the fake clock; closes at teardown."""
    opened: list[Any] = []

    def _open(**kw: Any) -> Any:
        kw.setdefault("clock", clock)
        q = env.open(**kw)
        opened.append(q)
        return q

    yield _open
    for q in opened:
        with contextlib.suppress(Exception):
            q.close()


def rmtree_quiet(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


# --------------------------------------------------------------------------- child processes


def spawn_child(script: str, env: StoreEnv, *args: str, **options: Any) -> subprocess.Popen[str]:
    """Start tests/<script> URL OPTIONS_JSON *args on the queue of ``env``; options must be
    JSON-serialisable."""
    import json

    return subprocess.Popen(
        [
            sys.executable,
            str(TESTS_DIR / script),
            env.url,
            json.dumps({**env.options, **options}),
            *args,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )


class LineReader:
    """Reads a child's stdout lines on a thread so the test can wait with a deadline."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        import queue as _queue

        self.proc = proc
        self.lines: _queue.Queue[str | None] = _queue.Queue()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def next(self, timeout: float = 60.0) -> str:
        import queue as _queue

        try:
            line = self.lines.get(timeout=timeout)
        except _queue.Empty:
            raise AssertionError(f"child printed nothing for {timeout} s") from None
        if line is None:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"child exited ({self.proc.wait()}) early:\n{err}")
        return line

    def rest(self, timeout: float = 60.0) -> list[str]:
        """Every line still to come, up to end of output (call after the child died)."""
        out = []
        while True:
            line = self.lines.get(timeout=timeout)
            if line is None:
                return out
            out.append(line)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: takes more than a few seconds (runs by default; -m 'not slow' skips it)"
    )


def open_after_crash(env: StoreEnv, **kw: Any) -> tuple[Any, FakeClock]:
    """Open a queue whose writer died without closing it.

    A local directory's flock dies with its process. An object store lease stays until it lapses:
    rather than sleeping, open with a fake clock set just past the lease the error reports.
    """
    import s3q

    clock = FakeClock(time.time() + 1)
    try:
        return env.open(clock=clock, **kw), clock
    except s3q.QueueLocked as exc:
        assert env.kind != "file", "a dead process still holds the file lock"
        assert exc.expires_at is not None, exc
        clock = FakeClock(max(time.time(), exc.expires_at) + 1)
        return env.open(clock=clock, **kw), clock
