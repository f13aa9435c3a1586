"""``InMemoryWorkerStore``: the store contract in one process's memory, thread-safe.

Records live in dicts guarded by one lock; every intent runs whole under it,
so each is as atomic as the database store's transaction. Nothing survives
the process, so a runtime over this store runs in the same process.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from django_workers import clock, lifecycle
from django_workers.cancellation import CancelReason
from django_workers.exceptions import InvalidWorkflow
from django_workers.info import LIVE_STATUSES, TaskInfo, TaskStatus
from django_workers.lifecycle import TaskEnd
from django_workers.stores import rows
from django_workers.stores.base import (
    ANY_RUN,
    EndedCounts,
    NewTask,
    NewWorkflow,
    QueueCounts,
    RunId,
    Submitted,
    WorkerRegistration,
    WorkerStore,
    grants_of,
)
from django_workers.stores.zombies import Refused, end_each, log_refused, zombie_ends
from django_workers.workflows import persistence
from django_workers.workflows.machine import WORKFLOW_ENDS
from django_workers.workflows.records import WorkflowInfo, in_state, info_of


class InMemoryWorkerStore(WorkerStore):
    """Volatile records for tests, scripts and sites that want no persistence."""

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

    # -- submitting --

    def submit(self, new: NewTask, caller: str | None) -> Submitted:
        with self._lock:
            row = self._rows.get(new.id)
            if row is None:
                self._insert(new)
                return Submitted(new.id, new.run_id, created=True)
            rows.refuse_node_key(new.id, row["workflow"])
            grants = self._grants[new.id]
            joining = not rows.watches(new.id, caller, grants)
            if joining:
                rows.authorize_join(new.id, caller, grants, self.watch_authorizer)  # type: ignore[arg-type]
            if row["status"] in LIVE_STATUSES:
                if joining:
                    self.add_watcher(new.id, caller)  # type: ignore[arg-type]
                return Submitted(new.id, row["run_id"], created=False)
            old_run = row["run_id"]
            self.replace_task(new)
            return Submitted(new.id, new.run_id, created=True, replaced_run_id=old_run)

    def submit_many(self, news: Sequence[NewTask], caller: str | None) -> Sequence[Submitted]:
        with self._lock:
            # What the batch may touch, restored if a submit part-way is refused.
            saved = {n.id: (self._rows.get(n.id), list(self._grants.get(n.id, ()))) for n in news}
            try:
                return super().submit_many(news, caller)
            except BaseException:
                for task_id, (row, grants) in saved.items():
                    if row is None:
                        self._rows.pop(task_id, None)
                        self._grants.pop(task_id, None)
                    else:
                        self._rows[task_id], self._grants[task_id] = row, grants
                raise

    def replace_task(self, new: NewTask) -> None:
        with self._lock:
            self._insert(new)

    def _insert(self, new: NewTask) -> None:
        self._rows[new.id] = rows.row_of(new)
        self._grants[new.id] = grants_of(new)

    def add_watcher(self, task_id: str, user_id: str) -> bool:
        with self._lock:
            grants = self._grants.get(task_id)
            if grants is None or user_id in grants:
                return False
            grants.append(user_id)
            return True

    def submit_workflow(self, workflow: NewWorkflow, tasks: Sequence[NewTask]) -> str | None:
        with self._lock:
            found = self._flows.get(workflow.id)
            if found is not None:
                return str(found["plan_hash"])
            taken = [task.id for task in tasks if task.id in self._rows]
            if taken:
                raise InvalidWorkflow(
                    f"Task id {task_id!r} is taken by another task; a workflow's node ids are "
                    "its own. Choose another workflow id."
                    for task_id in taken
                )
            self._flows[workflow.id] = {
                "id": workflow.id,
                "key": workflow.key,
                "owner": workflow.owner,
                "plan_hash": workflow.plan_hash,
                "fail_fast": workflow.fail_fast,
                "undo_on_cancel": workflow.undo_on_cancel,
                "created_at": workflow.created_at,
                "finished_at": None,
                **copy.deepcopy(dict(workflow.state)),
            }
            for task in tasks:
                self._insert(task)
        self.notify_enqueued({task.queue for task in tasks})
        return None

    # -- reading --

    def get_task_info(self, task_id: str) -> TaskInfo | None:
        with self._lock:
            row = self._rows.get(task_id)
            return None if row is None else self._info(row)

    def _info(self, row: dict[str, Any]) -> TaskInfo:
        return rows.info_of(copy.deepcopy(row), list(self._grants[row["id"]]))

    def list_tasks(
        self,
        *,
        user_id: str | None,
        status: TaskStatus | None = None,
        queue: str | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> list[TaskInfo]:
        with self._lock:
            found = [
                row
                for row in self._rows.values()
                if (user_id is None or rows.watches(row["id"], user_id, self._grants[row["id"]]))
                and (status is None or row["status"] == status)
                and (queue is None or row["queue"] == queue)
            ]
            found.sort(key=lambda r: (r["created_at"], r["id"]), reverse=True)
            return [self._info(row) for row in found[offset : offset + limit]]

    def get_workflow(self, workflow_id: str) -> WorkflowInfo | None:
        with self._lock:
            row = self._flows.get(workflow_id)
            return None if row is None else self._workflow_info(row)

    def list_workflows(
        self,
        *,
        user_id: str | None,
        state: str | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> list[WorkflowInfo]:
        with self._lock:
            found = [
                row
                for row in self._flows.values()
                if (user_id is None or row["owner"] == user_id)
                and (state is None or in_state(row, state))
            ]
            found.sort(key=lambda r: (r["created_at"], r["id"]), reverse=True)
            return [self._workflow_info(row) for row in found[offset : offset + limit]]

    def _workflow_info(self, row: dict[str, Any]) -> WorkflowInfo:
        records = {
            task_id: rows.node_record(record)
            for task_id, record in self._rows.items()
            if record["workflow"] == row["id"]
        }
        return info_of(copy.deepcopy(row), records)

    # -- state changes --

    def try_transition(
        self,
        task_id: str,
        run_id: RunId,
        from_states: Iterable[TaskStatus],
        to_state: TaskStatus,
        *,
        claimed_by: str | None = None,
        **fields: Any,
    ) -> bool:
        rows.check_state_fields(fields, transition=True, to_state=to_state)
        with self._lock:
            row = self._rows.get(task_id)
            if row is None or row["status"] not in set(from_states):
                return False
            if run_id is not ANY_RUN and row["run_id"] != run_id:
                return False
            if claimed_by is not None and row["worker_id"] != claimed_by:
                return False
            row.update(fields, status=to_state)
            return True

    def set_task_state(self, task_id: str, run_id: RunId, **fields: Any) -> bool:
        rows.check_state_fields(fields)
        with self._lock:
            row = self._rows.get(task_id)
            if row is None or (run_id is not ANY_RUN and row["run_id"] != run_id):
                return False
            row.update(fields)
            return True

    # -- the runtime's questions --

    def claim(
        self,
        worker_id: str,
        queues: Sequence[str] | None,
        limit: int,
        now: datetime,
        queue_limits: Mapping[str, int] | None = None,
    ) -> list[TaskInfo]:
        with self._lock:
            free = self._free_slots(queue_limits or {})
            ready = sorted(
                (
                    row
                    for row in self._rows.values()
                    if row["status"] == TaskStatus.PENDING
                    and (not queues or row["queue"] in queues)
                    and (row["run_after"] is None or row["run_after"] <= now)
                ),
                key=rows.claim_order,
            )
            claimed: list[TaskInfo] = []
            for row in ready:
                if len(claimed) >= limit:
                    break
                if row["queue"] in free:
                    if free[row["queue"]] <= 0:
                        continue
                    free[row["queue"]] -= 1
                row.update(
                    status=TaskStatus.RUNNING,
                    worker_id=worker_id,
                    started_at=row["started_at"] or max(now, row["created_at"]),
                    attempts=row["attempts"] + 1,
                )
                claimed.append(self._info(row))
            return claimed

    def _free_slots(self, queue_limits: Mapping[str, int]) -> dict[str, int]:
        free = dict(queue_limits)
        running = [r["queue"] for r in self._rows.values() if r["status"] == TaskStatus.RUNNING]
        for queue in running + [queue for queue, _worker in self._held.values()]:
            if queue in free:
                free[queue] -= 1
        return free

    def end_tasks(self, ends: Sequence[TaskEnd]) -> list[bool]:
        book = _Book(self)
        with self._lock:
            won = [self._end(end) for end in ends]
            if persistence.workflows_of(ends):
                winners = [e for e, ok in zip(ends, won, strict=True) if ok]
                persistence.react(book, winners, clock.now())
        book.wake()
        return won

    def cancel_workflow(
        self, workflow_id: str, undo: bool | None, drop_undo: bool = False
    ) -> bool | None:
        book = _Book(self)
        with self._lock:
            cancelled = persistence.cancel(book, workflow_id, undo, clock.now(), drop_undo)
        book.wake()
        return cancelled

    def begin_runs(self, runs: Sequence[TaskInfo]) -> list[bool]:
        with self._lock:
            found = _Book(self).node_records([info.id for info in runs])
        allowed, refusals = persistence.pre_run(runs, {r["id"]: r for r in found}, clock.now())
        if refusals:
            self.end_tasks(refusals)
        return allowed

    def _end(self, end: TaskEnd) -> bool:
        row = self._rows.get(end.task_id)
        if (
            row is None
            or row["status"] not in end.from_statuses
            or row["run_id"] != end.run_id
            or (end.worker_id is not None and row["worker_id"] != end.worker_id)
        ):
            if end.kind in lifecycle.RETURNED:
                self._release_slot(end)
            return False
        if end.holds_slot and row["status"] == TaskStatus.RUNNING:
            self._held.setdefault(end.run_id, (row["queue"], row["worker_id"]))
        row.update(lifecycle.fields_of(end))
        row["attempts"] += lifecycle.attempts_delta(end)
        return True

    def _release_slot(self, end: TaskEnd) -> None:
        held = self._held.get(end.run_id)
        if held is not None and held[1] == end.worker_id:
            del self._held[end.run_id]

    def runs_claimed_by(self, worker_id: str) -> list[TaskInfo]:
        with self._lock:
            return [
                self._info(row)
                for row in self._rows.values()
                if row["status"] == TaskStatus.RUNNING and row["worker_id"] == worker_id
            ]

    def runs_to_stop(self, worker_id: str, runs: Mapping[str, str]) -> dict[str, CancelReason]:
        with self._lock:
            return {
                task_id: reason
                for task_id, run_id in runs.items()
                if (reason := rows.stop_reason(self._rows.get(task_id), worker_id, run_id))
            }

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

    def queue_counts(self) -> list[QueueCounts]:
        found: dict[str, dict[str, Any]] = {}
        with self._lock:
            for row in self._rows.values():
                if row["status"] in (TaskStatus.PENDING, TaskStatus.RUNNING):
                    rows.add_queue_count(
                        found,
                        row["queue"],
                        row["status"],
                        row["worker_id"],
                        1,
                        row["created_at"],
                        int(row["attempts"] >= 1),
                    )
            for queue, _worker in self._held.values():
                rows.queue_fields(found, queue)["held_slots"] += 1
        return [QueueCounts(**found[name]) for name in sorted(found)]

    def ended_counts(self, since: Sequence[datetime]) -> list[EndedCounts]:
        found: dict[str, dict[str, list[int]]] = {}
        with self._lock:
            for row in self._rows.values():
                if row["status"] in (TaskStatus.COMPLETED, TaskStatus.FAILED):
                    ended = row["finished_at"]
                    counts = [int(ended is not None and ended >= s) for s in since]
                    if any(counts):
                        rows.add_ended_count(found, row["queue"], row["status"], counts)
        return [
            EndedCounts(queue=name, completed=tuple(f["completed"]), failed=tuple(f["failed"]))
            for name, f in sorted(found.items())
        ]

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


class _Book:
    """The row operations the workflow routine runs under this store's lock."""

    def __init__(self, store: InMemoryWorkerStore) -> None:
        self.store = store
        self.queues: set[str] = set()

    def lock_workflows(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        found = (self.store._flows.get(workflow_id) for workflow_id in ids)
        return {row["id"]: copy.deepcopy(row) for row in found if row is not None}

    def save_workflow(self, workflow_id: str, fields: Mapping[str, Any]) -> None:
        self.store._flows[workflow_id].update(copy.deepcopy(dict(fields)))

    def node_records(self, task_ids: Sequence[str]) -> list[dict[str, Any]]:
        found = (self.store._rows.get(task_id) for task_id in task_ids)
        return [{c: row[c] for c in persistence.RECORD_COLUMNS} for row in found if row]

    def write_ends(self, ends: Sequence[TaskEnd]) -> list[bool]:
        return [self.store._end(end) for end in ends]

    def promote(self, task_ids: Sequence[str]) -> None:
        for task_id in task_ids:
            row = self.store._rows.get(task_id)
            if row is not None and row["status"] == TaskStatus.WAITING:
                row["status"] = TaskStatus.PENDING
                self.queues.add(row["queue"])

    def add_tasks(self, news: Sequence[NewTask]) -> None:
        for new in news:
            self.store._insert(new)
            self.queues.add(new.queue)

    def request_stop(self, task_ids: Sequence[str], reason: CancelReason) -> None:
        for task_id in task_ids:
            row = self.store._rows.get(task_id)
            # A node waiting for its retry (PENDING again) is refused when claimed.
            if row is None or row["status"] not in (TaskStatus.RUNNING, TaskStatus.PENDING):
                continue
            if row["cancel_reason"] == CancelReason.NONE:
                row["cancel_reason"] = reason

    def wake(self) -> None:
        """Wake this process's idle workers for what became PENDING (after the lock)."""
        if self.queues:
            self.store.notify_enqueued(self.queues)
