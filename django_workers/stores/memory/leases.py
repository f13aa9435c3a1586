"""Worker leases and the zombie sweep: the recovery role of the memory store."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime

from django_workers.info import TaskStatus
from django_workers.lifecycle import TaskEnd
from django_workers.stores.base import WorkerRegistration
from django_workers.stores.memory.state import MemoryState
from django_workers.stores.zombies import Refused, end_each, log_refused, zombie_ends


class MemoryLeases(MemoryState):
    """Lease entries renewed by heartbeats; the runs of dead workers ended or requeued."""

    def register_worker(self, worker: WorkerRegistration) -> None:
        with self._lock:
            self._workers[worker.id] = worker

    def heartbeat(self, worker_id: str, now: datetime) -> bool:
        with self._lock:
            worker = self._workers.get(worker_id)
            if worker is None:
                return False
            self._workers[worker_id] = replace(worker, heartbeat_at=now)
            return True

    def remove_worker(self, worker_id: str) -> None:
        with self._lock:
            self._workers.pop(worker_id, None)

    def record_wake_up(self, worker_id: str, wake_up: str) -> bool:
        with self._lock:
            worker = self._workers.get(worker_id)
            if worker is None:
                return False
            self._workers[worker_id] = replace(worker, wake_up=wake_up)
            return True

    def list_workers(self) -> list[WorkerRegistration]:
        with self._lock:
            held = [worker for _queue, worker in self._held.values()]
            return [
                replace(w, held_slots=held.count(w.id))
                for w in sorted(self._workers.values(), key=lambda w: w.started_at)
            ]

    def recover_zombies(
        self,
        *,
        now: datetime,
        stale_before: datetime | None,
        dead: Iterable[str] = (),
        refused: Refused = log_refused,
    ) -> list[TaskEnd]:
        with self._lock:
            for worker_id in set(dead):
                self._workers.pop(worker_id, None)
            for worker in list(self._workers.values()):
                if stale_before is not None and worker.heartbeat_at < stale_before:
                    del self._workers[worker.id]
            for run_id, (_queue, worker_id) in list(self._held.items()):
                if worker_id not in self._workers:
                    del self._held[run_id]
            found = [
                row
                for row in self._rows.values()
                if row["status"] == TaskStatus.RUNNING and row["worker_id"] not in self._workers
            ]
            ends = zombie_ends(found, now, refused)
            # One by one: nothing here rolls back, and one end that fails stops no other.
            won = end_each(self.end_tasks, ends, refused)
            return [end for end, ok in zip(ends, won, strict=True) if ok]
