"""Testing tasks: run what a test submitted in the test's own thread, or call a task directly.

A ``WorkerRuntime`` runs tasks on threads with connections of their own: they
cannot see what a test's transaction has not committed, and on SQLite they wait
for its lock forever. ``run_tasks`` runs the ready tasks in the calling thread
instead, through the same path a worker takes: the store's ``claim``, the
runtime's ``RunHandle`` and ``execute`` (retries, progress, the cancel token,
``current_run()``, the result limit) and ``store.end_tasks``. ``task_run`` and
``call_task`` call a task function under a fake run, without any store.

The pytest fixture ``workers`` is in ``django_workers.pytest_plugin``;
``WorkersTestMixin`` serves Django's ``TestCase``.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from django_workers import clock
from django_workers.backends import context_of
from django_workers.cancellation import CancelReason, CancelToken
from django_workers.exceptions import TasksKeepComing
from django_workers.info import TaskInfo, TaskStatus
from django_workers.lifecycle import TaskEnd
from django_workers.live import bind_current, live_runs, unbind_current
from django_workers.options import TaskOptions
from django_workers.references import TaskRef, task_path, to_json
from django_workers.runtime import invoke as invoking
from django_workers.runtime.reporter import EndItem, report_ends
from django_workers.runtime.run import RunHandle, execute
from django_workers.signals import run_started
from django_workers.stores import WorkerStore, default_store

__all__ = [
    "MAX_RUNS",
    "FakeRun",
    "TasksKeepComing",
    "Workers",
    "WorkersTestMixin",
    "call_task",
    "capture_tasks",
    "run_tasks",
    "task_run",
]

#: Most runs one ``run_tasks`` call makes before it decides tasks keep submitting tasks.
MAX_RUNS = 100

#: Rows read per page when ``capture_tasks`` compares the records before and after.
_PAGE = 1000


# -- running submitted tasks -------------------------------------------------------------


def run_tasks(
    store: WorkerStore | None = None,
    *,
    queues: Sequence[str] | None = None,
    max_runs: int = MAX_RUNS,
    backoff: bool = False,
) -> list[TaskInfo]:
    """Run every ready task, one at a time in this thread, until none is ready; return their ends.

    Tasks submitted by the tasks run too, and the retries of tasks that failed:
    each task is listed once, in the order it first ran, as it ended.
    ``backoff=False`` runs a retry at once instead of after its backoff (the
    attempts are still counted and recorded); ``backoff=True`` waits for it in
    this thread. More than ``max_runs`` tasks raise ``TasksKeepComing``.
    """
    if isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1:
        raise ValueError(f"max_runs must be an int of at least 1, got {max_runs!r}.")
    store = store or default_store()
    worker_id = f"testing:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    ended: dict[str, TaskInfo] = {}
    while True:
        claimed = store.claim(worker_id, queues, 1, clock.now())
        if not claimed:
            due = _next_retry(ended.values()) if backoff else None
            if due is None:
                return list(ended.values())
            threading.Event().wait(max((due - clock.now()).total_seconds(), 0.0))
            continue
        info = claimed[0]
        if info.id not in ended and len(ended) == max_runs:
            raise TasksKeepComing(
                f"run_tasks ran {max_runs} tasks and {info.task_path} is ready to run "
                "again: a task keeps submitting tasks. Pass a larger max_runs if that many "
                "are expected."
            )
        ended[info.id] = _run_one(store, info, worker_id, backoff)


def _next_retry(infos: Iterable[TaskInfo]) -> datetime | None:
    """When the earliest of these tasks waiting for a retry is due; None if none waits."""
    due = [i.run_after for i in infos if i.status == TaskStatus.PENDING and i.run_after]
    return min(due, default=None)


def _run_one(store: WorkerStore, info: TaskInfo, worker_id: str, backoff: bool) -> TaskInfo:
    """Run one claimed task as a runtime's run thread and finisher would, then read it back."""
    handle = RunHandle(info, store, worker_id, context_of)
    handle.try_start()
    if not handle.pre_run_check():
        refused = store.get_task_info(info.id)
        assert refused is not None, f"task {info.id} vanished while run_tasks ran it"
        return refused
    live_runs.add(handle)
    deadline = _deadline(handle)
    run_started.send_robust(run_tasks, info=info)
    try:
        end = execute(handle)
    finally:
        if deadline is not None:
            deadline.cancel()
        live_runs.discard(handle)
    handle.returned = True
    items: list[EndItem] = []
    if handle.token.reason is CancelReason.TIMEOUT:
        # A runtime's watchdog writes the timeout while the function still runs.
        items.append((handle.timed_out_end(), handle, False))
    if end.run_after is not None and not backoff:
        end = replace(end, run_after=clock.now())  # a retry, ready at once
    items.append((end, handle, True))
    won = [_end(store, item_end) for item_end, _h, _r in items]
    report_ends(items, won)
    after = store.get_task_info(info.id)
    assert after is not None, f"task {info.id} vanished while run_tasks ran it"
    return after


def _end(store: WorkerStore, end: TaskEnd) -> bool:
    return store.end_tasks([end])[0]


def _deadline(handle: RunHandle) -> threading.Timer | None:
    """Set the token at the task's timeout, as the watchdog does (the timer touches no database)."""
    timeout = handle.seconds_left()
    if timeout is None:
        return None
    timer = threading.Timer(timeout, handle.request_cancel, (CancelReason.TIMEOUT,))
    timer.daemon = True
    timer.start()
    return timer


@contextlib.contextmanager
def capture_tasks(store: WorkerStore | None = None) -> Iterator[list[TaskInfo]]:
    """Collect the runs submitted inside the block, oldest first, as they read at its end.

    A first submit or a re-run counts; a submit that joined a live task does not.
    """
    store = store or default_store()
    before = {(info.id, info.run_id) for info in _every_task(store)}
    captured: list[TaskInfo] = []
    yield captured
    after = reversed(_every_task(store))
    captured.extend(info for info in after if (info.id, info.run_id) not in before)


def _every_task(store: WorkerStore) -> list[TaskInfo]:
    found: list[TaskInfo] = []
    while page := store.list_tasks(user_id=None, offset=len(found), limit=_PAGE):
        found.extend(page)
        if len(page) < _PAGE:
            break
    return found


# -- calling a task directly --------------------------------------------------------------


class FakeRun:
    """A run without a worker or store: ``current_run()`` and progress work, a test may cancel."""

    def __init__(self, info: TaskInfo) -> None:
        self.info = info
        self.run_id = info.run_id
        self.token = CancelToken()
        #: The last progress the task reported.
        self.progress = info.progress
        #: Every progress the task reported, in order.
        self.progress_reports: list[float] = []

    def snapshot(self) -> TaskInfo:
        return replace(
            self.info, progress=self.progress, cancel_reason=self.token.reason, _token=self.token
        )

    def report_progress(self, pct: float) -> None:
        self.progress = pct
        self.progress_reports.append(pct)

    def request_cancel(self, reason: CancelReason) -> bool:
        return self.token._request(reason)

    def cancel(self, reason: CancelReason | str = CancelReason.USER) -> bool:
        """Ask the task to stop, as ``cancel_task`` or a timeout would; False if already asked."""
        return self.request_cancel(CancelReason(reason))

    @property
    def cancel_requested(self) -> bool:
        return self.token.requested


_fake_run: contextvars.ContextVar[FakeRun | None] = contextvars.ContextVar(
    "django_workers_fake_run", default=None
)


@contextlib.contextmanager
def task_run(
    info: TaskInfo | None = None,
    *,
    task_id: str = "test-task",
    queue: str = "default",
    options: TaskOptions | None = None,
    attempts: int = 1,
) -> Iterator[FakeRun]:
    """Make a fake run the current one inside the block; code there may use ``current_run()``.

    Pass ``info`` (a task read from the store) to run as that task, else one is
    made up from ``task_id``, ``queue``, ``options`` and ``attempts``.
    """
    if info is None:
        info = _made_up(task_id, queue, options or TaskOptions(), attempts)
    run = FakeRun(replace(info, status=TaskStatus.RUNNING))
    live_runs.add(run)
    bound = bind_current(run)
    marked = _fake_run.set(run)
    try:
        yield run
    finally:
        _fake_run.reset(marked)
        unbind_current(bound)
        live_runs.discard(run)


def call_task(task: TaskRef, /, *args: Any, **kwargs: Any) -> Any:
    """Call ``task`` as a worker would: arguments through JSON, sync or async, under a run.

    Inside ``task_run`` the call runs as that run; else under a fresh one.
    """
    fields = {
        "task_path": task_path(task),
        "args": to_json(list(args), "The task's arguments"),
        "kwargs": to_json(kwargs, "The task's keyword arguments"),
    }
    run = _fake_run.get()
    if run is None:
        with task_run() as fresh:
            return _call(fresh, fields)
    return _call(run, fields)


def _call(run: FakeRun, fields: dict[str, Any]) -> Any:
    run.info = replace(run.info, **fields)
    return invoking.invoke(run.snapshot(), context_factory=context_of)


def _made_up(task_id: str, queue: str, options: TaskOptions, attempts: int) -> TaskInfo:
    now = clock.now()
    return TaskInfo(
        id=task_id,
        key=task_id,
        owner=None,
        scope="global",
        queue=queue,
        task_path="",
        args=[],
        kwargs={},
        priority=0,
        run_after=None,
        options=options,
        status=TaskStatus.RUNNING,
        progress=0.0,
        attempts=attempts,
        result=None,
        error=None,
        cancel_reason=CancelReason.NONE,
        run_id=uuid.uuid4().hex,
        worker_id="testing",
        created_at=now,
        started_at=now,
        finished_at=None,
        watchers=(),
    )


# -- pytest and Django TestCase ------------------------------------------------------------


class Workers:
    """What the ``workers`` pytest fixture gives a test: run its tasks, capture its submits."""

    def __init__(self, store: WorkerStore | None = None) -> None:
        #: The store the helpers use; None is the default store.
        self.store = store

    def run(
        self,
        *,
        queues: Sequence[str] | None = None,
        max_runs: int = MAX_RUNS,
        backoff: bool = False,
    ) -> list[TaskInfo]:
        """Run every ready task in this thread until none is ready; see ``run_tasks``."""
        return run_tasks(self.store, queues=queues, max_runs=max_runs, backoff=backoff)

    def capture(self) -> contextlib.AbstractContextManager[list[TaskInfo]]:
        """Collect the runs submitted inside the block; see ``capture_tasks``."""
        return capture_tasks(self.store)


class WorkersTestMixin:
    """For Django test cases: ``self.run_tasks()`` runs the submitted tasks, in the test."""

    #: The store the helpers use; None is the default store.
    workers_store: WorkerStore | None = None

    def run_tasks(
        self,
        *,
        queues: Sequence[str] | None = None,
        max_runs: int = MAX_RUNS,
        backoff: bool = False,
    ) -> list[TaskInfo]:
        """Run every ready task in this thread until none is ready; see ``testing.run_tasks``."""
        return run_tasks(self.workers_store, queues=queues, max_runs=max_runs, backoff=backoff)

    def capture_tasks(self) -> contextlib.AbstractContextManager[list[TaskInfo]]:
        """Collect the runs submitted inside the block; see ``testing.capture_tasks``."""
        return capture_tasks(self.workers_store)
