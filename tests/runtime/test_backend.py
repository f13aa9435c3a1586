"""WorkersBackend: what Django's own ``tests/tasks/`` expect of a backend, run by real workers.

Tasks are enqueued through ``django.tasks`` and executed by a ``WorkerRuntime``
on a background thread (the code ``runworkers`` runs) or by a real
``runworkers --burst`` subprocess, against the committed test database.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.tasks import Task, TaskResult, TaskResultStatus, task, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.test import override_settings
from django.utils import timezone

from django_workers import (
    Owner,
    System,
    TaskCancelled,
    TaskNotFound,
    TaskStatus,
    cancel_task,
    get_task_status,
    submit_task,
)
from django_workers.backends import STATUSES, WorkersBackend
from django_workers.models import TaskRecord
from django_workers.stores import ANY_RUN
from django_workers.stores.database import DatabaseWorkerStore
from tests import tasks as t
from tests.helpers import RuntimeThread, start_runtime, wait_until
from tests.worker_processes import run_burst

IMMEDIATE = {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}
BACKEND = "django_workers.backends.WorkersBackend"


def tasks_setting(**workers: Any) -> dict[str, Any]:
    """TASKS with the fixture tasks' "workers" alias configured by ``workers``."""
    return {"default": IMMEDIATE, "workers": {"BACKEND": BACKEND, **workers}}


@pytest.fixture
def worker(db_store: DatabaseWorkerStore) -> Iterator[RuntimeThread]:
    """A runtime serving every queue on a background thread."""
    thread = start_runtime(db_store)
    yield thread
    thread.stop()


def finished(result: TaskResult, timeout: float = 15.0) -> TaskResult:
    """Refresh ``result`` until it has ended; return it."""

    def ended() -> bool:
        result.refresh()
        return result.is_finished

    wait_until(ended, timeout)
    return result


def backend() -> WorkersBackend:
    found = task_backends["workers"]
    assert isinstance(found, WorkersBackend)
    return found


# -- configuration ---------------------------------------------------------------------


def test_the_backend_says_what_it_supports() -> None:
    workers = backend()
    assert workers.alias == "workers"
    assert workers.supports_defer is True
    assert workers.supports_priority is True
    assert workers.supports_get_result is True
    assert workers.supports_async_task is True
    assert workers.options == {}
    assert list(workers.check()) == []


# -- enqueue -----------------------------------------------------------------------------


def test_enqueue_writes_a_global_system_record(db_store: DatabaseWorkerStore) -> None:
    result = t.dj_noop.enqueue(1, two=3)

    assert result.status == TaskResultStatus.READY
    assert result.is_finished is False
    assert result.enqueued_at is not None
    assert result.started_at is result.finished_at is result.last_attempted_at is None
    assert (result.task, result.args, result.kwargs) == (t.dj_noop, [1], {"two": 3})
    assert (result.backend, result.errors, result.worker_ids, result.attempts) == (
        "workers",
        [],
        [],
        0,
    )
    info = get_task_status(result.id, System())
    assert (info.scope, info.owner, info.watchers) == ("global", None, ())
    assert (info.task_path, info.queue, info.priority, info.backend) == (
        "tests.tasks.dj_noop",
        "default",
        0,
        "workers",
    )
    with pytest.raises(TaskNotFound):
        get_task_status(result.id, Owner("someone"))


def test_get_result_reads_what_enqueue_returned(db_store: DatabaseWorkerStore) -> None:
    result = t.dj_noop.enqueue()

    assert t.dj_noop.get_result(result.id) == result
    assert backend().get_result(result.id) == result


def test_enqueue_with_an_argument_json_cannot_hold(db_store: DatabaseWorkerStore) -> None:
    with pytest.raises(TypeError, match="Unsupported type"):
        t.dj_noop.enqueue(datetime.now())
    with pytest.raises(TypeError, match="Unsupported type"):
        async_to_sync(t.dj_noop.aenqueue)(datetime.now())

    assert TaskRecord.objects.count() == 0


def test_enqueue_inside_a_transaction_is_written_with_it(db_store: DatabaseWorkerStore) -> None:
    dropped: list[TaskResult] = []

    def enqueue_then_fail() -> None:
        with transaction.atomic():
            dropped.append(t.dj_noop.enqueue())
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        enqueue_then_fail()
    with transaction.atomic():
        kept = t.dj_noop.enqueue()

    with pytest.raises(TaskResultDoesNotExist):
        t.dj_noop.get_result(dropped[0].id)
    assert t.dj_noop.get_result(kept.id).status == TaskResultStatus.READY


@pytest.mark.parametrize("task_obj", [t.dj_noop, t.dj_noop_async], ids=["sync", "async"])
def test_worker_runs_an_enqueued_task(worker: RuntimeThread, task_obj: Task) -> None:
    result = finished(task_obj.enqueue(1, two=3))

    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.is_finished is True
    assert result.started_at is not None
    assert result.last_attempted_at is not None
    assert result.finished_at is not None
    assert result.enqueued_at is not None
    assert result.started_at >= result.enqueued_at
    assert result.finished_at >= result.started_at
    assert result.return_value is None
    assert (result.task, result.args, result.kwargs) == (task_obj, [1], {"two": 3})
    assert result.attempts == 1
    assert result.worker_ids == [worker.runtime.worker_id]


def test_aenqueue_and_aget_result(worker: RuntimeThread) -> None:
    async def scenario() -> TaskResult:
        result = await t.dj_async_add.aenqueue(2, 3)
        assert result.status == TaskResultStatus.READY
        for _ in range(1500):
            result = await t.dj_async_add.aget_result(result.id)
            if result.is_finished:
                return result
            await result.arefresh()  # exercises arefresh; aget_result decides
        raise AssertionError("the async task did not finish")

    result = async_to_sync(scenario)()

    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5


def test_return_value(worker: RuntimeThread) -> None:
    result = finished(t.dj_meaning_of_life.enqueue())

    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 42
    assert t.dj_meaning_of_life.get_result(result.id).return_value == 42


# -- failures ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("task_obj", "exception", "message"),
    [
        (t.dj_value_error, ValueError, "This task failed due to ValueError"),
        (t.dj_system_exit, SystemExit, "This task failed due to SystemExit"),
    ],
    ids=["ValueError", "SystemExit"],
)
def test_a_failing_task_records_its_exception(
    worker: RuntimeThread, task_obj: Task, exception: type[BaseException], message: str
) -> None:
    result = finished(task_obj.enqueue())

    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    assert result.finished_at is not None
    assert result.started_at is not None
    assert result.finished_at >= result.started_at
    assert len(result.errors) == 1
    assert result.errors[0].exception_class is exception
    assert result.errors[0].traceback.endswith(f"{exception.__name__}: {message}\n")
    assert (result.task, result.args, result.kwargs) == (task_obj, [], {})


def test_complex_exception(worker: RuntimeThread) -> None:
    result = finished(t.dj_complex_exception.enqueue())

    assert result.status == TaskResultStatus.FAILED
    assert result._return_value is None  # type: ignore[attr-defined]  # private: stubs omit it
    assert result.errors[0].exception_class is ValueError
    assert 'ValueError(ValueError("This task failed"))' in result.errors[0].traceback


def test_a_return_value_json_cannot_hold_fails_the_task(worker: RuntimeThread) -> None:
    result = finished(t.dj_unserializable_result.enqueue())

    assert result.status == TaskResultStatus.FAILED
    assert issubclass(result.errors[0].exception_class, TypeError)
    assert "JSON-serializable" in result.errors[0].traceback


def test_failure_is_logged_like_django_does(
    worker: RuntimeThread, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="django.tasks"):
        result = finished(t.dj_value_error.enqueue())
        wait_until(lambda: any("state=FAILED" in r.getMessage() for r in caplog.records))

    lines = [r.getMessage() for r in caplog.records if r.name == "django.tasks"]
    mine = [line for line in lines if result.id in line]
    enqueued = f"Task id={result.id} path=tests.tasks.dj_value_error enqueued backend=workers"
    # The enqueuing thread sends its signal once the record is stored; the worker
    # thread may have claimed and started the task by then, so only the worker's own
    # lines have an order.
    assert enqueued in mine
    assert [line for line in mine if line != enqueued] == [
        f"Task id={result.id} path=tests.tasks.dj_value_error state=RUNNING",
        f"Task id={result.id} path=tests.tasks.dj_value_error state=FAILED",
    ]


# -- status mapping --------------------------------------------------------------


def test_every_status_maps_to_djangos() -> None:
    assert STATUSES == {
        TaskStatus.WAITING: TaskResultStatus.READY,
        TaskStatus.PENDING: TaskResultStatus.READY,
        TaskStatus.RUNNING: TaskResultStatus.RUNNING,
        TaskStatus.COMPLETED: TaskResultStatus.SUCCESSFUL,
        TaskStatus.FAILED: TaskResultStatus.FAILED,
        TaskStatus.CANCELLED: TaskResultStatus.FAILED,
    }


def test_a_waiting_record_reads_ready(db_store: DatabaseWorkerStore) -> None:
    result = t.dj_noop.enqueue()
    db_store.set_task_state(result.id, ANY_RUN, status=TaskStatus.WAITING)

    assert t.dj_noop.get_result(result.id).status == TaskResultStatus.READY


def test_a_task_cancelled_before_it_ran_reads_failed_with_task_cancelled(
    db_store: DatabaseWorkerStore,
) -> None:
    result = t.dj_noop.enqueue()
    cancel_task(result.id, System())

    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is TaskCancelled
    assert result.errors[0].traceback == (
        "django_workers.exceptions.TaskCancelled: Cancelled by user\n"
    )
    assert result.started_at is None
    assert result.finished_at is not None


def test_a_running_task_cancelled_reads_failed_with_task_cancelled(
    worker: RuntimeThread,
) -> None:
    result = t.dj_wait_for_cancel.enqueue()

    def running() -> bool:
        result.refresh()
        return result.status == TaskResultStatus.RUNNING

    wait_until(running)

    cancel_task(result.id, System())

    result = finished(result)
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is TaskCancelled
    assert "Cancelled by user" in result.errors[0].traceback
    assert result.worker_ids == [worker.runtime.worker_id]
    # The worker stops the run too: it is no longer among the runtime's active runs.
    wait_until(lambda: not worker.runtime.active_runs())


# -- get_result --------------------------------------------------------------------------


def test_get_missing_result(db_store: DatabaseWorkerStore) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        t.dj_noop.get_result("123")
    with pytest.raises(TaskResultDoesNotExist):
        async_to_sync(t.dj_noop.aget_result)(123)  # type: ignore[arg-type]  # not an id, on purpose
    with pytest.raises(TaskResultDoesNotExist):
        backend().get_result("")


def test_get_result_does_not_read_tasks_submitted_with_submit_task(
    db_store: DatabaseWorkerStore,
) -> None:
    mine = submit_task("k", t.dj_noop, Owner("alice"))
    theirs = submit_task("g", t.dj_noop, System(), scope="global")

    for task_id in (mine, theirs):
        with pytest.raises(TaskResultDoesNotExist):
            backend().get_result(task_id)


def test_get_result_of_another_task(db_store: DatabaseWorkerStore) -> None:
    result = t.dj_noop_async.enqueue()

    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        t.dj_noop.get_result(result.id)
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        async_to_sync(t.dj_noop.aget_result)(result.id)


# -- run_after, priority, queues ------------------------------------------------------------


def test_run_after_is_respected(worker: RuntimeThread) -> None:
    run_after = timezone.now() + timedelta(seconds=1.5)
    deferred = t.dj_noop.using(run_after=run_after).enqueue()
    assert deferred.task.run_after == run_after

    # A task enqueued after it runs first, so the worker was serving all along.
    finished(t.dj_noop.enqueue())
    deferred.refresh()
    if timezone.now() < run_after:  # a very slow machine may already be past it
        assert deferred.status == TaskResultStatus.READY

    finished(deferred)
    assert deferred.status == TaskResultStatus.SUCCESSFUL
    assert deferred.started_at is not None
    assert deferred.started_at >= run_after
    assert deferred.task.run_after == run_after


def test_submit_task_takes_a_django_tasks_defaults(db_store: DatabaseWorkerStore) -> None:
    run_after = timezone.now() + timedelta(hours=1)
    declared = t.dj_noop.using(priority=7, run_after=run_after)

    task_id = submit_task("k", declared, Owner("alice"))

    info = get_task_status(task_id, Owner("alice"))
    assert (info.priority, info.run_after, info.queue) == (7, run_after, "default")
    assert info.backend is None  # not enqueued through django.tasks


def test_higher_priority_runs_first_then_older(db_store: DatabaseWorkerStore) -> None:
    low = t.dj_noop.using(priority=-10).enqueue()
    mid = t.dj_noop.enqueue()
    high = t.dj_noop.using(priority=10).enqueue()
    mid_later = t.dj_noop.enqueue()
    top = t.dj_noop.using(priority=100).enqueue()

    thread = start_runtime(db_store, concurrency=1)
    try:
        results = [finished(r) for r in (low, mid, high, mid_later, top)]
    finally:
        thread.stop()

    started = sorted(results, key=lambda r: r.started_at)  # type: ignore[arg-type, return-value]
    assert [r.id for r in started] == [top.id, high.id, mid.id, mid_later.id, low.id]
    assert [r.task.priority for r in started] == [100, 10, 0, 0, -10]


@override_settings(TASKS=tasks_setting(QUEUES=["default", "reports"]))
def test_queue_names_reach_the_workers_that_serve_them(db_store: DatabaseWorkerStore) -> None:
    report = t.dj_noop.using(queue_name="reports").enqueue()
    plain = t.dj_noop.enqueue()
    assert get_task_status(report.id, System()).queue == "reports"

    default_only = start_runtime(db_store, queues=["default"])
    try:
        finished(plain)
        report.refresh()
        assert report.status == TaskResultStatus.READY
    finally:
        default_only.stop()
    reports_only = start_runtime(db_store, queues=["reports"])
    try:
        finished(report)
    finally:
        reports_only.stop()

    assert report.status == TaskResultStatus.SUCCESSFUL
    assert report.task.queue_name == "reports"


def test_validate_on_enqueue(db_store: DatabaseWorkerStore) -> None:
    with override_settings(TASKS=tasks_setting(QUEUES=[])):
        unknown = t.dj_noop.using(queue_name="unknown_queue")
    with override_settings(TASKS=tasks_setting(QUEUES=["queue-1"])):
        with pytest.raises(InvalidTask, match="Queue 'unknown_queue' is not valid for backend"):
            unknown.enqueue()
        with pytest.raises(InvalidTask, match="Queue 'unknown_queue' is not valid for backend"):
            async_to_sync(unknown.aenqueue)()
    assert TaskRecord.objects.count() == 0


def test_enqueue_refuses_arguments_over_the_cap(db_store: DatabaseWorkerStore) -> None:
    with (
        override_settings(DJANGO_WORKERS={"ARGS_MAX_BYTES": 100}),
        pytest.raises(InvalidTask, match="ARGS_MAX_BYTES"),
    ):
        t.dj_noop.enqueue("x" * 200)
    assert TaskRecord.objects.count() == 0


def test_enqueue_refuses_a_queue_the_site_did_not_list(db_store: DatabaseWorkerStore) -> None:
    listed = {"QUEUES": {"reports": {}}, "ONLY_LISTED_QUEUES": True}
    with override_settings(TASKS=tasks_setting(QUEUES=[])):
        unlisted = t.dj_noop.using(queue_name="emails")
    with (
        override_settings(TASKS=tasks_setting(QUEUES=[]), DJANGO_WORKERS=listed),
        pytest.raises(InvalidTask, match="'emails' is not named in DJANGO_WORKERS"),
    ):
        unlisted.enqueue()
    assert TaskRecord.objects.count() == 0


def test_the_default_queues_are_djangos(db_store: DatabaseWorkerStore) -> None:
    with pytest.raises(InvalidTask, match="Queue 'reports' is not valid for backend"):
        t.dj_noop.using(queue_name="reports")


# -- validate_task refuses what a worker could not run ----------------------------------------


def _module_level(source: str, module: str) -> Callable[..., Any]:
    """A function that looks defined at the top level of ``module``."""
    namespace: dict[str, Any] = {"__name__": module}
    exec(source, namespace)  # a fixture function, built on purpose
    return next(v for k, v in namespace.items() if not k.startswith("__"))


def test_validate_task_refuses_with_a_precise_message(db_store: DatabaseWorkerStore) -> None:
    def closure() -> None:
        pass

    workers = task(backend="workers")
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: workers(closure), "Task function must be defined at a module level."),
        (
            lambda: workers(_module_level("job = lambda: None", "tests.tasks")),
            "a lambda cannot be imported",
        ),
        (
            lambda: workers(_module_level("def job(): pass", "__main__")),
            "defined in __main__, which a worker cannot import",
        ),
        (
            lambda: task(backend="workers", takes_context=True)(t.dj_meaning_of_life.func),
            "Task takes context but does not have a first argument of 'context'.",
        ),
        (
            lambda: t.dj_noop.using(priority=101),
            "priority must be a whole number between -100 and 100.",
        ),
        (
            lambda: t.dj_noop.using(run_after=datetime.now()),
            "run_after must be an aware datetime.",
        ),
    ]
    for attempt, message in cases:
        with pytest.raises(InvalidTask) as refused:
            attempt()
        assert message in str(refused.value)
    assert TaskRecord.objects.count() == 0


def test_enqueue_refuses_a_task_that_does_not_import_back(db_store: DatabaseWorkerStore) -> None:
    vanished = task(backend="workers")(_module_level("def not_there(): pass", "tests.tasks"))

    with pytest.raises(InvalidTask, match=r"Cannot import task 'tests\.tasks\.not_there'"):
        vanished.enqueue()
    assert TaskRecord.objects.count() == 0


@override_settings(TASKS=tasks_setting(QUEUES=[]))
def test_enqueue_refuses_a_queue_name_workers_cannot_serve(db_store: DatabaseWorkerStore) -> None:
    with pytest.raises(InvalidTask, match="may not contain spaces"):
        t.dj_noop.using(queue_name="two words").enqueue()
    assert TaskRecord.objects.count() == 0


# -- takes_context -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "task_obj", [t.dj_get_task_id, t.dj_async_get_task_id], ids=["sync", "async"]
)
def test_takes_context(worker: RuntimeThread, task_obj: Task) -> None:
    result = finished(task_obj.enqueue())

    assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert result.return_value == result.id


def test_the_context_is_this_run(worker: RuntimeThread) -> None:
    result = finished(t.dj_context.enqueue(1))

    assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert result.return_value == {"status": "RUNNING", "backend": "workers", "args": [1]}


# -- signals -------------------------------------------------------------------------------


class Received:
    """Django task signals caught on any thread: (signal name, sender, result id, status)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, type, str, str]] = []
        self.results: dict[tuple[str, str], TaskResult] = {}

    def catcher(self, name: str) -> Callable[..., None]:
        def receive(sender: type, task_result: TaskResult, **kwargs: Any) -> None:
            with self.lock:
                self.events.append((name, sender, task_result.id, task_result.status))
                self.results[(name, task_result.id)] = task_result

        return receive

    def of(self, task_id: str) -> list[tuple[str, type, str]]:
        with self.lock:
            return [(n, s, status) for n, s, i, status in self.events if i == task_id]


@pytest.fixture
def received() -> Iterator[Received]:
    caught = Received()
    receivers = [
        (task_enqueued, caught.catcher("enqueued")),
        (task_started, caught.catcher("started")),
        (task_finished, caught.catcher("finished")),
    ]
    for signal, receiver in receivers:
        signal.connect(receiver)
    yield caught
    for signal, receiver in receivers:
        signal.disconnect(receiver)


def test_enqueued_started_and_finished_are_sent(worker: RuntimeThread, received: Received) -> None:
    ok = t.dj_meaning_of_life.enqueue()
    bad = t.dj_value_error.enqueue()
    for result in (ok, bad):
        finished(result)
        # mypy infers no lambda with a default argument.
        wait_until(lambda r=result: len(received.of(r.id)) == 3)  # type: ignore[misc]

    for result, status in ((ok, TaskResultStatus.SUCCESSFUL), (bad, TaskResultStatus.FAILED)):
        events = received.of(result.id)
        # Enqueued is sent by this thread once the record is stored, and may come after
        # the worker thread's started; the worker's own two are in order.
        assert ("enqueued", WorkersBackend, TaskResultStatus.READY) in events
        assert [e for e in events if e[0] != "enqueued"] == [
            ("started", WorkersBackend, TaskResultStatus.RUNNING),
            ("finished", WorkersBackend, status),
        ]
    done = received.results[("finished", ok.id)]
    assert done.return_value == 42
    assert done.worker_ids == [worker.runtime.worker_id]
    assert received.results[("finished", bad.id)].errors[0].exception_class is ValueError


def test_a_running_task_cancelled_still_sends_task_finished(
    worker: RuntimeThread, received: Received
) -> None:
    result = t.dj_wait_for_cancel.enqueue()
    wait_until(lambda: len(received.of(result.id)) == 2)  # enqueued, started

    cancel_task(result.id, System())

    wait_until(lambda: len(received.of(result.id)) == 3)
    assert received.of(result.id)[2] == ("finished", WorkersBackend, TaskResultStatus.FAILED)
    error = received.results[("finished", result.id)].errors[0]
    assert error.exception_class is TaskCancelled
    assert "Cancelled by user" in error.traceback


def test_no_django_signals_for_tasks_submitted_with_submit_task(
    worker: RuntimeThread, db_store: DatabaseWorkerStore, received: Received
) -> None:
    task_id = submit_task("k", t.dj_meaning_of_life, Owner("alice"), store=db_store)
    wait_until(lambda: get_task_status(task_id, System()).is_finished)
    marker = t.dj_noop.enqueue()  # its end comes after, so any signal for task_id came first
    finished(marker)
    wait_until(lambda: len(received.of(marker.id)) == 3)

    assert received.of(task_id) == []


# -- a real runworkers process ------------------------------------------------------------------


@pytest.mark.integration
def test_unchanged_task_functions_run_on_runworkers(db_store: DatabaseWorkerStore) -> None:
    plain = t.dj_meaning_of_life.enqueue()
    coroutine = t.dj_async_add.enqueue(2, 3)
    with_context = t.dj_get_task_id.enqueue()
    failing = t.dj_value_error.enqueue()
    ordered = [t.dj_noop.using(priority=p).enqueue() for p in (-5, 5, 0)]

    run_burst("--concurrency", "1")

    results: list[TaskResult[..., Any]] = [plain, coroutine, with_context, failing, *ordered]
    for result in results:
        result.refresh()
    assert plain.return_value == 42
    assert coroutine.return_value == 5
    assert with_context.return_value == with_context.id
    assert failing.status == TaskResultStatus.FAILED
    assert failing.errors[0].exception_class is ValueError
    assert "This task failed due to ValueError" in failing.errors[0].traceback
    # Run by the subprocess: worker ids are "<host>:<pid>:<suffix>".
    assert plain.worker_ids[0].split(":")[1] != str(os.getpid())
    by_start = sorted(ordered, key=lambda r: r.started_at)  # type: ignore[arg-type, return-value]
    assert [r.task.priority for r in by_start] == [5, 0, -5]
