"""Submitting and the live state writes: the task records role of the memory store."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Any

from django_workers import visibility
from django_workers.exceptions import InvalidWorkflow
from django_workers.info import LIVE_STATUSES, TaskStatus
from django_workers.stores import rows
from django_workers.stores.base import ANY_RUN, NewTask, NewWorkflow, RunId, Submitted
from django_workers.stores.memory.state import MemoryState


class MemoryRecords(MemoryState):
    """Writes a record, its watchers and workflows under the store's lock."""

    def submit(self, new: NewTask, caller: str | None) -> Submitted:
        with self._lock:
            row = self._rows.get(new.id)
            if row is None:
                self._insert(new)
                return Submitted(new.id, new.run_id, created=True)
            rows.refuse_node_key(new.id, row["workflow"])
            grants = self._grants[new.id]
            joining = not visibility.sees_task(caller, new.id, grants)
            # Only a caller (never System, None) can be joining: the checker cannot tell.
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
                "runs": 1,
                "cancel_reason": None,
                "deadline": workflow.deadline,
                "deadline_at": workflow.deadline_at,
                "watchers": list(workflow.watchers),
                **copy.deepcopy(dict(workflow.state)),
            }
            for task in tasks:
                self._insert(task)
        self.notify_enqueued({task.queue for task in tasks})
        return None

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
