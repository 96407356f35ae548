"""The queues the SQS endpoint knows: one small object per queue, beside the queues.

``<store>/.sqs/queues/<name>`` exists for every queue created with CreateQueue (``.sqs`` is not
a valid queue name, so it never collides with one) and names the queue's dead-letter target,
so ListQueues and ListDeadLetterSourceQueues need no queue opened. Entries are mirrored in
memory; a name not found there is looked up in the store before it is called unknown.
"""

from __future__ import annotations

import asyncio

import msgspec

from ...store import NotFound, Store, open_store, queue_url

PREFIX = "queues/"
CATALOG = ".sqs"
DELETE_CONCURRENCY = 16


class Entry(msgspec.Struct, frozen=True):
    """What the catalog records of a queue."""

    created: float
    dead_letter_target: str | None = None


class Catalog:
    """The SQS queues of one store. Used from the broker's event loop only."""

    def __init__(self, store: str, options: dict[str, object]) -> None:
        self.store_url = store
        self.options = options
        self._store: Store = open_store(queue_url(store, CATALOG), options)
        self._entries: dict[str, Entry] = {}
        self._loaded = False

    async def entries(self, refresh: bool = False) -> dict[str, Entry]:
        """Every queue, by name (read from the store on first use and when ``refresh``)."""
        if refresh or not self._loaded:
            keys = await self._store.keys(PREFIX)
            names = [k[len(PREFIX) :] for k in keys]
            found = await asyncio.gather(*(self._read(n) for n in names))
            self._entries = {n: e for n, e in zip(names, found, strict=True) if e is not None}
            self._loaded = True
        return self._entries

    async def get(self, name: str) -> Entry | None:
        entry = self._entries.get(name)
        if entry is None:
            entry = await self._read(name)
            if entry is not None:
                self._entries[name] = entry
        return entry

    async def put(self, name: str, entry: Entry) -> None:
        await self._store.put(PREFIX + name, msgspec.json.encode(entry))
        self._entries[name] = entry

    async def remove(self, name: str) -> None:
        self._entries.pop(name, None)
        await self._store.delete(PREFIX + name)

    def sources(self, target: str) -> list[str]:
        """The queues (known here) whose dead letters go to ``target``."""
        return sorted(n for n, e in self._entries.items() if e.dead_letter_target == target)

    async def _read(self, name: str) -> Entry | None:
        try:
            data = await self._store.get(PREFIX + name)
        except NotFound:
            return None
        try:
            return msgspec.json.decode(data, type=Entry)
        except msgspec.DecodeError:
            return None

    async def delete_objects(self, name: str) -> int:
        """Delete every object of queue ``name`` (it must be closed); how many."""
        store = open_store(queue_url(self.store_url, name), self.options)
        try:
            keys = await store.keys("")
            gate = asyncio.Semaphore(DELETE_CONCURRENCY)

            async def delete(key: str) -> None:
                async with gate:
                    await store.delete(key)

            await asyncio.gather(*(delete(k) for k in keys))
            return len(keys)
        finally:
            await store.close()

    async def close(self) -> None:
        await self._store.close()
