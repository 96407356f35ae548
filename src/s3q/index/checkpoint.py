"""Checkpoints: the index as of a log object, so opening a queue replays only the log after it.

``checkpoint/<seq>`` (20 digits) is written with create-if-absent once log object ``seq`` is
durable, by the writer that wrote it; the snapshot in it was taken when the index held exactly
the log up to ``seq``. See ``collector`` for how long checkpoints and log objects are kept.

``take`` snapshots the index (``state.QueueState``); ``restore`` gives the index a snapshot
describes. Fields are added at the end of a struct only, with defaults: an older checkpoint
reads with them, and an older build skips them.
"""

from __future__ import annotations

import msgspec

from ..log import segment
from .garbage import Garbage
from .records import DEAD, DONE, LEASED, Record, Run, RunSnap
from .state import QueueState, Settings
from .tenants import TenantSnap

PREFIX = "checkpoint/"


class Snapshot(msgspec.Struct, array_like=True):
    """The index at log object ``seq``: what a checkpoint holds."""

    seq: int
    arrivals: int  # arrival numbers given so far (the latest given)
    total_enqueued: int
    messages: list[Record]
    dedup: list[tuple[str, str, float]]  # (dedup_id, message id, enqueued_at)
    written_bytes: dict[int, int]  # log seq -> payload bytes it was written with
    #: (stamp, key) each: a list of pairs, kept encoded (``garbage.Garbage``)
    garbage: msgspec.Raw
    settings: Settings = {}
    tokens: list[str] = []  # commit tokens, oldest first
    dead: list[str] | None = None  # dead letters in the order they died (None: older checkpoints)
    queue: str = ""  # the queue's id (format 2)
    runs: list[RunSnap] = []  # untouched messages (format 2), in arrival order
    #: completed messages with no record (format 2): a list of ChunkSnap, kept encoded
    #: (``Completed.to_raw``, ``Completed.from_raw``)
    completed: msgspec.Raw = msgspec.Raw(b"\x90")
    shares: dict[int, float] = {}  # fair delivery: each priority's next start tag
    vtime: float = 0.0  # fair delivery: the start tag of the latest delivery
    tenants: list[TenantSnap] = []  # tenant fairness: what the messages do not tell
    busy: tuple[float, float] = (0.0, 0.0)  # the queue's recent processing time, as of when


class Checkpoint(msgspec.Struct, array_like=True):
    """A snapshot of the index and what it needs from the store."""

    seq: int
    writer: str
    at: float
    snapshot: Snapshot


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Checkpoint)
_head_decoder = msgspec.msgpack.Decoder(tuple[int, str, float])

#: the first bytes of a checkpoint, which hold its ``seq``, ``writer`` and ``at`` (a writer
#: token of up to 27 characters): enough to learn when it was taken without reading it all
HEAD_BYTES = 48
_FIXED = {0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8}


def key(seq: int) -> str:
    return segment.key(seq, PREFIX)


def seq_of(key: str) -> int | None:
    return segment.seq_of(key, PREFIX)


def encode(checkpoint: Checkpoint) -> bytearray:
    """The sealed checkpoint, built in one buffer (it can be large: no copies)."""
    buffer = bytearray()
    _encoder.encode_into(checkpoint, buffer)
    return segment.seal_in_place(buffer)


def decode(data: bytes, where: str) -> Checkpoint:
    return _decoder.decode(segment.unseal(data, where))


def head(data: bytes) -> tuple[int, float] | None:
    """The ``seq`` and ``at`` of a checkpoint from its first bytes (``HEAD_BYTES`` of it: the
    encoded :class:`Checkpoint` starts the object, its trailer ends it), None if they do not
    hold them. Nothing is checked against the trailer's checksum: the caller compares ``seq``
    with the key it read."""
    if not data or data[0] != 0x94:  # an array of Checkpoint's four fields
        return None
    end = 1
    try:
        for _ in range(3):  # seq, writer, at: each one msgpack scalar
            end = _scalar_end(data, end)
    except (IndexError, ValueError):
        return None
    if end > len(data):
        return None
    try:
        seq, _, at = _head_decoder.decode(b"\x93" + data[1:end])
    except msgspec.DecodeError:
        return None
    return seq, at


def _scalar_end(data: bytes, at: int) -> int:
    """Where the msgpack number or string starting at ``at`` ends."""
    kind = data[at]
    if kind <= 0x7F or kind >= 0xE0:  # fixints
        return at + 1
    if 0xA0 <= kind <= 0xBF:  # fixstr
        return at + 1 + (kind & 0x1F)
    if kind in _FIXED:
        return at + 1 + _FIXED[kind]
    if kind == 0xD9:  # str 8
        return at + 2 + data[at + 1]
    if kind == 0xDA:  # str 16
        return at + 3 + int.from_bytes(data[at + 1 : at + 3], "big")
    raise ValueError(f"not a number or a string: {kind:#x}")


def take(state: QueueState) -> Snapshot:
    """Everything the index holds, as of the operations folded so far."""
    shares = state.delivery.shares
    return Snapshot(
        seq=state.payloads.seq,
        arrivals=state.arrivals,
        total_enqueued=state.total_enqueued,
        messages=list(state.records()),  # (members of leased stretches as records)
        dedup=state.retention.dedup_snap(),
        written_bytes=state.payloads.written_bytes,
        garbage=state.payloads.garbage.to_raw(),
        settings=state.settings,
        tokens=list(state.retention.tokens),
        dead=list(state.dead),
        queue=state.queue,
        runs=[run.to_snap() for run in state.runs],
        completed=state.retention.completed.to_raw(),
        shares=shares.tags,
        vtime=shares.vtime,
        tenants=state.tenants.to_snap(),
        busy=(state.tenants.busy, state.tenants.busy_at),
    )


def restore(snap: Snapshot) -> QueueState:
    """The index a snapshot describes, its delivery structures rebuilt."""
    state = QueueState()
    state.total_enqueued, state.arrivals = snap.total_enqueued, snap.arrivals
    state.payloads.restore(snap.seq, snap.written_bytes, Garbage.from_raw(snap.garbage))
    state.settings = dict(snap.settings)
    state.queue = snap.queue
    delivery, tenants = state.delivery, state.tenants
    delivery.shares.tags, delivery.shares.vtime = dict(snap.shares), snap.vtime
    records = sorted(snap.messages, key=lambda r: r.arrival)
    state.messages.update((rec.id, rec) for rec in records)
    finished = []
    for rec in records:
        rec.version = 0
        if rec.state == DONE:
            finished.append((rec.finished_at, rec.id))
            continue
        if rec.state == DEAD:
            state.dead[rec.id] = None
        else:
            state.live += 1
            if rec.group is not None:
                delivery.groups.join(rec)
            if rec.state == LEASED:
                tenants.restored_lease(rec.tenant)
            else:
                tenants.arrived(rec.tenant, 1, 0.0, sent=False)
        state.payloads.keep(rec)
    if snap.dead is not None:  # the order they died in, ties included
        state.dead = dict.fromkeys(snap.dead)
    else:
        state.dead = dict.fromkeys(
            sorted(state.dead, key=lambda mid: state.messages[mid].finished_at)
        )
    state.retention.restore(snap.dedup, snap.tokens, finished, snap.completed)
    runs = [Run.from_snap(state.queue, snap_run) for snap_run in snap.runs]
    for run in runs:
        count = len(run)
        state.runs.add(run)
        state.live += count
        state.payloads.keep_many(run.seq, run.stage, count, run.bytes)
        tenants.arrived(run.tenant, count, 0.0, sent=False)
    tenants.restore(snap.tenants, snap.busy)
    delivery.restore(records, runs)
    return state
