"""What the operators' ``manage.py workers`` command does, on any store, as ``System()``.

Each function answers one subcommand with plain data; the command parses its
arguments and prints. Reads and writes go through the public API or the
store's named methods, never around them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django_workers import clock
from django_workers.api import get_task_status
from django_workers.authority import Authority, Owner, System, owner_of
from django_workers.backends import BACKEND_OPTION
from django_workers.conf import queue_limits, workers_settings
from django_workers.exceptions import AuthorizationError, InvalidTaskOptions, TaskNotRetryable
from django_workers.info import TERMINAL_STATUSES, TaskInfo, TaskStatus
from django_workers.stores import QueueCounts, WorkerStore
from django_workers.stores.base import WorkerRegistration
from django_workers.submission import TaskSubmission, build_task, write_tasks

#: Statuses ``retry`` re-runs without being asked for more.
RETRYABLE = (TaskStatus.FAILED, TaskStatus.CANCELLED)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerState:
    """One registered runtime as an operator sees it."""

    worker: WorkerRegistration
    heartbeat_age: float
    running: int
    #: Silent for longer than LEASE_TIMEOUT: the next zombie sweep will declare it dead.
    stale: bool


#: The windows of recent ends an operator sees, in seconds: the last 5 minutes, the last hour.
ENDED_WINDOWS = (300, 3600)


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueState:
    """One queue's live tasks, its recent ends, and the live workers that take its tasks."""

    queue: str
    pending: int
    #: PENDING records that ran before: a retry, or a recovered run waiting to run again.
    retrying: int
    running: int
    #: Runs whose record ended while their function still executes: they count as running.
    held_slots: int
    oldest_pending_age: float | None
    #: Records that ended COMPLETED, and FAILED, in the last 5 minutes and the last hour.
    completed_5m: int
    completed_1h: int
    failed_5m: int
    failed_1h: int
    #: The queue's concurrency limit across all workers (``QUEUES``); None: no limit.
    limit: int | None
    #: The live workers that take this queue's tasks.
    workers: tuple[WorkerRegistration, ...]

    @property
    def served(self) -> bool:
        """A live worker takes this queue's tasks."""
        return bool(self.workers)

    @property
    def unserved(self) -> bool:
        """Tasks wait here and no live worker serves this queue."""
        return self.pending > 0 and not self.served

    def to_json(self) -> dict[str, Any]:
        """The figures as ``workers status --json`` and the admin's queues page give them."""
        age = self.oldest_pending_age
        return {
            "queue": self.queue,
            "pending": self.pending,
            "retrying": self.retrying,
            "running": self.running,
            "held_slots": self.held_slots,
            "oldest_pending_age": None if age is None else round(age, 3),
            "completed_5m": self.completed_5m,
            "completed_1h": self.completed_1h,
            "failed_5m": self.failed_5m,
            "failed_1h": self.failed_1h,
            "limit": self.limit,
            "workers": [w.id for w in self.workers],
            "served": self.served,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Status:
    """What ``workers status``, the admin's queues page and the metrics show, at one instant."""

    now: datetime
    lease_timeout: float
    workers: list[WorkerState]
    queues: list[QueueState]


def status(store: WorkerStore) -> Status:
    """Read the registered workers, every queue's live counts and its recent ends.

    A fixed number of queries, whatever the tables hold: the live records by
    queue, the held slots by queue, the records ended in the last hour (through
    the index of finished records), the workers and their held slots, and on
    PostgreSQL and MySQL the database's clock.
    """
    now = store.database_now() or clock.now()
    lease = float(workers_settings.LEASE_TIMEOUT)
    counts = store.queue_counts()
    ended = {
        e.queue: e for e in store.ended_counts([now - timedelta(seconds=s) for s in ENDED_WINDOWS])
    }
    running: dict[str, int] = {}
    for queue in counts:
        for worker_id, n in queue.running_by_worker.items():
            running[worker_id] = running.get(worker_id, 0) + n
    workers = [
        WorkerState(
            worker=w,
            heartbeat_age=_age(now, w.heartbeat_at),
            running=running.get(w.id, 0),
            stale=_age(now, w.heartbeat_at) > lease,
        )
        for w in store.list_workers()
    ]
    live = [w.worker for w in workers if not w.stale]
    by_name = {q.queue: q for q in counts}
    limits = queue_limits()
    names = sorted({*by_name, *ended, *limits, *(q for w in live for q in w.queues)})
    queues = []
    for name in names:
        q = by_name.get(name) or QueueCounts(queue=name)
        e = ended.get(name)
        completed = e.completed if e else (0,) * len(ENDED_WINDOWS)
        failed = e.failed if e else (0,) * len(ENDED_WINDOWS)
        queues.append(
            QueueState(
                queue=name,
                pending=q.pending,
                retrying=q.retrying,
                running=q.running,
                held_slots=q.held_slots,
                oldest_pending_age=_age(now, q.oldest_pending) if q.oldest_pending else None,
                completed_5m=completed[0],
                completed_1h=completed[1],
                failed_5m=failed[0],
                failed_1h=failed[1],
                limit=limits.get(name),
                workers=tuple(w for w in live if not w.queues or name in w.queues),
            )
        )
    return Status(now=now, lease_timeout=lease, workers=workers, queues=queues)


def _age(now: datetime, then: datetime) -> float:
    return max(0.0, (now - then).total_seconds())


# -- retry ---------------------------------------------------------------------------------


def retry_authority(info: TaskInfo) -> Authority:
    """The authority a re-run of ``info`` is submitted with: its owner, else System."""
    return owner_of(info.id) or System()


def retry(
    task_id: str, *, allow_completed: bool = False, store: WorkerStore
) -> tuple[TaskInfo, str]:
    """Re-run a FAILED or CANCELLED task under its own id; return (the old snapshot, new run id).

    The re-run is an ordinary submit of the same key, task, arguments, queue,
    priority, options and scope by the task's owner (System for a global id), so
    the store replaces the finished record; its watchers keep their access.
    A PENDING or RUNNING task is refused (it would only be joined), and a
    COMPLETED one unless ``allow_completed``. Raises TaskNotFound for no such id.
    """
    info = get_task_status(task_id, System(), store=store)
    allowed = RETRYABLE + ((TaskStatus.COMPLETED,) if allow_completed else ())
    if info.status not in allowed:
        raise TaskNotRetryable(info.id, info.status)
    authority = retry_authority(info)
    owner = authority if isinstance(authority, Owner) else None
    spec = TaskSubmission(
        key=info.key,
        task=info.task_path,
        args=info.args,
        kwargs=info.kwargs,
        scope="user" if owner is not None else "global",
        watchers=[Owner(w) for w in info.watchers if owner is None or w != owner.user_id],
        queue=info.queue,
        priority=info.priority,
        options=info.options,
    )
    new = build_task(spec, authority, store)
    if info.backend is not None:
        # Enqueued through django.tasks: keep the alias so get_result() still reads it.
        new = replace(new, options={**new.options, BACKEND_OPTION: info.backend})
    [submitted] = write_tasks([new], authority, store)
    if not submitted.created:
        # The record went live again between our read and the submit: it was joined.
        raise TaskNotRetryable(task_id, get_task_status(task_id, System(), store=store).status)
    return info, submitted.run_id


def retry_as(task_id: str, authority: Authority, *, store: WorkerStore) -> tuple[TaskInfo, str]:
    """Re-run a FAILED or CANCELLED task for ``authority``, as ``retry`` does.

    ``System()`` may re-run any task; an ``Owner`` only a task it owns (a
    watcher may read and cancel a task, not run it again). Raises TaskNotFound
    for a task ``authority`` may not see, AuthorizationError for one it sees
    but does not own, and TaskNotRetryable for one that has not ended.
    """
    info = get_task_status(task_id, authority, store=store)
    if isinstance(authority, Owner) and info.owner != authority.user_id:
        raise AuthorizationError(
            f"Only the owner of task {info.id!r} may run it again, or a user holding "
            "django_workers.manage_all_tasks; ask them, or submit a task of your own."
        )
    return retry(info.id, store=store)


# -- purge ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PurgeLine:
    """Finished tasks of one status older than ``before``: counted, or deleted."""

    status: TaskStatus
    before: datetime
    count: int


def purge_plan(
    statuses: Sequence[TaskStatus] | None, older_than: float | None
) -> list[tuple[TaskStatus, datetime]]:
    """Which statuses to purge and the finish time before which each goes.

    Without ``older_than``, each status's RETENTION age applies and statuses
    kept forever (None) are left out: the retention rules, run by hand.
    """
    now = clock.now()
    chosen = list(statuses) if statuses else sorted(TERMINAL_STATUSES)
    for status_ in chosen:
        if status_ not in TERMINAL_STATUSES:
            raise InvalidTaskOptions(
                f"Only finished tasks can be purged (COMPLETED, FAILED, CANCELLED), "
                f"got {status_}; cancel live tasks first."
            )
    plan = []
    for status_ in chosen:
        seconds = older_than if older_than is not None else _retention(status_)
        if seconds is not None:
            plan.append((status_, now - timedelta(seconds=seconds)))
    return plan


def _retention(status_: TaskStatus) -> float | None:
    seconds = (workers_settings.RETENTION or {}).get(str(status_))
    return None if seconds is None else float(seconds)


def count_purgeable(
    plan: Iterable[tuple[TaskStatus, datetime]], *, store: WorkerStore
) -> list[PurgeLine]:
    """How many records each line of ``plan`` would delete (the dry run)."""
    return [
        PurgeLine(status=s, before=before, count=store.count_finished(s, before))
        for s, before in plan
    ]


def purge(
    plan: Iterable[tuple[TaskStatus, datetime]], *, store: WorkerStore, batch: int | None = None
) -> list[PurgeLine]:
    """Delete every record ``plan`` names, in batches of CLEANUP_BATCH; return the counts."""
    size = batch or int(workers_settings.CLEANUP_BATCH)
    done = []
    for s, before in plan:
        deleted = 0
        while True:
            n = store.delete_finished(s, before, size)
            deleted += n
            if n < size:
                break
        done.append(PurgeLine(status=s, before=before, count=deleted))
    return done
