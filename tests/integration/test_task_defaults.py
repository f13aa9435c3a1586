"""Declared defaults, retry rules and the only-tasks-run rule, with real ``runworkers`` processes.

A ``django_workers.task(retries=2)`` function enqueued through ``django.tasks``
succeeds on its third attempt; ``retry_on`` fails another exception after one
attempt; a path outside the task modules is refused at submit, and a record
rewritten to name ``subprocess.getoutput`` ends FAILED without running it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.tasks import TaskResultStatus

from django_workers import System, TaskNotImportable, TaskStatus, submit_task
from django_workers.handles import close_listeners
from django_workers.models import TaskRecord
from django_workers.stores.database import DatabaseWorkerStore
from tests import tasks
from tests.helpers import WorkerProcesses, wait_for_status

pytestmark = pytest.mark.integration

COMPLETED, FAILED = TaskStatus.COMPLETED, TaskStatus.FAILED


@pytest.fixture(autouse=True, scope="module")
def _close_listeners() -> Iterator[None]:
    yield
    close_listeners()


@pytest.fixture
def store(transactional_db: None) -> DatabaseWorkerStore:
    return DatabaseWorkerStore()


def submit(key: str, task: object, **kwargs: object) -> str:
    return submit_task(key, task, System(), scope="global", **kwargs)  # type: ignore[arg-type]


def test_a_declared_task_enqueued_through_django_tasks_succeeds_on_its_third_attempt(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    worker_processes.start()
    result = tasks.declared_flaky.enqueue()
    done = wait_for_status(store, result.id, COMPLETED, timeout=30.0)
    assert (done.result, done.attempts) == (3, 3)
    assert [e.message for e in done.errors] == ["attempt 1 fails", "attempt 2 fails"]
    assert done.options.retries == 2  # declared with the function, not given to enqueue()
    read = tasks.declared_flaky.get_result(result.id)
    assert (read.status, read.return_value) == (TaskResultStatus.SUCCESSFUL, 3)


def test_retry_on_retries_a_listed_exception_and_fails_another_after_one_attempt(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    worker_processes.start()
    listed = submit("down", tasks.retried_on_connection_errors, args=["down"])
    other = submit("bad", "tests.tasks.retried_on_connection_errors", args=["bad"])
    done = wait_for_status(store, listed, COMPLETED, timeout=30.0)
    assert (done.result, done.attempts) == (2, 2)
    failed = wait_for_status(store, other, FAILED, timeout=30.0)
    assert failed.attempts == 1
    assert failed.error is not None
    assert (failed.error.type, failed.error.message) == ("builtins.ValueError", "bad data")


def test_a_path_outside_the_task_modules_is_refused_at_submit(store: DatabaseWorkerStore) -> None:
    with pytest.raises(TaskNotImportable, match="DJANGO_WORKERS\\['TASK_MODULES'\\]"):
        submit("cwd", "os.getcwd")
    assert not TaskRecord.objects.exists()


def test_a_record_rewritten_to_name_subprocess_getoutput_ends_failed_without_running_it(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    task_id = submit("rewritten", tasks.add, args=[1, 2], queue="held")
    # What a bug, an injection elsewhere in the site, or a careless edit could write.
    TaskRecord.objects.filter(id=task_id).update(
        task_path="subprocess.getoutput", args=[f"touch {marker}"], queue="default"
    )
    worker_processes.start()
    failed = wait_for_status(store, task_id, FAILED, timeout=30.0)
    assert failed.attempts == 1
    assert failed.error is not None
    assert failed.error.type == "django_workers.exceptions.TaskNotAllowed"
    assert "'subprocess.getoutput' is not in a module a worker may run" in failed.error.message
    assert not marker.exists()
    # The worker serves on.
    after = submit("after", tasks.add, args=[2, 3])
    assert wait_for_status(store, after, COMPLETED, timeout=30.0).result == 5
    assert not marker.exists()
