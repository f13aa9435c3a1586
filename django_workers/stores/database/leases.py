"""Worker leases and the zombie sweep: the recovery role of ``DatabaseWorkerStore``."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from django.db import connections
from django.db.models import Count, Q
from django.utils import timezone

from django_workers.bounds import HOST_MAX_LENGTH, fit
from django_workers.info import TaskStatus
from django_workers.lifecycle import TaskEnd
from django_workers.stores.base import WorkerRegistration
from django_workers.stores.database.access import DatabaseAccess, _one_writer
from django_workers.stores.zombies import UNREACHABLE, Refused, end_each, log_refused, zombie_ends

#: The database server's clock, per vendor (UTC); SQLite has none but this process's.
_NOW_SQL = {
    "postgresql": "SELECT statement_timestamp()",
    "mysql": "SELECT UTC_TIMESTAMP(6)",
}


class DatabaseLeases(DatabaseAccess):
    """Lease rows renewed by heartbeats; the runs of dead workers ended or requeued."""

    @_one_writer
    def register_worker(self, worker: WorkerRegistration) -> None:
        self._workers().update_or_create(
            id=worker.id,
            defaults={
                "host": fit(worker.host, HOST_MAX_LENGTH),
                "pid": worker.pid,
                "queues": list(worker.queues),
                "concurrency": worker.concurrency,
                "started_at": worker.started_at,
                "heartbeat_at": worker.heartbeat_at,
                "wake_up": worker.wake_up[:200],
            },
        )

    @_one_writer
    def heartbeat(self, worker_id: str, now: datetime) -> bool:
        return self._workers().filter(pk=worker_id).update(heartbeat_at=now) == 1

    @_one_writer
    def remove_worker(self, worker_id: str) -> None:
        self._workers().filter(pk=worker_id).delete()

    @_one_writer
    def record_wake_up(self, worker_id: str, wake_up: str) -> bool:
        return self._workers().filter(pk=worker_id).update(wake_up=wake_up[:200]) == 1

    def list_workers(self) -> list[WorkerRegistration]:
        held = dict(
            self._slots()
            .values("worker_id")
            .annotate(n=Count("run_id"))
            .values_list("worker_id", "n")
        )
        return [
            WorkerRegistration(
                id=w.id,
                host=w.host,
                pid=w.pid,
                queues=tuple(w.queues),
                concurrency=w.concurrency,
                started_at=w.started_at,
                heartbeat_at=w.heartbeat_at,
                held_slots=held.get(w.id, 0),
                wake_up=w.wake_up,
            )
            for w in self._workers().order_by("started_at")
        ]

    @_one_writer
    def recover_zombies(
        self,
        *,
        now: datetime,
        stale_before: datetime | None,
        dead: Iterable[str] = (),
        refused: Refused = log_refused,
    ) -> list[TaskEnd]:
        try:
            with self._atomic():
                ends = self._zombie_ends(stale_before, dead, now, refused)
                won = self.end_tasks(ends)
        except UNREACHABLE:
            raise
        except Exception:
            # An end refused: all rolled back. Again, each end in its own transaction, so
            # one record that cannot be ended stops the recovery of no other.
            with self._atomic():
                ends = self._zombie_ends(stale_before, dead, now, lambda _id, _error: None)
            won = end_each(self.end_tasks, ends, refused)
        return [end for end, ok in zip(ends, won, strict=True) if ok]

    def _zombie_ends(
        self,
        stale_before: datetime | None,
        dead: Iterable[str],
        now: datetime,
        refused: Refused,
    ) -> list[TaskEnd]:
        """Forget dead workers and their slots; the ends of the runs they left RUNNING."""
        expired = Q(pk__in=list(dead))
        if stale_before is not None:
            expired |= Q(heartbeat_at__lt=stale_before)
        self._workers().filter(expired).delete()
        live = self._workers().values("id")
        self._slots().exclude(worker_id__in=live).delete()
        zombies = (
            self._records()
            .filter(status=TaskStatus.RUNNING)
            .exclude(worker_id__in=live)
            .values(
                "id",
                "run_id",
                "worker_id",
                "queue",
                "attempts",
                "options",
                "errors",
                "workflow",
                "node",
            )
        )
        return zombie_ends(zombies, now, refused)

    def database_now(self) -> datetime | None:
        connection = connections[self.using]
        query = _NOW_SQL.get(connection.vendor)
        if query is None:
            return None  # SQLite: the database's clock is this process's clock
        with connection.cursor() as cursor:
            cursor.execute(query)
            value: datetime = cursor.fetchone()[0]
        if timezone.is_naive(value):
            value = value.replace(tzinfo=UTC)
        return value
