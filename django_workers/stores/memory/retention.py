"""Forgetting what ended long ago, and the listeners woken on enqueue, in the memory store."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from django_workers.engine.machine import WORKFLOW_ENDS
from django_workers.info import TaskStatus
from django_workers.stores.memory.state import MemoryState


class MemoryRetention(MemoryState):
    """Deletes what ended before a time; wakes this process's listeners on enqueue."""

    def _finished_before(self, status: TaskStatus, before: datetime) -> list[str]:
        return [
            task_id
            for task_id, row in self._rows.items()
            if row["status"] == status
            and row["workflow"] is None
            and row["finished_at"] is not None
            and row["finished_at"] < before
        ]

    def _workflows_finished_before(self, before: datetime) -> list[str]:
        return [
            workflow_id
            for workflow_id, row in self._flows.items()
            if row["state"] in WORKFLOW_ENDS
            and row["finished_at"] is not None
            and row["finished_at"] < before
        ]

    def delete_finished_workflows(self, before: datetime, batch: int) -> int:
        with self._lock:
            doomed = set(self._workflows_finished_before(before)[:batch])
            for task_id in [t for t, row in self._rows.items() if row["workflow"] in doomed]:
                del self._rows[task_id]
                del self._grants[task_id]
            for workflow_id in doomed:
                del self._flows[workflow_id]
            return len(doomed)

    def count_finished_workflows(self, before: datetime) -> int:
        with self._lock:
            return len(self._workflows_finished_before(before))

    def count_finished(self, status: TaskStatus, before: datetime) -> int:
        with self._lock:
            return len(self._finished_before(status, before))

    def delete_finished(self, status: TaskStatus, before: datetime, batch: int) -> int:
        with self._lock:
            found = self._finished_before(status, before)
            found.sort(key=lambda task_id: self._rows[task_id]["finished_at"])
            doomed = found[:batch]
            for task_id in doomed:
                del self._rows[task_id]
                del self._grants[task_id]
            return len(doomed)

    def subscribe(self, wake: Callable[[], None]) -> None:
        with self._lock:
            self._listeners.append(wake)

    def notify_enqueued(self, queues: Iterable[str]) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for wake in listeners:
            wake()

    def clear_records(self) -> None:
        with self._lock:
            self._rows.clear()
            self._grants.clear()
            self._workers.clear()
            self._held.clear()
            self._flows.clear()
