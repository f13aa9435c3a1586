"""The lines an operator reads: one per task end, calm for cancels and timeouts.

Each test serves an in-memory runtime, stops it (the reporter finishes what is
queued) and then reads every record ``django_workers`` logged.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from django_workers import (
    CancelReason,
    System,
    TaskOptions,
    TaskStatus,
    cancel_task,
    clock,
    submit_task,
)
from django_workers.lifecycle import run_end
from django_workers.runtime.reporter import report_ends
from django_workers.runtime.run import RunHandle
from django_workers.stores.memory import InMemoryWorkerStore
from tests import tasks
from tests.helpers import RuntimeThread, start_runtime, wait_for_status, wait_until

TASKS = "django_workers.runtime.tasks"


pytestmark = pytest.mark.usefixtures("coordination")


@pytest.fixture
def store() -> InMemoryWorkerStore:
    return InMemoryWorkerStore()


@pytest.fixture
def served(store: InMemoryWorkerStore, caplog: pytest.LogCaptureFixture) -> Iterator[RuntimeThread]:
    caplog.set_level(logging.DEBUG, logger="django_workers")
    runtime = start_runtime(store)
    yield runtime
    tasks.reset_coordination()
    if runtime.alive:
        runtime.stop()


def submit(store: InMemoryWorkerStore, task: Any, **kwargs: Any) -> str:
    return submit_task("logged", task, System(), scope="global", store=store, **kwargs)


def lines(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> list[tuple[str, str]]:
    """(logger, message) of the django_workers records at ``level`` or above."""
    return [
        (r.name, r.getMessage())
        for r in caplog.records
        if r.name.startswith("django_workers") and r.levelno >= level
    ]


def task_lines(caplog: pytest.LogCaptureFixture, task_id: str, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == TASKS and r.levelno == level and task_id in r.getMessage()
    ]


def debug_lines(caplog: pytest.LogCaptureFixture, task_id: str) -> list[str]:
    return task_lines(caplog, task_id, logging.DEBUG)


def test_a_failure_logs_its_class_and_message_at_warning_and_its_traceback_at_debug(
    store: InMemoryWorkerStore, served: RuntimeThread, caplog: pytest.LogCaptureFixture
) -> None:
    task_id = submit(store, tasks.fail)
    wait_for_status(store, task_id, TaskStatus.FAILED)
    served.stop()
    [warning] = task_lines(caplog, task_id, logging.WARNING)
    assert warning.startswith(f"Task {task_id} failed after ")
    assert warning.endswith(": builtins.ValueError: boom")
    debug = task_lines(caplog, task_id, logging.DEBUG)
    [traceback] = [line for line in debug if "traceback" in line]
    assert 'raise ValueError("boom")' in traceback
    assert any(line.startswith(f"Task {task_id} started: tests.tasks.fail") for line in debug)


def test_without_debug_a_failure_logs_no_traceback(
    store: InMemoryWorkerStore, served: RuntimeThread, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="django_workers")
    task_id = submit(store, tasks.fail)
    wait_for_status(store, task_id, TaskStatus.FAILED)
    served.stop()
    assert "Traceback" not in caplog.text
    assert len(task_lines(caplog, task_id, logging.WARNING)) == 1


def test_a_cancel_logs_one_calm_line(
    store: InMemoryWorkerStore, served: RuntimeThread, caplog: pytest.LogCaptureFixture
) -> None:
    task_id = submit(store, tasks.wait_for_cancel)
    wait_for_status(store, task_id, TaskStatus.RUNNING)
    cancel_task(task_id, System(), store=store)
    wait_until(lambda: not served.runtime.active_runs())
    served.stop()
    mine = [line for _name, line in lines(caplog) if task_id in line]
    assert len(mine) == 1
    assert mine[0].startswith(f"Task {task_id} cancelled after ")
    assert lines(caplog, logging.WARNING) == []
    assert "moved on" not in caplog.text


@pytest.mark.parametrize(
    ("task", "args"), [(tasks.wait_for_cancel, []), (tasks.ignore_cancel, [0.4])]
)
def test_a_timeout_logs_one_calm_line(
    store: InMemoryWorkerStore,
    served: RuntimeThread,
    caplog: pytest.LogCaptureFixture,
    task: Any,
    args: list[Any],
) -> None:
    task_id = submit(store, task, args=args, options=TaskOptions(timeout=0.2))
    wait_for_status(store, task_id, TaskStatus.FAILED)
    # Once the function returns its own end loses to the timeout; that is logged at DEBUG.
    wait_until(lambda: any("asked to stop" in line for line in debug_lines(caplog, task_id)))
    wait_until(lambda: not served.runtime.active_runs())
    served.stop()
    mine = [(name, line) for name, line in lines(caplog) if task_id in line]
    assert mine == [(TASKS, f"Task {task_id} timed out after 0.2 s; ended FAILED")]
    assert lines(caplog, logging.WARNING) == []
    assert any("asked to stop (timeout)" in line for line in debug_lines(caplog, task_id))


def test_a_retry_and_the_end_are_per_task_lines(
    store: InMemoryWorkerStore,
    served: RuntimeThread,
    caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
) -> None:
    options = TaskOptions(retries=1, retry_backoff=0.01, retry_jitter=False)
    task_id = submit(store, tasks.flaky, args=[request.node.nodeid, 1], options=options)
    wait_for_status(store, task_id, TaskStatus.COMPLETED)
    served.stop()
    [retried, ended] = task_lines(caplog, task_id, logging.INFO)
    assert retried.startswith(f"Task {task_id} attempt 1 of 2 failed after ")
    assert "(builtins.RuntimeError: " in retried
    assert "; retrying in " in retried
    assert ended.startswith(f"Task {task_id} completed in ")


def test_silencing_the_tasks_logger_keeps_the_runtime_lines(
    store: InMemoryWorkerStore, served: RuntimeThread, caplog: pytest.LogCaptureFixture
) -> None:
    logging.getLogger(TASKS).setLevel(logging.ERROR)
    try:
        task_id = submit(store, tasks.fail)
        wait_for_status(store, task_id, TaskStatus.FAILED)
        served.stop()
        assert logging.getLogger("django_workers.runtime.runtime").isEnabledFor(logging.DEBUG)
    finally:
        logging.getLogger(TASKS).setLevel(logging.NOTSET)
    assert [r for r in caplog.records if r.name == TASKS] == []


def test_a_run_recovered_by_another_worker_logs_a_distinct_warning(
    store: InMemoryWorkerStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="django_workers")
    submit(store, tasks.add, args=[1, 2])
    [info] = store.claim("w", None, 1, clock.now())
    handle = RunHandle(info, store, "w")
    handle.request_cancel(CancelReason.SUPERSEDED)
    end = run_end(info, "w", TaskStatus.COMPLETED, clock.now(), result=3)
    report_ends([(end, handle, True)], [False])
    [(name, line)] = lines(caplog)
    assert name == TASKS
    assert "lost its lease and another worker recovered the task" in line
    assert caplog.records[-1].levelno == logging.WARNING
