"""Shared fixtures for the s3q test suite.

Everything here talks to real parts: a real directory, the in-process memory store, a real
moto S3 server over HTTP on 127.0.0.1 (started once per session), and, for the tests that ask
for it, Azurite (Microsoft's Azure Blob Storage emulator, from npm) on 127.0.0.1.
"""

from __future__ import annotations

import base64
import contextlib
import email.utils
import fcntl
import hashlib
import hmac
import json
import os
import queue
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
#: helpers the tests import (on sys.path by pyproject.toml's ``pythonpath``), the child scripts
#: the tests run, the fixtures' data and the JavaScript packages
SUPPORT_DIR = TESTS_DIR / "support"
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


# --------------------------------------------------------------------------- parked long polls


class Parked:
    """How many long polls (``dequeue(wait=...)``) are parked, waiting for a change, in the
    writers of this process (an embedded queue's, or an in-process broker's): what a test
    waits for before it makes the change that must wake them, instead of sleeping. ``woken``
    counts the waits a change ended (not their timeout: a poll of the queue would end each by
    its timer)."""

    def __init__(self) -> None:
        self.now = 0
        self.woken = 0
        self._cond = threading.Condition()
        self._watchers: list[tuple[Any, Any]] = []  # (loop, asyncio.Event) of async waiters

    def _moved(self, by: int, woken: bool = False) -> None:
        with self._cond:
            self.now += by
            self.woken += woken
            self._cond.notify_all()
            for loop, event in self._watchers:
                loop.call_soon_threadsafe(event.set)

    @contextlib.contextmanager
    def change(self) -> Iterator[Change]:
        """Around the change that must wake the parked polls: what :meth:`Change.woke` checks
        a poll's answer against."""
        change = Change(self, self.woken)
        yield change
        change.at = time.monotonic()

    def wait(self, count: int = 1, timeout: float = 30.0) -> None:
        """Block until ``count`` long polls are parked (from a thread that is not the loop's)."""
        with self._cond:
            assert self._cond.wait_for(lambda: self.now >= count, timeout), (
                f"{self.now} long polls parked after {timeout} s, not {count}"
            )

    async def wait_async(self, count: int = 1, timeout: float = 30.0) -> None:
        """The same, from a coroutine on the loop the long polls run on."""
        import asyncio

        event = asyncio.Event()
        watcher = (asyncio.get_running_loop(), event)
        self._watchers.append(watcher)
        try:
            async with asyncio.timeout(timeout):
                while self.now < count:
                    event.clear()
                    await event.wait()
        finally:
            self._watchers.remove(watcher)


#: How soon after the change that wakes it a parked long poll answers: its lease's commit, with
#: room for a busy machine, and well inside any polling interval a fallback might use.
WAKE_WITHIN = 0.5


def woke(returned: float, changed: float) -> bool:
    """Whether a long poll that ``returned`` (``time.monotonic()``) answered within
    ``WAKE_WITHIN`` of the change made at ``changed``: woken by it, not by a timer or a poll."""
    assert returned - changed < WAKE_WITHIN, f"woken {returned - changed:.3f} s after the change"
    return True


class Change:
    """A change made to wake parked long polls (:meth:`Parked.change`): when it was made, and
    how many waits a change had ended before it."""

    def __init__(self, parked: Parked, woken_before: int) -> None:
        self.parked, self.woken_before = parked, woken_before
        self.at = float("inf")  # set once made

    def woke(self, returned: float) -> bool:
        """Whether a long poll that ``returned`` (``time.monotonic()``) was woken by this
        change: a parked wait ended by a change since it began, not by its timer (as a poll
        of the queue every so often would, however often), and it answered within
        ``WAKE_WITHIN`` of it."""
        assert self.parked.woken > self.woken_before, "no parked wait was ended by the change"
        return woke(returned, self.at)


@pytest.fixture
def parked(monkeypatch: pytest.MonkeyPatch) -> Parked:
    """Counts the long polls parked in any writer of this process (see :class:`Parked`)."""
    import asyncio

    from s3q.writer.core import Core

    counter = Parked()
    original = Core.wait_change  # where a long poll with nothing to deliver waits

    async def wait_change(self: Any, timeout: float) -> None:
        if self._changed is None:  # made here as the original makes it, to see what ends it
            self._changed = asyncio.get_running_loop().create_future()
        changed = self._changed  # done by Core.notify: a change
        counter._moved(+1)
        try:
            await original(self, timeout)
        finally:
            counter._moved(-1, woken=changed.done())

    monkeypatch.setattr(Core, "wait_change", wait_change)
    return counter


# --------------------------------------------------------------------------- helpers


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(SRC_DIR), str(SUPPORT_DIR), env.get("PYTHONPATH", "")) if p
    )
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
    for _attempt in range(3):  # another process (an xdist worker) may take the port first
        server = _start_moto_on(free_port(), env)
        if server is not None:
            return server
    raise RuntimeError("moto server exited early three times")


def _start_moto_on(port: int, env: dict[str, str] | None) -> MotoServer | None:
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
            return None  # most likely the port was taken
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


# --------------------------------------------------------------------------- node, npm


JS_DIR = SUPPORT_DIR / "js"


@pytest.fixture(scope="session")
def node() -> str:
    """Node, with tests/support/js's packages (the AWS SDK for JavaScript v3, Azurite) installed
    from tests/support/js/package-lock.json by ``npm ci`` once, when one of them is missing."""
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm, "Node.js and npm are needed (.ci/run installs them)"
    wanted = json.loads((JS_DIR / "package.json").read_text())["dependencies"]
    # pytest-xdist's workers each ask: one installs while the others wait on the lock
    with open(JS_DIR / ".npm-ci.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not all((JS_DIR / "node_modules" / name / "package.json").is_file() for name in wanted):
            run = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund"], cwd=JS_DIR, capture_output=True, text=True
            )
            assert run.returncode == 0, f"npm ci failed in {JS_DIR}:\n{run.stderr[-4000:]}"
    return node


# --------------------------------------------------------------------------- azurite

#: Azurite's one account and its key: public, documented, the same in every Azurite.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


class AzuriteServer:
    """An Azurite Blob service (``azurite-blob``) on a loopback port."""

    def __init__(self, proc: subprocess.Popen[str], port: int, output: list[str]) -> None:
        self.proc = proc
        self.port = port
        self.output = output  # what it printed, for error messages
        #: the account's URL: Azurite names the account in the path, not in the host
        self.endpoint = f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)

    def store_options(self) -> dict[str, Any]:
        """What ``s3q.open`` needs for an ``az://`` URL here; the account name and key come
        from the environment (``azurite`` sets them), as they do for Azure itself."""
        return {"endpoint_url": self.endpoint, "allow_http": True}

    def obstore(self, container: str) -> Any:
        """obstore's client of ``container``, configured here rather than from s3q."""
        from obstore.store import AzureStore

        return AzureStore(
            container,
            endpoint=self.endpoint,
            account_name=AZURITE_ACCOUNT,
            account_key=AZURITE_KEY,
            client_options={"allow_http": True},
        )

    def create_container(self, name: str) -> None:
        """Create Blob Storage Container ``name``, signed with the account's Shared Key
        (obstore has no call for it)."""
        headers = {"x-ms-date": email.utils.formatdate(usegmt=True), "x-ms-version": "2021-08-06"}
        signed = "\n".join(
            [
                "PUT",
                *[""] * 11,  # Content-Encoding ... Range: none of them sent
                *(f"{k}:{v}" for k, v in sorted(headers.items())),
                f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{name}\nrestype:container",
            ]
        )
        key = base64.b64decode(AZURITE_KEY)
        mac = hmac.new(key, signed.encode(), hashlib.sha256).digest()
        headers["Authorization"] = f"SharedKey {AZURITE_ACCOUNT}:{base64.b64encode(mac).decode()}"
        headers["Content-Length"] = "0"  # signed as empty; urllib would add a Content-Type
        request = urllib.request.Request(
            f"{self.endpoint}/{name}?restype=container", method="PUT", headers=headers
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 201, response.status


def start_azurite(node: str, location: Path) -> AzuriteServer:
    """Azurite's Blob service on a free loopback port, keeping its data in ``location``; ready
    once it says it listens and the port takes a connection. ``server.stop()`` ends it."""
    for _attempt in range(3):  # another process may take the free port before Azurite does
        port = free_port()
        proc = subprocess.Popen(
            [
                node,
                str(JS_DIR / "node_modules" / ".bin" / "azurite-blob"),
                *("--blobHost", "127.0.0.1", "--blobPort", str(port)),
                *("--location", str(location), "--silent", "--skipApiVersionCheck"),
                "--disableTelemetry",  # it would otherwise report to Application Insights
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        output: list[str] = []
        lines: queue.Queue[str | None] = queue.Queue()

        def pump(
            proc: subprocess.Popen[str] = proc,
            lines: queue.Queue[str | None] = lines,
            output: list[str] = output,
        ) -> None:
            assert proc.stdout is not None
            for line in proc.stdout:  # read to the end, so that Azurite never blocks on a pipe
                output.append(line.rstrip("\n"))
                lines.put(output[-1])
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + 60
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                proc.kill()
                proc.wait(timeout=30)
                raise RuntimeError(
                    "Azurite did not listen within 60 s:\n" + "\n".join(output)
                ) from None
            if line is None:
                break  # it exited: most likely the port was taken
            if f"listens on http://127.0.0.1:{port}" in line:
                with socket.create_connection(("127.0.0.1", port), timeout=10):
                    pass
                return AzuriteServer(proc, port, output)
        proc.wait(timeout=30)
    raise RuntimeError(f"Azurite exited with {proc.returncode}:\n" + "\n".join(output))


@pytest.fixture(scope="session")
def azurite(node: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzuriteServer]:
    """Azurite for the session, and its account's name and key in the environment of this
    process and of the child processes it starts, where obstore looks for Azure credentials."""
    server = start_azurite(node, tmp_path_factory.mktemp("azurite"))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AZURE_STORAGE_ACCOUNT_NAME", AZURITE_ACCOUNT)
        env.setenv("AZURE_STORAGE_ACCOUNT_KEY", AZURITE_KEY)
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="session")
def azure_container(azurite: AzuriteServer) -> str:
    name = "s3q-tests-" + uuid.uuid4().hex[:8]
    azurite.create_container(name)
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


class AzureEnv(StoreEnv):
    kind = "azure"

    def __init__(self, server: AzuriteServer, container: str) -> None:
        super().__init__()
        self.server = server
        self.container = container
        self.prefix = "q-" + uuid.uuid4().hex[:12]
        self.url = f"az://{container}/{self.prefix}"
        self.options = server.store_options()
        self._store: Any = None

    @property
    def store(self) -> Any:
        if self._store is None:
            self._store = self.server.obstore(self.container)
        return self._store

    @property
    def raw(self) -> bool:
        return True

    def keys(self) -> list[str]:
        import obstore

        paths = obstore.list(self.store, prefix=self.prefix + "/").collect()
        return sorted(meta["path"][len(self.prefix) + 1 :] for meta in paths)

    def read(self, key: str) -> bytes:
        import obstore

        return bytes(obstore.get(self.store, f"{self.prefix}/{key}").bytes())

    def put_if_absent(self, key: str, data: bytes) -> bool:
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            obstore.put(self.store, f"{self.prefix}/{key}", data, mode="create")
        except (AlreadyExistsError, PreconditionError):
            return False
        return True

    def sibling(self) -> StoreEnv:
        return AzureEnv(self.server, self.container)


def make_env(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> StoreEnv:
    if kind == "memory":
        return MemoryEnv()
    if kind == "file":
        return FileEnv(tmp_path)
    if kind == "s3":
        server = request.getfixturevalue("moto_server")
        bucket = request.getfixturevalue("s3_bucket")
        return S3Env(server, bucket)
    if kind == "azure":
        return AzureEnv(
            request.getfixturevalue("azurite"), request.getfixturevalue("azure_container")
        )
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
    """Start tests/support/<script> URL OPTIONS_JSON *args on the queue of ``env``; options must be
    JSON-serialisable."""
    import json

    return subprocess.Popen(
        [
            sys.executable,
            str(SUPPORT_DIR / script),
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
    config.addinivalue_line(
        "markers",
        "alone: holds figures of time (a soak's availability) that a saturated machine would "
        "miss: scripts/test runs it after the others, one test at a time",
    )


def open_after_crash(env: StoreEnv, **kw: Any) -> tuple[Any, FakeClock]:
    """Open a queue whose writer died without closing it.

    A local directory's flock dies with its process. An object store lease stays until it lapses:
    rather than sleeping, open with a fake clock set just past the lease the error reports.
    """
    import s3q

    clock = FakeClock(time.time() + 1)
    for _ in range(s3q.config.MAX_PARTITIONS):  # (each partition's lease lapses on its own)
        try:
            return env.open(clock=clock, **kw), clock
        except s3q.QueueLocked as exc:
            assert env.kind != "file", "a dead process still holds the file lock"
            assert exc.expires_at is not None, exc
            clock = FakeClock(max(time.time(), exc.expires_at, clock.now) + 1)
    raise AssertionError("the queue's leases never lapsed")
