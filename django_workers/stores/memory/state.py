"""The memory store's rows, lock and listeners: what every role of it stands on."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any, cast

from django_workers.core import TaskRow
from django_workers.info import TaskInfo
from django_workers.stores import rows
from django_workers.stores.base import NewTask, WorkerRegistration, WorkerStore, grants_of


class MemoryState(WorkerStore):
    """Volatile rows in dicts guarded by one lock; each role's intent runs whole under it."""

    durable = False

    def __init__(self, **policy: Any) -> None:
        super().__init__(**policy)
        self._lock = threading.RLock()
        self._rows: dict[str, dict[str, Any]] = {}
        self._grants: dict[str, list[str]] = {}
        self._workers: dict[str, WorkerRegistration] = {}
        # Held slots: run id -> (queue, worker id) of a function that outlived its record.
        self._held: dict[str, tuple[str, str]] = {}
        self._listeners: list[Callable[[], None]] = []
        self._flows: dict[str, dict[str, Any]] = {}

    def _insert(self, new: NewTask) -> None:
        self._rows[new.id] = rows.row_of(new)
        self._grants[new.id] = grants_of(new)

    def _info(self, row: dict[str, Any]) -> TaskInfo:
        # The memory store keeps each record as the columns ``rows.row_of`` gives: a task row.
        return rows.info_of(cast(TaskRow, copy.deepcopy(row)), list(self._grants[row["id"]]))
