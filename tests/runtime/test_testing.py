"""django_workers.testing: tasks run in the test's own thread and transaction, and direct calls."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test import TestCase, override_settings

from django_workers import (
    CancelReason,
    RuntimeInTransaction,
    System,
    TaskCancelled,
    TaskOptions,
    TaskStatus,
    cancel_task,
    current_run,
    default_store,
    get_task_status,
    submit_task,
)
from django_workers.runtime.runtime import WorkerRuntime
from django_workers.signals import run_finished, run_started
from django_workers.stores import WorkerStore
from django_workers.stores.database import DatabaseWorkerStore
from django_workers.testing import (
    TasksKeepComing,
    Workers,
    WorkersTestMixin,
    call_task,
    capture_tasks,
    run_tasks,
    task_run,
)
from tests import tasks as t
from tests.conftest import STORES

SYS = System()
MEMORY_STORE = "django_workers.stores.memory.InMemoryWorkerStore"


@pytest.fixture(params=STORES)
def default(request: pytest.FixtureRequest) -> Iterator[WorkerStore]:
    """The default store (tasks that submit or cancel use it), memory or database in turn."""
    settings = {"STORE": MEMORY_STORE} if request.param == "memory" else {}
    with override_settings(DJANGO_WORKERS=settings):
        yield default_store()


def submit(task: object, key: str, **options: object) -> str:
    return submit_task(key, task, SYS, scope="global", **options)  # type: ignore[arg-type]


# -- run_tasks ------------------------------------------------------------------------------


def test_runs_a_submitted_task_to_completion(default: WorkerStore) -> None:
    task_id = submit(t.add, "sum", args=[2, 3])

    [ended] = run_tasks()

    assert (ended.id, ended.status, ended.result) == (task_id, TaskStatus.COMPLETED, 5)
    assert get_task_status(task_id, SYS).result == 5
    assert run_tasks() == []


def test_a_failure_is_recorded_with_its_exception(default: WorkerStore) -> None:
    submit(t.fail, "bad")

    [ended] = run_tasks()

    assert ended.status == TaskStatus.FAILED
    assert ended.error is not None
    assert (ended.error.type, ended.error.message) == ("builtins.ValueError", "boom")


def test_retries_run_without_their_backoff_by_default(default: WorkerStore) -> None:
    options = TaskOptions(retries=2, retry_backoff=60, retry_jitter=False)
    submit(t.fail_until_attempt, "flaky", args=[3], options=options)
    started = time.monotonic()

    [ended] = run_tasks()

    assert time.monotonic() - started < 10  # two backoffs of 60 s and 120 s were skipped
    assert (ended.status, ended.result, ended.attempts) == (TaskStatus.COMPLETED, 3, 3)
    assert [e.message for e in ended.errors] == ["attempt 1 fails", "attempt 2 fails"]


def test_retries_wait_their_backoff_when_asked(default: WorkerStore) -> None:
    options = TaskOptions(retries=1, retry_backoff=0.3, retry_jitter=False)
    submit(t.fail_until_attempt, "slow-flaky", args=[2], options=options)
    started = time.monotonic()

    [ended] = run_tasks(backoff=True)

    assert time.monotonic() - started >= 0.3
    assert (ended.status, ended.attempts) == (TaskStatus.COMPLETED, 2)


def test_progress_is_written_to_the_store_while_the_task_runs(default: WorkerStore) -> None:
    submit(t.progress_as_stored, "progress", args=[40])

    [ended] = run_tasks()

    assert (ended.status, ended.result) == (TaskStatus.COMPLETED, 40.0)


def test_current_run_is_the_task_being_run(default: WorkerStore) -> None:
    task_id = submit(t.current_task_id, "whoami")

    assert run_tasks()[0].result == task_id


def test_a_task_that_cancels_itself_ends_cancelled(default: WorkerStore) -> None:
    submit(t.cancels_itself, "self-cancel")

    [ended] = run_tasks()

    assert (ended.status, ended.cancel_reason) == (TaskStatus.CANCELLED, CancelReason.USER)


def test_a_task_cancelled_before_the_run_never_runs(default: WorkerStore) -> None:
    task_id = submit(t.add, "cancelled", args=[1, 1])
    cancel_task(task_id, SYS)

    assert run_tasks() == []
    assert get_task_status(task_id, SYS).status == TaskStatus.CANCELLED


def test_tasks_submitted_by_tasks_run_too(default: WorkerStore) -> None:
    parent = submit(t.submits_child, "parent", args=["child"])

    ended = run_tasks()

    assert [(info.id, info.status) for info in ended] == [
        (parent, TaskStatus.COMPLETED),
        ("child", TaskStatus.COMPLETED),
    ]
    assert ended[1].result == 5


def test_a_task_that_resubmits_itself_forever_fails_the_test(default: WorkerStore) -> None:
    submit(t.resubmits_itself, "chain-0", args=[0])

    with pytest.raises(TasksKeepComing, match=r"ran 5 tasks .*resubmits_itself.*max_runs"):
        run_tasks(max_runs=5)


def test_max_runs_must_be_a_positive_int(default: WorkerStore) -> None:
    with pytest.raises(ValueError, match="max_runs must be an int of at least 1, got 0"):
        run_tasks(max_runs=0)


def test_only_the_named_queues_run(default: WorkerStore) -> None:
    mail = submit(t.noop, "mail", queue="emails")
    report = submit(t.noop, "report", queue="reports")

    assert [info.id for info in run_tasks(queues=["emails"])] == [mail]
    assert get_task_status(report, SYS).status == TaskStatus.PENDING


def test_the_result_limit_holds(default: WorkerStore) -> None:
    with override_settings(DJANGO_WORKERS={**_settings_of(default), "RESULT_MAX_BYTES": 100}):
        submit(t.big_result, "big", args=[1000])
        [ended] = run_tasks()

    assert ended.status == TaskStatus.FAILED
    assert ended.error is not None
    assert ended.error.type == "django_workers.exceptions.ResultTooLarge"


def test_a_timeout_stops_a_task_that_checks_its_token(default: WorkerStore) -> None:
    submit(t.wait_for_cancel, "slow", args=[10], options=TaskOptions(timeout=0.2))

    [ended] = run_tasks()

    assert (ended.status, ended.cancel_reason) == (TaskStatus.FAILED, CancelReason.TIMEOUT)
    assert ended.error is not None
    assert ended.error.type == "django_workers.exceptions.TaskTimeoutError"


def test_signals_are_sent_around_each_run(default: WorkerStore) -> None:
    seen: list[tuple[str, TaskStatus]] = []

    def started(info: object, **kwargs: object) -> None:
        seen.append(("started", info.status))  # type: ignore[attr-defined]

    def finished(info: object, **kwargs: object) -> None:
        seen.append(("finished", info.status))  # type: ignore[attr-defined]

    run_started.connect(started)
    run_finished.connect(finished)
    try:
        submit(t.noop, "signals")
        run_tasks()
    finally:
        run_started.disconnect(started)
        run_finished.disconnect(finished)

    assert seen == [("started", TaskStatus.RUNNING), ("finished", TaskStatus.COMPLETED)]


def test_an_explicit_store_is_used(store: WorkerStore) -> None:
    task_id = submit_task("sum", t.add, SYS, args=[1, 2], scope="global", store=store)

    [ended] = run_tasks(store)

    assert (ended.id, ended.result) == (task_id, 3)


def _settings_of(store: WorkerStore) -> dict[str, str]:
    return {} if isinstance(store, DatabaseWorkerStore) else {"STORE": MEMORY_STORE}


# -- capture_tasks ----------------------------------------------------------------------------


def test_capture_collects_the_runs_submitted_in_the_block(default: WorkerStore) -> None:
    before = submit(t.noop, "before")
    with capture_tasks() as submitted:
        first = submit(t.add, "one", args=[1, 1])
        second = submit(t.add, "two", args=[2, 2])
        submit(t.add, "one", args=[1, 1])  # joins the live task: nothing new
        assert submitted == []

    assert [info.id for info in submitted] == [first, second]
    assert {info.status for info in submitted} == {TaskStatus.PENDING}
    assert before not in {info.id for info in submitted}


# -- the pytest fixture and the TestCase mixin ------------------------------------------------


def test_the_workers_fixture_runs_tasks_in_the_test_transaction(workers: Workers) -> None:
    with workers.capture() as submitted:
        task_id = submit(t.add, "fixture", args=[4, 5])

    assert [info.id for info in submitted] == [task_id]
    assert [(info.id, info.result) for info in workers.run()] == [(task_id, 9)]


class MixinTests(WorkersTestMixin, TestCase):
    def test_run_tasks_inside_the_test_case_transaction(self) -> None:
        with self.capture_tasks() as submitted:
            parent = submit(t.submits_child, "mixin-parent", args=["mixin-child"])

        ended = self.run_tasks()

        assert [info.id for info in submitted] == [parent]
        assert [(info.id, info.status) for info in ended] == [
            (parent, TaskStatus.COMPLETED),
            ("mixin-child", TaskStatus.COMPLETED),
        ]
        assert connection.in_atomic_block

    def test_retries_inside_the_test_case_transaction(self) -> None:
        options = TaskOptions(retries=1, retry_backoff=60)
        submit(t.fail_until_attempt, "mixin-retry", args=[2], options=options)

        [ended] = self.run_tasks()

        assert (ended.status, ended.attempts) == (TaskStatus.COMPLETED, 2)


# -- a runtime where it cannot work ---------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.timeout(30)  # before the refusal: a hang on SQLite, "Lease lost" on PostgreSQL
def test_a_runtime_refuses_to_start_inside_a_transaction() -> None:
    runtime = WorkerRuntime(DatabaseWorkerStore(), burst=True)
    started = time.monotonic()

    with pytest.raises(RuntimeInTransaction, match=r"django_workers\.testing.*transaction=True"):
        runtime.run()

    assert time.monotonic() - started < 5
    assert not runtime.started.is_set()


@pytest.mark.django_db(transaction=True)
def test_a_runtime_outside_a_transaction_runs() -> None:
    task_id = submit_task("outside", t.add, SYS, args=[1, 2], scope="global")

    assert WorkerRuntime(DatabaseWorkerStore(), burst=True, concurrency=1).run() == 0
    assert get_task_status(task_id, SYS).result == 3


# -- task_run and call_task -----------------------------------------------------------------


def test_call_task_runs_a_function_under_a_fresh_run() -> None:
    assert call_task(t.add, 2, b=3) == 5
    assert call_task(t.current_task_id) == "test-task"


def test_call_task_runs_async_and_django_tasks() -> None:
    assert call_task(t.async_add, 1, 2) == 3
    assert call_task(t.django_add, 3, 4) == 7


def test_call_task_passes_arguments_through_json() -> None:
    with pytest.raises(TypeError, match="must be JSON-serializable"):
        call_task(t.add, object(), 1)


def test_task_run_records_progress() -> None:
    with task_run(task_id="report-7") as run:
        assert call_task(t.with_progress, 4) == 4

    assert run.progress_reports == [25.0, 50.0, 75.0, 100.0]
    assert run.info.id == "report-7"


def test_a_test_may_cancel_the_run() -> None:
    with task_run() as run:
        assert run.cancel() is True
        assert current_run().cancel_requested
        with pytest.raises(TaskCancelled, match="Cancelled by user"):
            call_task(t.wait_for_cancel, 5)

    assert run.cancel_requested


def test_task_run_takes_options_and_attempts() -> None:
    with task_run(options=TaskOptions(timeout=3), attempts=2):
        assert call_task(t.fail_until_attempt, 2) == 2
        assert current_run().options.timeout == 3


def test_outside_a_run_current_run_still_refuses() -> None:
    with task_run():
        pass

    with pytest.raises(RuntimeError, match="only available inside a task"):
        current_run()
