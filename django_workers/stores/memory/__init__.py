"""``InMemoryWorkerStore``: the store contract in one process's memory, thread-safe.

Records live in dicts guarded by one lock; every intent runs whole under it,
so each is as atomic as the database store's transaction. Nothing survives
the process, so a runtime over this store runs in the same process.

One module per role, as in the database store: ``records``, ``reads``,
``queue``, ``leases`` and ``retention`` (with the enqueue listeners), all
standing on ``state``.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from django_workers.stores.memory.leases import MemoryLeases
from django_workers.stores.memory.queue import MemoryRunQueue
from django_workers.stores.memory.reads import MemoryReads
from django_workers.stores.memory.records import MemoryRecords
from django_workers.stores.memory.retention import MemoryRetention

__all__ = ["InMemoryWorkerStore"]


class InMemoryWorkerStore(
    MemoryRecords,
    MemoryReads,
    MemoryRunQueue,
    MemoryLeases,
    MemoryRetention,
):
    """Volatile records for tests, scripts and sites that want no persistence."""

    # No LISTEN/NOTIFY in one process's memory (enqueue listeners wake runtimes): stated
    # here, where the Notification protocol's defaults would leave the class abstract.
    def listening_connection(self) -> AbstractContextManager[Any]:
        raise NotImplementedError(f"{type(self).__name__} has no LISTEN connection")

    def send_notice(self, channel: str, payload: str) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no NOTIFY")
