"""s3q's broker against durable Redis and RabbitMQ: one workload, side by side, in one run.

    python benchmarks/brokers.py --messages 200000 --batch 100 --batch 1000
    python benchmarks/brokers.py [--messages N] [--batch B ...] [--producers 4] [--consumers 4]
        [--size 1024] [--system s3q --system redis --system rabbitmq] [--acks with-next]
        [--require] [--json]

Defaults: 100,000 messages, batches of 100 and of 1,000, 4 + 4 processes (a couple of minutes).

Each system runs alone in turn, its server started here on 127.0.0.1 on a free port in a
temporary directory (from Debian's packages for the peers: ``apt-get install redis-server
rabbitmq-server``; no system service is used) and stopped at the end. Every acknowledged write
is durable before its answer (fsync):

- **s3q**: ``s3q serve`` on a file:// store (a child process, ``s3q.broker.spawn``), its own
  blocking client (``s3q.client.connect``): ``enqueue_batch``, ``dequeue(max_messages=B)`` +
  ``complete_batch``. Each commit is a file fsynced with its directory before any answer.
- **Redis**: ``redis-server --appendonly yes --appendfsync always --save ''``, redis-py with
  hiredis: B ``XADD`` in one pipeline; ``XREADGROUP COUNT B`` + ``XACK`` of the batch.
- **RabbitMQ**: a quorum queue (``x-queue-type: quorum``), pika: B persistent publishes on a
  channel with publisher confirms, then wait for all B confirms (``SelectConnection``, as
  ``BlockingConnection`` waits for each confirm alone); ``basic_consume`` with prefetch B,
  manual acks, one ``basic_ack(multiple=True)`` per batch (AMQP answers no ack: the broker
  logs it in its Raft log, the consumer does not wait for that).

Per system and batch size B, with P producer and C consumer *processes*: **produce** N
messages, **consume** (drain) them, then **mixed**: producers send N more while consumers take
N (consumed and produced msg/s, and the backlog when the producers finished). The server's CPU
seconds (``/proc/<pid>/stat``, its process tree) and the client processes' are read around each
phase. The peers' libraries: ``pip install 's3q[bench]'``. A peer whose server binary or Python
library is missing is skipped with a printed line (an error with ``--require``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import multiprocessing as mp
import os
import queue as queues
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SYSTEMS = ("s3q", "s3q-cluster", "redis", "rabbitmq")
#: s3q-cluster: brokers (processes of one cluster, each the others' peer) and partitions of the
#: one queue (``--cluster BxP``)
CLUSTER = (2, 4)
QUEUE = "bench"
GROUP = "bench"  # Redis: the consumer group
IDLE_WAIT = 0.05  # seconds a consumer waits for messages before checking whether it is done
#: how consumers acknowledge (``--acks``): "separate", a call of its own after each batch;
#: "with-next", with the call that fetches the next batch (s3q: ``dequeue(complete=...)``;
#: Redis: XACK and XREADGROUP in one pipeline); "pushed" (s3q only; the peers as "separate"):
#: s3q's consumers subscribe, messages pushed, each acked, the acks of a batch awaited durable
#: together; RabbitMQ's acks are one-way either way
ACKS = "separate"
STALL = 120.0  # seconds without progress after which a phase is abandoned
# As ``s3q bench``: completed ids not kept, garbage without grace, leases long enough.
S3Q_OPTIONS = {"visibility_timeout": 300.0, "completed_retention": 0.0, "gc_grace": 0.0}
RABBIT_BIN = Path("/usr/lib/rabbitmq/bin")  # Debian's real scripts; /usr/sbin's su to rabbitmq


def log(message: str) -> None:
    """Progress on stderr, so stdout keeps the report alone."""
    print(message, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited at start ({proc.returncode})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not listen on {port} within {timeout:g} s")
        time.sleep(0.1)


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of ``pid``, its live descendants and their reaped children."""
    ticks = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}  # pid -> (ppid, seconds)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError), open(f"/proc/{entry}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
            # rest[1] ppid; rest[11..14] utime, stime, cutime, cstime (fields 14-17 of stat)
            stats[int(entry)] = (int(rest[1]), sum(int(v) for v in rest[11:15]) / ticks)
    tree, total, frontier = {pid}, 0.0, [pid]
    while frontier:
        parent = frontier.pop()
        total += stats.get(parent, (0, 0.0))[1]
        for child, (ppid, _) in stats.items():
            if ppid == parent and child not in tree:
                tree.add(child)
                frontier.append(child)
    return total


def server_cpu(server: Server) -> float:
    """CPU seconds of the server's process trees."""
    return sum(tree_cpu(pid) for pid in server.pids or [server.pid])


def fsync_micros(workdir: Path, rounds: int = 200) -> float:
    """Mean microseconds of a 1 KiB write + fsync on the disk under ``workdir``."""
    with open(workdir / "fsync-probe", "wb") as f:
        started = time.perf_counter()
        for _ in range(rounds):
            f.write(b"x" * 1024)
            f.flush()
            os.fsync(f.fileno())
        seconds = time.perf_counter() - started
    os.unlink(workdir / "fsync-probe")
    return seconds / rounds * 1e6


# --- the work of one client process ------------------------------------------------------------


@dataclass
class Shared:
    """Counters the client processes of one phase share."""

    quota: Any  # messages producers have still to send
    produced: Any  # messages whose send was acknowledged durable
    consumed: Any  # messages acknowledged by consumers
    target: int  # consumers stop once ``consumed`` reaches it
    barrier: Any  # every client and the conductor: the phase starts when all are ready


def take(shared: Shared, batch: int) -> int:
    """Claim up to ``batch`` messages of the producers' quota; 0 when it is spent."""
    with shared.quota.get_lock():
        n = min(batch, shared.quota.value)
        shared.quota.value -= n
    return n


def add(counter: Any, n: int) -> None:
    with counter.get_lock():
        counter.value += n


def s3q_producer(
    url: str, shared: Shared, batch: int, payload: bytes, ready: Callable[[], None]
) -> None:
    from s3q.client import connect

    with connect(url) as client:
        q = client.queue(QUEUE)
        q.stats()  # connected before the phase starts
        ready()
        while n := take(shared, batch):
            q.enqueue_batch([payload] * n)
            add(shared.produced, n)


def s3q_consumer(url: str, shared: Shared, batch: int, ready: Callable[[], None]) -> None:
    from s3q.client import connect

    with connect(url) as client:
        q = client.queue(QUEUE)
        q.stats()  # connected before the phase starts
        ready()
        if ACKS == "pushed":
            _s3q_pushed(q, shared, batch)
            return
        held: list[Any] = []  # (with-next) the batch to acknowledge with the next call
        while shared.consumed.value < shared.target:
            if ACKS == "separate":
                msgs = q.dequeue(max_messages=batch, wait=IDLE_WAIT)
                if msgs:
                    q.complete_batch(msgs)
                    add(shared.consumed, len(msgs))
                continue
            msgs = q.dequeue(max_messages=batch, wait=0.0 if held else IDLE_WAIT, complete=held)
            add(shared.consumed, len(held))
            held = msgs
        if held:
            q.complete_batch(held)


def _s3q_pushed(q: Any, shared: Shared, batch: int) -> None:
    """Consume on a subscription (prefetch 2 B): each message acknowledged on its own, the
    acks of B messages sent together and awaited durable (``flush``) before they count."""
    with q.subscribe(prefetch=2 * batch) as sub:
        while shared.consumed.value < shared.target:
            got = 0
            while got < batch and (msg := sub.get(IDLE_WAIT)) is not None:
                sub.ack(msg)
                got += 1
            if got:
                sub.flush()
                add(shared.consumed, got)


def redis_producer(
    port: int, shared: Shared, batch: int, payload: bytes, ready: Callable[[], None]
) -> None:
    import redis

    r = redis.Redis(host="127.0.0.1", port=port)
    r.ping()  # connected before the phase starts
    ready()
    while n := take(shared, batch):
        pipe = r.pipeline(transaction=False)
        for _ in range(n):
            pipe.xadd(QUEUE, {"d": payload})
        pipe.execute()
        add(shared.produced, n)
    r.close()


def redis_consumer(port: int, shared: Shared, batch: int, ready: Callable[[], None]) -> None:
    import redis

    r = redis.Redis(host="127.0.0.1", port=port)
    name = f"c{os.getpid()}"
    r.ping()
    ready()
    held: list[Any] = []  # (with-next) the batch to acknowledge with the next call
    while shared.consumed.value < shared.target:
        if ACKS == "separate":
            answer = r.xreadgroup(
                GROUP, name, {QUEUE: ">"}, count=batch, block=int(IDLE_WAIT * 1000)
            )
            ids = [entry_id for _, entries in answer or () for entry_id, _ in entries]
            if ids:
                r.xack(QUEUE, GROUP, *ids)
                add(shared.consumed, len(ids))
            continue
        pipe = r.pipeline(transaction=False)
        if held:
            pipe.xack(QUEUE, GROUP, *held)
        block = None if held else int(IDLE_WAIT * 1000)
        pipe.xreadgroup(GROUP, name, {QUEUE: ">"}, count=batch, block=block)
        answer = pipe.execute()[-1]
        add(shared.consumed, len(held))
        held = [entry_id for _, entries in answer or () for entry_id, _ in entries]
    if held:
        r.xack(QUEUE, GROUP, *held)
    r.close()


def rabbit_parameters(port: int) -> Any:
    import pika

    return pika.ConnectionParameters(host="127.0.0.1", port=port, heartbeat=0)


def rabbit_producer(
    port: int, shared: Shared, batch: int, payload: bytes, ready: Callable[[], None]
) -> None:
    """Publish a batch, wait for all its confirms, publish the next (pika's SelectConnection)."""
    import pika
    from pika.spec import Basic

    properties = pika.BasicProperties(delivery_mode=2)
    pending: set[int] = set()
    state: dict[str, Any] = {"tag": 0, "sent": 0, "error": None}

    def publish() -> None:
        n = take(shared, batch)
        if n == 0:
            state["channel"].connection.close()
            return
        state["sent"] = n
        for _ in range(n):
            state["tag"] += 1
            pending.add(state["tag"])
            state["channel"].basic_publish("", QUEUE, payload, properties)

    def on_confirm(frame: Any) -> None:
        method = frame.method
        if isinstance(method, Basic.Nack):
            state["error"] = f"publish {method.delivery_tag} was nacked"
            state["channel"].connection.close()
            return
        if method.multiple:
            pending.difference_update([t for t in pending if t <= method.delivery_tag])
        else:
            pending.discard(method.delivery_tag)
        if not pending:
            add(shared.produced, state["sent"])
            publish()

    def on_confirming(_frame: Any) -> None:
        ready()
        publish()

    def on_channel(channel: Any) -> None:
        state["channel"] = channel
        channel.confirm_delivery(ack_nack_callback=on_confirm, callback=on_confirming)

    def on_open_error(connection: Any, error: Any) -> None:
        state["error"] = f"could not connect: {error!r}"
        connection.ioloop.stop()

    def on_close(connection: Any, reason: Any) -> None:
        if pending and state["error"] is None:
            state["error"] = f"connection closed with {len(pending)} unconfirmed: {reason!r}"
        connection.ioloop.stop()

    connection = pika.SelectConnection(
        rabbit_parameters(port),
        on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
        on_open_error_callback=on_open_error,
        on_close_callback=on_close,
    )
    connection.ioloop.start()
    if state["error"]:
        raise RuntimeError(state["error"])


def rabbit_consumer(port: int, shared: Shared, batch: int, ready: Callable[[], None]) -> None:
    import pika

    connection = pika.BlockingConnection(rabbit_parameters(port))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=batch)
    ready()
    got, last = 0, 0
    for method, _properties, _body in channel.consume(QUEUE, inactivity_timeout=IDLE_WAIT):
        if method is not None:
            got, last = got + 1, method.delivery_tag
        if got and (got == batch or method is None):
            channel.basic_ack(last, multiple=True)
            add(shared.consumed, got)
            got = 0
        if shared.consumed.value >= shared.target:
            break
    channel.cancel()
    connection.close()


def client_main(
    system: str,
    role: str,
    address: Any,
    shared: Shared,
    batch: int,
    payload: bytes,
    results: Any,
) -> None:
    """One client process: connect, wait for the others, work; report its CPU and end time."""
    started: list[float] = []

    def ready() -> None:
        shared.barrier.wait(timeout=120)
        started.append(time.process_time())

    try:
        if role == "producer":
            producer = {
                "s3q": s3q_producer,
                "s3q-cluster": s3q_producer,
                "redis": redis_producer,
                "rabbitmq": rabbit_producer,
            }
            producer[system](address, shared, batch, payload, ready)
        else:
            consumer = {
                "s3q": s3q_consumer,
                "s3q-cluster": s3q_consumer,
                "redis": redis_consumer,
                "rabbitmq": rabbit_consumer,
            }
            consumer[system](address, shared, batch, ready)
        ended = time.monotonic()
        results.put((role, time.process_time() - started[0], ended, None))
    except BaseException as exc:
        shared.barrier.abort()
        results.put((role, 0.0, time.monotonic(), f"{system} {role}: {exc!r}"))


# --- the servers -------------------------------------------------------------------------------


class Server:
    """One system's server: started in a temporary directory, stopped at the end."""

    name = ""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir / self.name
        self.workdir.mkdir()
        self.pid = 0  # the server's process: its tree's CPU is the server's
        self.pids: list[int] = []  # (several servers: the CPU of all their trees)
        self.address: Any = None  # what a client process is given to connect
        self.notes: list[str] = []

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def reset(self) -> None:
        """An empty queue, made afresh before each batch size."""
        raise NotImplementedError

    def depth(self) -> int:
        """Messages in the queue not yet acknowledged by a consumer (ready, leased, unread)."""
        raise NotImplementedError


class S3qServer(Server):
    name = "s3q"

    def start(self) -> None:
        from s3q.broker import spawn

        self.child, self.address = spawn(f"file://{self.workdir}/store", options=S3Q_OPTIONS)
        self.pid = self.child.pid
        self.notes.append(
            f"s3q: `s3q serve` on file://{self.workdir}/store (options {S3Q_OPTIONS}, durability "
            "'durable', the default): a call is answered after its commit's file and directory "
            "are fsynced (s3q.store.local)."
        )

    def stop(self) -> None:
        self.child.terminate()
        try:
            self.child.wait(30)
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait(30)

    def _queue(self) -> Any:
        from s3q.client import connect

        return connect(self.address)

    def reset(self) -> None:
        with self._queue() as client:
            q = client.queue(QUEUE)
            q.configure()  # a broker makes the queue; a purge alone would be a 404
            q.purge()

    def depth(self) -> int:
        with self._queue() as client:
            stats = client.queue(QUEUE).stats()
            return stats.pending + stats.processing + stats.delayed + stats.retry


class S3qClusterServer(S3qServer):
    """``CLUSTER[0]`` brokers over one store, each the others' peer; the queue made with
    ``CLUSTER[1]`` partitions; each client is given every broker (and spreads its calls)."""

    name = "s3q-cluster"

    def start(self) -> None:
        from s3q.broker import spawn

        brokers, partitions = CLUSTER
        ports = [free_port() for _ in range(brokers)]
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        store = f"file://{self.workdir}/store"
        self.children = [
            spawn(store, port=port, options=S3Q_OPTIONS, peers=[u for u in urls if u != url])[0]
            for port, url in zip(ports, urls, strict=True)
        ]
        self.pids = [child.pid for child in self.children]
        self.address = urls
        self.partitions = partitions
        self.notes.append(
            f"s3q-cluster: {brokers} `s3q serve` processes over file://{self.workdir}/store, "
            f"each the others' --peer; the queue has {partitions} partitions, led by the "
            "brokers in turn; clients are given every broker and spread over them."
        )

    def stop(self) -> None:
        for child in self.children:
            child.terminate()
        for child in self.children:
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(30)

    def reset(self) -> None:
        with self._queue() as client:
            q = client.queue(QUEUE)
            q.configure(partitions=self.partitions)  # made with its partitions
            q.purge()


class RedisServer(Server):
    name = "redis"

    def start(self) -> None:
        import redis

        server = shutil.which("redis-server")
        if server is None:
            raise RuntimeError("no redis-server binary")
        port = free_port()
        command = [
            server,
            *("--port", str(port), "--bind", "127.0.0.1", "--dir", str(self.workdir)),
            *("--appendonly", "yes", "--appendfsync", "always", "--save", ""),
        ]
        self.child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.pid, self.address = self.child.pid, port
        wait_for_port(port, self.child, 30, "redis-server")
        r = redis.Redis(host="127.0.0.1", port=port)
        settings = {
            k: r.config_get(k)[k] for k in ("appendonly", "appendfsync", "save", "bind", "port")
        }
        parser = type(r.connection_pool.get_connection("PING")._parser).__name__
        version = r.info("server")["redis_version"]
        r.close()
        self.notes.append(
            f"Redis {version}: `{shlex.join(command)}`; CONFIG GET: {settings}. With appendfsync "
            "always, the AOF is written and fsynced before the replies of an event-loop pass are "
            f"sent (one fsync per pass: group commit). redis-py {redis.__version__}, parser "
            f"{parser}. XACK leaves entries in the stream (it clears the pending list only); the "
            "stream is deleted between batch sizes."
        )

    def stop(self) -> None:
        self.child.terminate()
        try:
            self.child.wait(30)
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait(30)

    def _client(self) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.address)

    def reset(self) -> None:
        r = self._client()
        r.delete(QUEUE)
        r.xgroup_create(QUEUE, GROUP, id="0", mkstream=True)
        r.close()

    def depth(self) -> int:
        r = self._client()
        (group,) = [g for g in r.xinfo_groups(QUEUE) if g["name"] in (GROUP, GROUP.encode())]
        r.close()
        return int(group["pending"]) + int(group["lag"] or 0)


class RabbitServer(Server):
    name = "rabbitmq"

    def _script(self, name: str) -> str:
        path = RABBIT_BIN / name
        found = str(path) if path.exists() else shutil.which(name)
        if found is None:
            raise RuntimeError(f"no {name} binary")
        return found

    def start(self) -> None:
        import pika

        server, self.ctl = self._script("rabbitmq-server"), self._script("rabbitmqctl")
        port, dist, epmd = free_port(), free_port(), free_port()
        self.node = f"s3qbench{port}@localhost"
        loopback = "-kernel inet_dist_use_interface {127,0,0,1}"
        (self.workdir / "rabbitmq.conf").write_text("loopback_users.guest = true\n")
        (self.workdir / "enabled_plugins").write_text("[].\n")
        (self.workdir / "rabbitmq-env.conf").write_text("")
        self.env = {
            **os.environ,
            "HOME": str(self.workdir),  # the Erlang cookie is made and read here
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(port),
            "RABBITMQ_DIST_PORT": str(dist),
            "RABBITMQ_MNESIA_BASE": str(self.workdir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.workdir / "log"),
            "RABBITMQ_CONFIG_FILE": str(self.workdir / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.workdir / "enabled_plugins"),
            "RABBITMQ_CONF_ENV_FILE": str(self.workdir / "rabbitmq-env.conf"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": loopback,
            "RABBITMQ_CTL_ERL_ARGS": loopback,
            "ERL_EPMD_PORT": str(epmd),  # an epmd of our own, on loopback, stopped at the end
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        }
        self.epmd = epmd
        subprocess.run(["epmd", "-daemon"], env=self.env, check=True)
        self.child = subprocess.Popen(
            [server],
            env=self.env,
            cwd=self.workdir,
            stdout=open(self.workdir / "server.out", "wb"),  # noqa: SIM115 (closed with the child)
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: killed as one on error
        )
        self.pid, self.address = self.child.pid, port
        wait_for_port(port, self.child, 120, "rabbitmq-server")
        self.rabbitmqctl("await_startup", timeout=120)
        sync = self.rabbitmqctl(
            "eval", "maps:get(wal_sync_method, ra_system:fetch(quorum_queues))."
        ).strip()
        version = self.rabbitmqctl("eval", "rabbit_misc:version().").strip().strip('"')
        self.notes.append(
            f"RabbitMQ {version}: node {self.node} on 127.0.0.1:{port} (dist {dist}, epmd "
            f"{epmd}), a quorum queue (`x-queue-type: quorum`, durable, one member); its Raft "
            f"WAL's wal_sync_method is {sync} (fdatasync after each WAL batch), and a publish is "
            "confirmed once its entry is written and synced. Persistent messages "
            "(delivery_mode 2). A consumer's basic.ack has no answer in AMQP 0-9-1: the consumer "
            f"does not wait for the settlement to be logged. pika {pika.__version__}."
        )

    def rabbitmqctl(self, *args: str, timeout: float = 60) -> str:
        done = subprocess.run(
            [self.ctl, "-n", self.node, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {done.stderr or done.stdout}")
        return done.stdout

    def stop(self) -> None:
        try:
            if self.child.poll() is None:
                self.rabbitmqctl("stop", timeout=60)
                self.child.wait(60)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            log(f"rabbitmq: clean stop failed ({exc!r}); killing its process group")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.child.pid, signal.SIGKILL)
            self.child.wait(30)
        finally:
            subprocess.run(
                ["epmd", "-kill"], env=self.env, capture_output=True, check=False, timeout=30
            )

    def _channel(self) -> Any:
        import pika

        return pika.BlockingConnection(rabbit_parameters(self.address))

    def reset(self) -> None:
        connection = self._channel()
        channel = connection.channel()
        channel.queue_delete(QUEUE)
        channel.queue_declare(QUEUE, durable=True, arguments={"x-queue-type": "quorum"})
        connection.close()

    def depth(self) -> int:
        connection = self._channel()
        declared = connection.channel().queue_declare(QUEUE, passive=True)
        connection.close()
        return int(declared.method.message_count)  # ready; no consumer holds any now


SERVERS: dict[str, type[Server]] = {
    "s3q": S3qServer,
    "s3q-cluster": S3qClusterServer,
    "redis": RedisServer,
    "rabbitmq": RabbitServer,
}
MODULES = {
    "s3q": ["s3q"],
    "s3q-cluster": ["s3q"],
    "redis": ["redis", "hiredis"],
    "rabbitmq": ["pika"],
}


def missing(system: str) -> str | None:
    """Why ``system`` cannot run here, or None."""
    absent = [m for m in MODULES[system] if importlib.util.find_spec(m) is None]
    if absent:
        return f"no Python module {', '.join(absent)} (pip install 's3q[bench]')"
    binary = {"redis": "redis-server", "rabbitmq": "rabbitmq-server"}.get(system)
    if binary and not ((RABBIT_BIN / binary).exists() or shutil.which(binary)):
        return f"no {binary} binary (apt-get install {binary})"
    if system == "rabbitmq" and not shutil.which("epmd"):
        return "no epmd binary (Erlang's, with rabbitmq-server)"
    return None


# --- phases ------------------------------------------------------------------------------------


@dataclass
class Phase:
    """One measured phase of one system at one batch size."""

    system: str
    batch: int
    phase: str  # produce, consume, mixed
    produced: int
    consumed: int
    produce_seconds: float  # until the last producer finished (0: none ran)
    consume_seconds: float
    server_cpu: float
    client_cpu: float
    backlog_peak: int = 0  # mixed: most produced-but-not-consumed seen
    backlog_at_produced: int = 0  # mixed: when the producers had all finished

    @property
    def messages(self) -> int:
        return self.consumed if self.phase != "produce" else self.produced

    def rate(self, which: str) -> float:
        n, s = (
            (self.produced, self.produce_seconds)
            if which == "produce"
            else (self.consumed, self.consume_seconds)
        )
        return n / s if s > 0 else 0.0


def run_phase(
    server: Server, phase: str, batch: int, args: argparse.Namespace, payload: bytes
) -> Phase:
    """Start the clients of ``phase``, release them together, wait; the figures."""
    ctx = mp.get_context("fork")
    n = args.messages
    roles = {
        "produce": ["producer"] * args.producers,
        "consume": ["consumer"] * args.consumers,
        "mixed": ["producer"] * args.producers + ["consumer"] * args.consumers,
    }[phase]
    shared = Shared(
        quota=ctx.Value("q", 0 if phase == "consume" else n),
        produced=ctx.Value("q", 0),
        consumed=ctx.Value("q", 0),
        target=0 if phase == "produce" else n,
        barrier=ctx.Barrier(len(roles) + 1),
    )
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=client_main,
            args=(server.name, role, server.address, shared, batch, payload, results),
            daemon=True,
        )
        for role in roles
    ]
    for p in procs:
        p.start()
    try:
        cpu_before = server_cpu(server)
        try:
            shared.barrier.wait(timeout=120)
        except threading.BrokenBarrierError:
            with contextlib.suppress(queues.Empty):
                raise RuntimeError(results.get(timeout=5)[3]) from None
            raise RuntimeError(f"{server.name} {phase}: the clients did not start") from None
        started = time.monotonic()
        reports: list[tuple[str, float, float, str | None]] = []
        peak, at_produced, last_progress, progress = 0, None, started, (0, 0)
        while len(reports) < len(procs):
            with contextlib.suppress(queues.Empty):
                reports.append(results.get(timeout=0.02))
                if reports[-1][3]:
                    raise RuntimeError(reports[-1][3])
            produced, consumed = shared.produced.value, shared.consumed.value
            if phase == "mixed":
                peak = max(peak, produced - consumed)
                if at_produced is None and produced >= n:
                    at_produced = produced - consumed
            now = time.monotonic()
            if (produced, consumed) != progress:
                progress, last_progress = (produced, consumed), now
            elif now - last_progress > STALL:
                raise RuntimeError(f"{server.name} {phase}: no progress for {STALL:g} s")
            if len(reports) < len(procs) and not any(p.is_alive() for p in procs):
                # (a report put just before its process ended may still be in the pipe:
                # Queue.empty() says nothing of it)
                with contextlib.suppress(queues.Empty):
                    while len(reports) < len(procs):
                        reports.append(results.get(timeout=2.0))
                        if reports[-1][3]:
                            raise RuntimeError(reports[-1][3])
                if len(reports) == len(procs):
                    continue
                codes = [p.exitcode for p in procs]
                raise RuntimeError(
                    f"{server.name} {phase}: client processes ended (exit codes {codes}) "
                    f"with {len(procs) - len(reports)} of them unreported"
                )
        cpu_after = server_cpu(server)
    finally:
        shared.barrier.abort()
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join()
    ends = {role: max((r[2] for r in reports if r[0] == role), default=started) for role in roles}
    return Phase(
        system=server.name,
        batch=batch,
        phase=phase,
        produced=shared.produced.value,
        consumed=shared.consumed.value,
        produce_seconds=ends.get("producer", started) - started,
        consume_seconds=ends.get("consumer", started) - started,
        server_cpu=cpu_after - cpu_before,
        client_cpu=sum(r[1] for r in reports),
        backlog_peak=peak,
        backlog_at_produced=at_produced or 0,
    )


def bench_system(server: Server, args: argparse.Namespace) -> list[Phase]:
    payload = b"x" * args.size
    phases: list[Phase] = []
    for batch in args.batch:
        server.reset()
        for phase in ("produce", "consume", "mixed"):
            log(f"{server.name}: batch {batch}, {phase} ...")
            result = run_phase(server, phase, batch, args, payload)
            depth = server.depth()
            expected = args.messages if phase == "produce" else 0
            if depth != expected or result.messages != args.messages:
                raise RuntimeError(
                    f"{server.name} {phase}: {result.messages} messages counted, {depth} left "
                    f"in the queue (expected {args.messages} and {expected})"
                )
            seconds = max(result.produce_seconds, result.consume_seconds)
            log(
                f"  {result.messages:,} in {seconds:.2f} s; server CPU {result.server_cpu:.2f} s, "
                f"clients {result.client_cpu:.2f} s"
            )
            phases.append(result)
    return phases


# --- the report --------------------------------------------------------------------------------


@dataclass
class Row:
    """The figures of one system at one batch size."""

    system: str
    batch: int
    produce: float
    consume: float
    mixed_consumed: float
    mixed_produced: float
    backlog_at_produced: int
    backlog_peak: int
    #: CPU seconds of all three phases per 100,000 messages consumed (each message's whole life)
    server_cpu_per_100k: float
    client_cpu_per_100k: float
    phases: list[dict[str, Any]] = field(default_factory=list)


def rows(phases: list[Phase]) -> list[Row]:
    out = []
    for system in SYSTEMS:
        for batch in dict.fromkeys(p.batch for p in phases if p.system == system):
            got = {p.phase: p for p in phases if p.system == system and p.batch == batch}
            consumed = sum(p.consumed for p in got.values())
            per = 100_000 / consumed if consumed else 0.0
            out.append(
                Row(
                    system=system,
                    batch=batch,
                    produce=got["produce"].rate("produce"),
                    consume=got["consume"].rate("consume"),
                    mixed_consumed=got["mixed"].rate("consume"),
                    mixed_produced=got["mixed"].rate("produce"),
                    backlog_at_produced=got["mixed"].backlog_at_produced,
                    backlog_peak=got["mixed"].backlog_peak,
                    server_cpu_per_100k=sum(p.server_cpu for p in got.values()) * per,
                    client_cpu_per_100k=sum(p.client_cpu for p in got.values()) * per,
                    phases=[asdict(p) for p in got.values()],
                )
            )
    return out


def grew(row: Row, args: argparse.Namespace) -> str:
    """The backlog when the producers finished, and whether it outgrew what is in flight."""
    in_flight = row.batch * args.consumers  # leased, not yet acknowledged
    verdict = "grew" if row.backlog_at_produced > in_flight else "flat"
    share = row.backlog_at_produced / args.messages
    return f"{verdict}: {row.backlog_at_produced:,} ({share:.0%})"


def markdown(table: list[list[str]]) -> str:
    head, *body = table
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines)


def report(found: list[Row], phases: list[Phase], args: argparse.Namespace, extra: dict) -> str:
    out = [f"command: `{extra['command']}`", ""]
    out.append(
        f"{args.messages:,} messages of {args.size} B per phase, {args.producers} producer and "
        f"{args.consumers} consumer processes; each system alone on this machine, durable on "
        "every acknowledged write."
    )
    out.append("")
    for system, reason in extra["skipped"].items():
        out += [f"**{system} skipped**: {reason}", ""]
    table = [
        [
            "system",
            "batch",
            "produce msg/s",
            "consume msg/s",
            "mixed consumed (produced) msg/s",
            "mixed backlog when produced",
            "server CPU s / 100k consumed",
            "clients' CPU s / 100k consumed",
        ]
    ]
    for r in found:
        table.append(
            [
                r.system,
                f"{r.batch:,}",
                f"{r.produce:,.0f}",
                f"{r.consume:,.0f}",
                f"{r.mixed_consumed:,.0f} ({r.mixed_produced:,.0f})",
                grew(r, args),
                f"{r.server_cpu_per_100k:.2f}",
                f"{r.client_cpu_per_100k:.2f}",
            ]
        )
    out.append(markdown(table))
    s3q = {r.batch: r for r in found if r.system == "s3q"}
    peers = [r for r in found if not r.system.startswith("s3q") and r.batch in s3q]
    for r in found:
        if r.system == "s3q-cluster" and r.batch in s3q and s3q[r.batch].mixed_consumed:
            one = s3q[r.batch]
            out += [
                "",
                f"s3q-cluster ({CLUSTER[0]} brokers, {CLUSTER[1]} partitions) ÷ s3q (one broker, "
                f"one partition), batch {r.batch:,}: produce {r.produce / one.produce:.2f}x, "
                f"consume {r.consume / one.consume:.2f}x, mixed consumed "
                f"{r.mixed_consumed / one.mixed_consumed:.2f}x",
            ]
    if peers:
        out += [
            "",
            "s3q ÷ peer, same batch (rates: above 1, s3q is faster; CPU: below 1, "
            "s3q spends less):",
            "",
        ]
        ratios = [
            ["peer", "batch", "produce", "consume", "mixed consumed", "server CPU", "clients' CPU"]
        ]

        def ratio(a: float, b: float) -> str:
            return f"{a / b:.2f}x" if b else "-"

        for r in peers:
            s = s3q[r.batch]
            ratios.append(
                [
                    r.system,
                    f"{r.batch:,}",
                    ratio(s.produce, r.produce),
                    ratio(s.consume, r.consume),
                    ratio(s.mixed_consumed, r.mixed_consumed),
                    ratio(s.server_cpu_per_100k, r.server_cpu_per_100k),
                    ratio(s.client_cpu_per_100k, r.client_cpu_per_100k),
                ]
            )
        out.append(markdown(ratios))
    out += ["", "Each phase (CPU seconds per 100k of the phase's messages):", ""]
    detail = [
        [
            "system",
            "batch",
            "phase",
            "produced",
            "consumed",
            "seconds",
            "server CPU s",
            "per 100k",
            "clients' CPU s",
            "per 100k",
        ]
    ]
    for p in phases:
        per = 100_000 / p.messages if p.messages else 0.0
        detail.append(
            [
                p.system,
                f"{p.batch:,}",
                p.phase,
                f"{p.produced:,}",
                f"{p.consumed:,}",
                f"{max(p.produce_seconds, p.consume_seconds):.2f}",
                f"{p.server_cpu:.2f}",
                f"{p.server_cpu * per:.2f}",
                f"{p.client_cpu:.2f}",
                f"{p.client_cpu * per:.2f}",
            ]
        )
    out.append(markdown(detail))
    out.append("")
    out.append(
        "Mixed: producers send N while consumers take N; the backlog is produced minus consumed "
        "when the last producer finished ('grew' when above consumers x batch, what consumers "
        "may hold unacknowledged). Server CPU: the server process and its descendants "
        "(/proc/<pid>/stat), read before and after each phase."
    )
    out += [f"- {note}" for note in extra["notes"]]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000, help="messages per phase (N)")
    parser.add_argument("--batch", type=int, action="append", help="batch size (repeatable)")
    parser.add_argument("--size", type=int, default=1024, help="payload bytes")
    parser.add_argument("--producers", type=int, default=4, help="producer processes")
    parser.add_argument("--consumers", type=int, default=4, help="consumer processes")
    parser.add_argument(
        "--system", action="append", choices=SYSTEMS, help="run only these (repeatable)"
    )
    parser.add_argument(
        "--acks",
        choices=["separate", "with-next", "pushed"],
        default="separate",
        help="consumers acknowledge in a call of its own, or with the next fetch",
    )
    parser.add_argument("--require", action="store_true", help="fail if a peer cannot run")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument(
        "--cluster",
        default="2x4",
        help="s3q-cluster: brokers x partitions of the queue (default 2x4)",
    )
    args = parser.parse_args()
    global ACKS, CLUSTER
    ACKS = args.acks
    brokers, _, parts = args.cluster.partition("x")
    CLUSTER = (int(brokers), int(parts))
    args.batch = args.batch or [100, 1000]
    systems = args.system or list(SYSTEMS)
    if min(args.messages, args.producers, args.consumers, *args.batch) < 1 or args.size < 1:
        parser.error("--messages, --batch, --producers, --consumers and --size must be positive")
    command = shlex.join([Path(sys.orig_argv[0]).name, *sys.orig_argv[1:]])

    skipped: dict[str, str] = {}
    notes: list[str] = []
    phases: list[Phase] = []
    workdir = Path(tempfile.mkdtemp(prefix="s3q-brokers-"))
    try:
        notes.append(
            f"disk: a 1 KiB write + fsync takes {fsync_micros(workdir):.0f} µs here (temp dir "
            f"{workdir.parent}); {os.cpu_count()} CPUs, shared by servers and clients."
        )
        for system in systems:
            reason = missing(system)
            if reason is not None:
                if args.require:
                    sys.exit(f"{system} cannot run here: {reason}")
                skipped[system] = reason
                log(f"{system} skipped: {reason}")
                continue
            server = SERVERS[system](workdir)
            log(f"{system}: starting its server ...")
            try:
                server.start()
            except Exception as exc:
                with contextlib.suppress(Exception):
                    server.stop()
                if args.require or system == "s3q":
                    raise
                skipped[system] = f"its server did not start: {exc}"
                log(f"{system} skipped: {skipped[system]}")
                continue
            try:
                phases += bench_system(server, args)
            finally:
                notes += server.notes
                server.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    found = rows(phases)
    extra = {"command": command, "skipped": skipped, "notes": notes}
    if args.json:
        config = {k: v for k, v in vars(args).items() if k not in ("json",)}
        print(json.dumps({**extra, "config": config, "rows": [asdict(r) for r in found]}))
    else:
        print(report(found, phases, args, extra))


if __name__ == "__main__":
    main()
