"""Payload references: which objects still hold payloads of live messages, and which are garbage.

Live messages are counted per object holding their payloads: a log object (``refs``, with the
bytes those payloads take and the bytes the object was written with) or a staged object
(``staged_refs``). An object no live message needs any more is garbage, stamped with the log
object being folded when it became so; the collector deletes garbage stamped at or before a
stable checkpoint (``doomed``, ``forget``) and relocates live payloads out of objects that are
mostly dead (``holding``). (Nothing to do with releasing a lease.)
"""

from __future__ import annotations

from collections.abc import Iterator, KeysView

from ..log import segment
from .garbage import Garbage
from .records import Record


def blob_key(mid: str) -> str:
    """Where a payload too large for the log lies."""
    return f"blob/{mid}"


class PayloadRefs:
    """What the objects of a queue hold that live messages still need."""

    def __init__(self) -> None:
        self.seq = 0  # the log object being folded
        self.refs: dict[int, int] = {}  # log seq -> live messages whose payload lies there
        self.live_bytes: dict[int, int] = {}  # log seq -> bytes of those payloads
        self.written_bytes: dict[int, int] = {}  # log seq -> payload bytes it was written with
        self.staged_refs: dict[str, int] = {}  # staged object -> live messages it holds
        self.garbage = Garbage()  # (seq it became garbage at, object key), oldest first

    # -- folding ---------------------------------------------------------------------------------

    def wrote(self, seq: int, size: int) -> None:
        """Log object ``seq`` was written with ``size`` more payload bytes."""
        self.written_bytes[seq] = self.written_bytes.get(seq, 0) + size

    def keep(self, rec: Record) -> None:
        """``rec``, a live message, needs its payload (unless it lies in an object of its own)."""
        if rec.stage is not None or rec.offset >= 0:
            self.keep_many(rec.payload_seq, rec.stage, 1, rec.size)

    def keep_many(self, seq: int, stage: str | None, count: int, size: int) -> None:
        """``count`` more live messages need payloads of ``size`` bytes in all, lying in
        staged object ``stage``, else in log object ``seq``."""
        if stage is not None:
            self.staged_refs[stage] = self.staged_refs.get(stage, 0) + count
            return
        self.refs[seq] = self.refs.get(seq, 0) + count
        self.live_bytes[seq] = self.live_bytes.get(seq, 0) + size

    def drop(self, rec: Record) -> None:
        """``rec`` no longer needs its payload (completed, purged, or moved)."""
        if rec.stage is None and rec.offset < 0:
            self.garbage.add(self.seq, blob_key(rec.id))
            return
        self.drop_many(rec.payload_seq, rec.stage, 1, rec.size)

    def drop_many(self, seq: int, stage: str | None, count: int, size: int) -> None:
        """``count`` live messages no longer need their payloads (``size`` bytes in all), lying
        in staged object ``stage``, else in log object ``seq``."""
        if stage is not None:
            self.drop_staged(stage, count)
            return
        left = self.refs[seq] - count
        self.live_bytes[seq] -= size
        if left:
            self.refs[seq] = left
            return
        del self.refs[seq], self.live_bytes[seq]
        self.written_bytes.pop(seq, None)
        if seq < self.seq:  # a closed object: garbage now; the open one is judged on closing
            self.garbage.add(self.seq, segment.key(seq))

    def drop_staged(self, key: str, count: int = 1) -> None:
        """``count`` live messages no longer need their payloads in staged object ``key``."""
        left = self.staged_refs[key] - count
        if left:
            self.staged_refs[key] = left
        else:  # the staged object is garbage once its last message no longer needs it
            del self.staged_refs[key]
            self.garbage.add(self.seq, key)

    def unneeded(self, seq: int, key: str) -> None:
        """Object ``key``, written with log object ``seq``, holds nothing anyone needs (every
        message in it was a duplicate), unless live messages already hold it."""
        if key not in self.staged_refs:
            self.garbage.add(seq, key)

    def close(self, seq: int) -> None:
        """Folding moves on to log object ``seq``: the previous one is garbage if unreferenced."""
        previous = self.seq
        self.seq = seq
        if previous and previous < seq and previous not in self.refs:
            self.written_bytes.pop(previous, None)
            self.garbage.add(seq, segment.key(previous))

    # -- for the collector -----------------------------------------------------------------------

    def doomed(self, stable: int) -> list[tuple[int, str]]:
        """The garbage stamped at or before log object ``stable``: ``(stamp, key)`` each."""
        return self.garbage.doomed(stable)

    def forget(self, gone: set[str]) -> None:
        """Objects ``gone`` were deleted."""
        self.garbage.forget(gone)

    def garbage_objects(self) -> KeysView[str]:
        """The garbage that is not a log object (staged objects, large payloads' objects)."""
        return self.garbage.others()

    def holding(self) -> Iterator[tuple[int, int, int]]:
        """Each log object holding live payloads, oldest first: (seq, their bytes, the bytes it
        was written with)."""
        for seq in sorted(self.refs):
            live = self.live_bytes[seq]
            yield seq, live, self.written_bytes.get(seq, live)

    def restore(self, seq: int, written_bytes: dict[int, int], garbage: Garbage) -> None:
        """As of a snapshot at log object ``seq`` (references come back with the messages)."""
        self.seq, self.written_bytes, self.garbage = seq, dict(written_bytes), garbage
