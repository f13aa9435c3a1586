"""The run queue role of the memory store: claims, ends and workflows' reactions."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from django_workers import clock, lifecycle
from django_workers.cancellation import CancelReason
from django_workers.conf import served_fair
from django_workers.core import LiveNodeRow, WorkflowRow, new_run_id
from django_workers.engine import persistence
from django_workers.engine.machine import InvalidEvent
from django_workers.engine.persistence import NodeRecords, WorkflowWrites
from django_workers.info import TERMINAL_STATUSES, TaskInfo, TaskStatus
from django_workers.lifecycle import TaskEnd
from django_workers.stores import rows
from django_workers.stores.fairness import fair_pick, merged
from django_workers.stores.memory.state import MemoryState
from django_workers.stores.workflow_writes import answered


class MemoryRunQueue(MemoryState):
    """Claims and fenced ends under the lock; a workflow's reactions written by ``_Reactions``."""

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
            fair = served_fair(queues)
            if fair:
                ready = self._fair_order(ready, fair, limit)
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

    def _fair_order(
        self, ready: list[dict[str, Any]], fair: Mapping[str, int | None], limit: int
    ) -> list[Any]:
        """``ready`` (in claim order) with each fair queue's rows in their turns instead."""
        plain = [row for row in ready if row["queue"] not in fair]
        picks = []
        for queue, per_owner in fair.items():
            running: dict[str | None, int] = {}
            for row in self._rows.values():
                if row["status"] == TaskStatus.RUNNING and row["queue"] == queue:
                    running[row["owner"]] = running.get(row["owner"], 0) + 1
            candidates = [row for row in ready if row["queue"] == queue]
            picks.append(fair_pick(candidates, running, limit, per_owner))
        return merged(plain, picks)

    def _free_slots(self, queue_limits: Mapping[str, int]) -> dict[str, int]:
        free = dict(queue_limits)
        running = [r["queue"] for r in self._rows.values() if r["status"] == TaskStatus.RUNNING]
        for queue in running + [queue for queue, _worker in self._held.values()]:
            if queue in free:
                free[queue] -= 1
        return free

    def end_tasks(self, ends: Sequence[TaskEnd]) -> list[bool]:
        reactions = _Reactions(self)
        with self._lock:
            won = [self._end(end) for end in ends]
            if flows := persistence.workflows_of(ends):
                winners = [e for e, ok in zip(ends, won, strict=True) if ok]
                rows_by_id = reactions.rows(flows)
                now = clock.now()
                reactions.write(
                    lambda records: persistence.react(rows_by_id, winners, now, records)
                )
        reactions.wake()
        return won

    def cancel_workflow(
        self,
        workflow_id: str,
        undo: bool | None,
        drop_undo: bool = False,
        reason: CancelReason = CancelReason.USER,
        now: datetime | None = None,
    ) -> bool | None:
        reactions = _Reactions(self)
        with self._lock:
            at = now or clock.now()
            row = reactions.rows([workflow_id]).get(workflow_id)
            if row is None:
                return None
            answer = reactions.write(
                lambda records: persistence.cancel(row, undo, at, drop_undo, reason, records)
            )
            if answer is None:
                return False
        reactions.wake()
        return True

    def rerun_workflow(self, workflow_id: str, plan_hash: str | None) -> bool | None:
        reactions = _Reactions(self)
        with self._lock:
            row = reactions.rows([workflow_id]).get(workflow_id)
            if row is None:
                return None
            writes = persistence.rerun(row, plan_hash, clock.now())
            reactions.write(lambda _records: writes)
        reactions.wake()
        return True

    def overdue_workflows(self, now: datetime, limit: int) -> list[str]:
        with self._lock:
            overdue = [
                (row["deadline_at"], row["id"])
                for row in self._flows.values()
                if row["state"] == "running"
                and row["cancel_undo"] is None
                and row.get("deadline_at") is not None
                and row["deadline_at"] <= now
            ]
        return [workflow_id for _at, workflow_id in sorted(overdue)[:limit]]

    def begin_runs(self, runs: Sequence[TaskInfo]) -> list[bool]:
        with self._lock:
            found = self._node_records([info.id for info in runs])
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

    def _node_records(self, task_ids: Sequence[str]) -> list[LiveNodeRow]:
        """The ``RECORD_COLUMNS`` of these task records (those that exist)."""
        found = (self._rows.get(task_id) for task_id in task_ids)
        return [
            cast(LiveNodeRow, {c: row[c] for c in persistence.RECORD_COLUMNS})
            for row in found
            if row
        ]


class _Reactions:
    """The engine's answers written under this store's lock, and the queues they fill."""

    def __init__(self, store: MemoryRunQueue) -> None:
        self.store = store
        self.queues: set[str] = set()

    def rows(self, ids: Sequence[str]) -> dict[str, WorkflowRow]:
        """Copies of these workflows' rows (those that exist), by id."""
        found = (self.store._flows.get(workflow_id) for workflow_id in ids)
        return {
            row["id"]: cast(WorkflowRow, copy.deepcopy(row)) for row in found if row is not None
        }

    def write(self, ask: Callable[[NodeRecords], WorkflowWrites | None]) -> WorkflowWrites | None:
        """Ask the engine until its answer is whole, and write it; None if it answers None."""
        store = self.store
        writes = answered(ask, store._node_records, self._refuse)
        if writes is None:
            return None
        if writes.resets and self._reset(writes.resets) != len(writes.resets):
            # A node's record did not end with its workflow: a store's mistake, never a user's.
            raise InvalidEvent("A workflow to re-run has a node record still live.")
        for new in writes.undos:
            store._insert(new)
            self.queues.add(new.queue)
        for task_id, reason in writes.stops:
            row = store._rows.get(task_id)
            # A node waiting for its retry (PENDING again) is refused when claimed.
            if row is None or row["status"] not in (TaskStatus.RUNNING, TaskStatus.PENDING):
                continue
            if row["cancel_reason"] == CancelReason.NONE:
                row["cancel_reason"] = reason
        for save in writes.saves:
            self._promote(save.promote)
            store._flows[save.workflow_id].update(copy.deepcopy(dict(save.columns)))
        return writes

    def _refuse(self, ends: Sequence[TaskEnd]) -> list[bool]:
        # Through the store's end rules, without reacting to them again.
        return [self.store._end(end) for end in ends]

    def _promote(self, task_ids: Sequence[str]) -> None:
        for task_id in task_ids:
            row = self.store._rows.get(task_id)
            if row is not None and row["status"] == TaskStatus.WAITING:
                row["status"] = TaskStatus.PENDING
                self.queues.add(row["queue"])

    def _reset(self, task_ids: Sequence[str]) -> int:
        reset = 0
        for task_id in task_ids:
            row = self.store._rows.get(task_id)
            if row is not None and row["status"] in TERMINAL_STATUSES:
                row.update(rows.fresh_run(new_run_id()))
                reset += 1
        return reset

    def wake(self) -> None:
        """Wake this process's idle workers for what became PENDING (after the lock)."""
        if self.queues:
            self.store.notify_enqueued(self.queues)
