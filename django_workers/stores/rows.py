"""Pure helpers both stores share: row <-> TaskInfo, and the re-run decision."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import Any

from django_workers.authority import owner_of
from django_workers.cancellation import CancelReason
from django_workers.core import NodeRow, TaskRow
from django_workers.engine.records import NodeRecord
from django_workers.exceptions import AuthorizationError, InvalidTaskKey
from django_workers.info import TERMINAL_STATUSES, TaskFailure, TaskInfo, TaskStatus
from django_workers.lifecycle import failures_of
from django_workers.options import TaskOptions
from django_workers.references import json_size
from django_workers.stores.base import STATE_FIELDS, NewTask, WatchAuthorizer

#: What every fresh record holds in the columns a submit does not choose (``errors`` is
#: a new list in each row ``row_of`` builds).
FRESH_VALUES: Mapping[str, Any] = MappingProxyType(
    {
        "progress": 0.0,
        "attempts": 0,
        "result": None,
        "error": None,
        "errors": [],
        "cancel_reason": CancelReason.NONE,
        "worker_id": None,
        "started_at": None,
        "finished_at": None,
    }
)


def fresh_run(run_id: str) -> dict[str, Any]:
    """The columns that start a workflow node's record over as run ``run_id``, WAITING.

    ``errors`` is kept: a re-run's node still shows why its earlier runs failed.
    """
    fresh = {name: value for name, value in FRESH_VALUES.items() if name != "errors"}
    return {**fresh, "status": TaskStatus.WAITING, "run_id": run_id, "run_after": None}


def row_of(new: NewTask) -> dict[str, Any]:
    """The column values of a fresh record."""
    return {
        "id": new.id,
        "key": new.key,
        "owner": new.owner,
        "scope": new.scope,
        "task_path": new.task_path,
        "args": new.args,
        "kwargs": new.kwargs,
        "queue": new.queue,
        "priority": new.priority,
        "run_after": new.run_after,
        "options": new.options,
        "status": new.status,
        "run_id": new.run_id,
        "workflow": new.workflow,
        "node": new.node,
        "created_at": new.created_at,
        **FRESH_VALUES,
        "errors": [],
    }


#: Each status and cancel reason by its stored value: a dict read, where calling the enum
#: runs Python code of its own (a snapshot is built for every claimed run).
_STATUSES: Mapping[str, TaskStatus] = {s.value: s for s in TaskStatus}
_REASONS: Mapping[str, CancelReason] = {r.value: r for r in CancelReason}
#: ``TaskOptions`` by their stored items: the records of one site hold few distinct options.
_OPTIONS: dict[tuple[Any, ...], TaskOptions] = {}
_OPTIONS_MAX = 256


def options_of(stored: Mapping[str, Any] | None) -> TaskOptions:
    """``TaskOptions.from_json``, built once for each distinct stored value."""
    try:
        # With the values' types: 1 and 1.0, or 1 and True, are equal keys but not options.
        key = (tuple(stored.items()), tuple(map(type, stored.values()))) if stored else ()
        found = _OPTIONS.get(key)
    except TypeError:  # a list (retry_on's paths): keyed as a tuple of its items
        assert stored is not None
        try:
            items = tuple((k, tuple(v) if type(v) is list else v) for k, v in stored.items())
            key = (items, tuple(map(type, stored.values())))
            found = _OPTIONS.get(key)
        except TypeError:  # a value that still cannot be a key: build it each time
            return TaskOptions.from_json(stored)
    if found is None:
        found = TaskOptions.from_json(stored)
        if len(_OPTIONS) >= _OPTIONS_MAX:
            _OPTIONS.clear()
        _OPTIONS[key] = found
    return found


def info_of(row: TaskRow, watchers: Iterable[str]) -> TaskInfo:
    """Build the snapshot of a record; ``watchers`` lists the owner first, then grants."""
    owner = row["owner"]
    listed = ([owner] if owner else []) + [w for w in watchers if w != owner]
    status, reason, error, errors = (
        row["status"],
        row["cancel_reason"],
        row["error"],
        row["errors"],
    )
    return TaskInfo(
        id=row["id"],
        key=row["key"],
        owner=owner,
        scope=row["scope"],
        queue=row["queue"],
        task_path=row["task_path"],
        args=row["args"],
        kwargs=row["kwargs"],
        priority=row["priority"],
        run_after=row["run_after"],
        options=options_of(row["options"]),
        status=_STATUSES.get(status) or TaskStatus(status),
        progress=row["progress"],
        attempts=row["attempts"],
        result=row["result"],
        error=TaskFailure.from_json(error) if error else None,
        errors=failures_of(errors) if errors else (),
        cancel_reason=_REASONS.get(reason) or CancelReason(reason),
        run_id=row["run_id"],
        worker_id=row["worker_id"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        watchers=tuple(listed),
        workflow=row["workflow"],
        node=row["node"],
        backend=(row["options"] or {}).get("backend"),
    )


def claim_order(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """Sort key of a record's columns in claim order (``models.CLAIM_ORDER``)."""
    return (-row["priority"], row["created_at"], row["id"])


def authorize_join(
    task_id: str, caller: str, grants: Iterable[str], fn: WatchAuthorizer | None
) -> None:
    """Let a caller who does not watch ``task_id`` in only if the watch authorizer says so."""
    owner = owner_of(task_id)
    listed = tuple(([owner.user_id] if owner else []) + list(grants))
    if fn is None or not fn(task_id, listed, caller):
        raise AuthorizationError(
            f"Task id {task_id!r} already exists and {caller!r} does not watch it; "
            "choose another key, use scope='user', or ask for a watch authorizer that "
            "allows this."
        )


def refuse_node_key(task_id: str, workflow: str | None) -> None:
    """A plain submit never joins or re-runs a workflow's node: its workflow does."""
    if workflow:
        raise InvalidTaskKey(
            f"Task id {task_id!r} is a node of workflow {workflow!r}; a workflow's tasks are "
            "run only by their workflow. Choose another key."
        )


def node_record(row: NodeRow) -> NodeRecord:
    """What a workflow's status shows of a node's record (``id``, ``status``, ``result``...)."""
    status = str(row["status"]).lower()
    reason = None
    if row["status"] in (TaskStatus.FAILED, TaskStatus.CANCELLED):
        error = row.get("error") or {}
        reason = error.get("message") or row.get("cancel_reason")
    size = json_size(row["result"]) if row["status"] == TaskStatus.COMPLETED else None
    return NodeRecord(status=status, reason=reason, result_size=size)


def check_state_fields(
    fields: Mapping[str, Any], *, transition: bool = False, to_state: object = None
) -> None:
    """Refuse a state write that names identity fields, unknown columns or an end."""
    if transition and "status" in fields:
        raise ValueError("try_transition takes the new status as to_state, not as a state field.")
    if to_state in TERMINAL_STATUSES or fields.get("status") in TERMINAL_STATUSES:
        raise ValueError(
            "A record ends only through the store's end_tasks (see django_workers.lifecycle); "
            "try_transition and set_task_state write live states."
        )
    extra = set(fields) - STATE_FIELDS
    if extra:
        raise ValueError(
            f"set_task_state/try_transition write state only; {sorted(extra)} are not state "
            f"fields (allowed: {sorted(STATE_FIELDS)}). Watchers and run_id change only "
            "through add_watcher and replace_task."
        )


def stop_reason(row: Mapping[str, Any] | None, worker_id: str, run_id: str) -> CancelReason | None:
    """Why the run ``run_id`` of ``worker_id`` must stop, given its record; None to go on."""
    if row is None or row["run_id"] != run_id:
        return CancelReason.SUPERSEDED
    if row["status"] == TaskStatus.CANCELLED:
        reason = CancelReason(row["cancel_reason"])
        return reason if reason is not CancelReason.NONE else CancelReason.USER
    if row["status"] == TaskStatus.PENDING:
        # This run's claim was lost (a PostgreSQL crash before its commit reached the
        # disk) and nobody has claimed the record since: the run goes on. A worker's
        # claim of it supersedes the run; this worker's own claim takes it back.
        return None
    if row["status"] != TaskStatus.RUNNING or row["worker_id"] != worker_id:
        return CancelReason.SUPERSEDED
    if row["cancel_reason"] != CancelReason.NONE:
        # Asked to stop while the record stays RUNNING (a cancelled workflow's node).
        return CancelReason(row["cancel_reason"])
    return None


def add_queue_count(
    found: dict[str, dict[str, Any]],
    queue: str,
    status: str,
    worker_id: str | None,
    count: int,
    oldest: datetime,
    retrying: int = 0,
) -> None:
    """Add ``count`` live tasks of one status to the ``QueueCounts`` fields of ``queue``."""
    counts = queue_fields(found, queue)
    if status == TaskStatus.PENDING:
        counts["pending"] += count
        counts["retrying"] += retrying
        first = counts.get("oldest_pending")
        counts["oldest_pending"] = oldest if first is None else min(first, oldest)
    else:
        counts["running"] += count
        by_worker = counts.setdefault("running_by_worker", {})
        key = worker_id or ""
        by_worker[key] = by_worker.get(key, 0) + count


def queue_fields(found: dict[str, dict[str, Any]], queue: str) -> dict[str, Any]:
    """The ``QueueCounts`` fields gathered so far for ``queue``, zero until counted."""
    return found.setdefault(
        queue, {"queue": queue, "pending": 0, "retrying": 0, "running": 0, "held_slots": 0}
    )


def add_ended_count(
    found: dict[str, dict[str, list[int]]], queue: str, status: str, counts: Sequence[int]
) -> None:
    """Add one status's counts per instant to the ``EndedCounts`` fields of ``queue``."""
    fields = found.setdefault(queue, {"completed": [0] * len(counts), "failed": [0] * len(counts)})
    key = "completed" if status == TaskStatus.COMPLETED else "failed"
    fields[key] = [a + b for a, b in zip(fields[key], counts, strict=True)]
