"""The public task API: submit, read, list, cancel, report progress.

Every call that reads or writes a task on someone's behalf takes a required
authority (``Owner`` or ``System``); a run's own progress needs none. Every call
checks all of its input before anything is written. A task the caller may not see
is answered exactly like one that does not exist.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import SynchronousOnlyOperation

from django_workers import clock, lifecycle, visibility
from django_workers.authority import (
    TASK_ID_MAX_LENGTH,
    Authority,
    Owner,
    Scope,
    check_authority,
    user_id_of,
)
from django_workers.cancellation import CancelReason
from django_workers.exceptions import (
    InvalidTaskKey,
    InvalidTaskOptions,
    TaskAlreadyFinished,
    TaskNotFound,
)
from django_workers.info import TaskInfo, TaskStatus
from django_workers.options import TaskOptions
from django_workers.references import TaskRef
from django_workers.stores import WorkerStore, default_store
from django_workers.stores.base import AllCreated
from django_workers.submission import TaskSubmission, build_task, build_tasks, write_tasks

MAX_LIMIT = 1000


def submit_task(
    key: str,
    task: TaskRef,
    authority: Authority,
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    scope: Scope = "user",
    watchers: Sequence[Owner] = (),
    queue: str | None = None,
    priority: int | None = None,
    run_after: datetime | timedelta | None = None,
    options: TaskOptions | None = None,
    store: WorkerStore | None = None,
) -> str:
    """Submit ``task`` under ``key`` and return the task id (the key scoped to its owner)."""
    spec = TaskSubmission(
        key=key,
        task=task,
        args=args,
        kwargs=kwargs,
        scope=scope,
        watchers=watchers,
        queue=queue,
        priority=priority,
        run_after=run_after,
        options=options,
    )
    # ``submit_tasks`` of one, without its batch steps: the submit a wake-up waits on.
    authority = check_authority(authority)
    store = store or default_store()
    return write_tasks([build_task(spec, authority, store)], authority, store)[0].id


def submit_tasks(
    submissions: Iterable[TaskSubmission], authority: Authority, *, store: WorkerStore | None = None
) -> list[str]:
    """Submit many tasks, written in one statement where the database allows; return ids."""
    authority = check_authority(authority)
    store = store or default_store()
    news = build_tasks(submissions, authority, store)
    done = write_tasks(news, authority, store)
    return done.ids() if isinstance(done, AllCreated) else [sub.id for sub in done]


async def asubmit_task(
    key: str,
    task: TaskRef,
    authority: Authority,
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    scope: Scope = "user",
    watchers: Sequence[Owner] = (),
    queue: str | None = None,
    priority: int | None = None,
    run_after: datetime | timedelta | None = None,
    options: TaskOptions | None = None,
    store: WorkerStore | None = None,
) -> str:
    """``submit_task`` from async code (an async view): the same checks, errors and id."""
    # Thread-sensitive: the write runs on the thread that holds the request's connection,
    # so a submit inside the view's transaction (via sync code) sees it.
    return await sync_to_async(submit_task, thread_sensitive=True)(
        key,
        task,
        authority,
        args=args,
        kwargs=kwargs,
        scope=scope,
        watchers=watchers,
        queue=queue,
        priority=priority,
        run_after=run_after,
        options=options,
        store=store,
    )


async def asubmit_tasks(
    submissions: Iterable[TaskSubmission], authority: Authority, *, store: WorkerStore | None = None
) -> list[str]:
    """``submit_tasks`` from async code: the same checks, errors and ids."""
    return await sync_to_async(submit_tasks, thread_sensitive=True)(
        submissions, authority, store=store
    )


# -- reading ----------------------------------------------------------------------------


def get_task_status(
    task_id: str, authority: Authority, *, store: WorkerStore | None = None
) -> TaskInfo:
    """Return the durable snapshot of a task the authority may see, else TaskNotFound."""
    authority = check_authority(authority)
    info = (store or default_store()).get_task_info(_check_id(task_id))
    if info is None or not visibility.may_see_task(info, authority):
        raise TaskNotFound(task_id)
    return info


def get_all_tasks(
    authority: Authority,
    *,
    status: TaskStatus | str | None = None,
    queue: str | None = None,
    offset: int = 0,
    limit: int = 100,
    store: WorkerStore | None = None,
) -> list[TaskInfo]:
    """The tasks the authority owns or watches (all for System), newest first."""
    authority = check_authority(authority)
    if status is not None:
        try:
            status = TaskStatus(status)
        except ValueError:
            raise InvalidTaskOptions(
                f"status must be one of {', '.join(TaskStatus.values)}, got {status!r}."
            ) from None
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidTaskOptions(f"offset must be an int >= 0, got {offset!r}.")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidTaskOptions(f"limit must be an int from 1 to {MAX_LIMIT}, got {limit!r}.")
    if queue is not None and (not isinstance(queue, str) or not queue.isprintable()):
        # A queue no task can have; a NUL would reach PostgreSQL as an error.
        raise InvalidTaskOptions(f"queue must be a printable queue name or None, got {queue!r}.")
    return (store or default_store()).list_tasks(
        user_id=user_id_of(authority), status=status, queue=queue, offset=offset, limit=limit
    )


def _check_id(task_id: object) -> str:
    # Checked before any query: a NUL reaches PostgreSQL as an error, not as "no such task".
    if not isinstance(task_id, str) or not task_id:
        raise InvalidTaskKey(f"A task id must be a non-empty string, got {task_id!r}.")
    if len(task_id) > TASK_ID_MAX_LENGTH or not task_id.isprintable():
        raise InvalidTaskKey(
            f"A task id is at most {TASK_ID_MAX_LENGTH} printable characters; got "
            f"{len(task_id)} characters{'' if task_id.isprintable() else ' with a control one'}."
        )
    return task_id


# -- cancelling --------------------------------------------------------------------------

#: How often cancel_task re-reads a record that a re-run replaced under it.
_CANCEL_ATTEMPTS = 5


def cancel_task(
    task_id: str,
    authority: Authority,
    *,
    run_id: str | None = None,
    store: WorkerStore | None = None,
) -> TaskInfo:
    """Cancel a task; return its new snapshot. TaskAlreadyFinished if it has ended.

    A PENDING or WAITING task never runs. A RUNNING one is claimed CANCELLED
    first (fenced on its run), then the run's token is set wherever it runs.
    With ``run_id``, only that run is cancelled: once a re-run has replaced
    it, the answer is TaskAlreadyFinished (task handles pass their run).
    """
    store = store or default_store()
    for _ in range(_CANCEL_ATTEMPTS):
        info = get_task_status(task_id, authority, store=store)
        if run_id is not None and info.run_id != run_id:
            raise TaskAlreadyFinished(task_id, "superseded by a re-run")
        if info.is_finished:
            raise TaskAlreadyFinished(task_id, info.status)
        if store.end_tasks([lifecycle.cancel_end(info, clock.now())])[0]:
            if info.status == TaskStatus.RUNNING:
                deliver_cancel(store, info)
            return get_task_status(task_id, authority, store=store)
        # The record moved under us (it ended, or a re-run replaced it): look again.
    raise TaskAlreadyFinished(task_id, "changing too fast to cancel")


def deliver_cancel(store: WorkerStore, info: TaskInfo) -> None:
    """Give the run ``info`` describes its ``user`` token: here if it runs in this process,
    else by the store's notice (where there is none, its worker's poll finds it)."""
    from django_workers.live import live_runs

    if not live_runs.request_cancel(info.run_id, CancelReason.USER):
        store.notify_cancelled(info.id, info.run_id)


# -- progress ------------------------------------------------------------------------------


def update_progress(info: TaskInfo, pct: float, *, store: WorkerStore | None = None) -> TaskInfo:
    """Record ``pct`` (0-100) as the progress of the run ``info`` describes; return it updated.

    The write is fenced on the run: a run that was cancelled, superseded or
    has ended changes nothing. Inside a task, pass ``current_run()``.
    """
    if not isinstance(info, TaskInfo):
        raise TypeError(
            f"update_progress takes a TaskInfo (current_run()), got {type(info).__name__}."
        )
    if isinstance(pct, bool) or not isinstance(pct, int | float) or not math.isfinite(pct):
        raise InvalidTaskOptions(f"progress must be a number from 0 to 100, got {pct!r}.")
    if not 0 <= pct <= 100:
        raise InvalidTaskOptions(f"progress must be from 0 to 100, got {pct}.")
    if _in_event_loop():
        # Refused on every store, so a task tested on the memory store works on the database.
        raise SynchronousOnlyOperation(
            "update_progress() writes to the database, which cannot be done from an event "
            "loop; in an async task use `await aupdate_progress(current_run(), pct)`."
        )
    from django_workers.live import live_runs

    handle = live_runs.get(info.run_id)
    if handle is not None:
        handle.report_progress(float(pct))
    else:
        (store or default_store()).try_transition(
            info.id,
            info.run_id,
            [TaskStatus.RUNNING],
            TaskStatus.RUNNING,
            claimed_by=info.worker_id,
            progress=float(pct),
        )
    return replace(info, progress=float(pct))


async def aupdate_progress(
    info: TaskInfo, pct: float, *, store: WorkerStore | None = None
) -> TaskInfo:
    """Record progress from async code, such as an ``async def`` task; see ``update_progress``."""
    return await sync_to_async(update_progress)(info, pct, store=store)


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
