"""Retries are records: real ``runworkers`` processes, deploys and crashes in between.

A failed attempt with retries left goes back to PENDING until its backoff has
passed; no thread waits for it, any worker takes it, a SIGTERM keeps it, and a
cancel ends it at once. A run stopped by a worker's shutdown goes back to its
queue without counting an attempt. An undo interrupted by a crash is retried.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from django_workers import (
    Owner,
    System,
    TaskOptions,
    TaskStatus,
    cancel_task,
    get_task_status,
    submit_task,
)
from django_workers.handles import close_listeners
from django_workers.stores.database import DatabaseWorkerStore
from django_workers.workflows import Workflow
from tests import tasks
from tests.helpers import WorkerProcesses, wait_for_status, wait_until
from tests.models import Execution

pytestmark = pytest.mark.integration

PENDING, RUNNING, COMPLETED = TaskStatus.PENDING, TaskStatus.RUNNING, TaskStatus.COMPLETED
FAILED, CANCELLED = TaskStatus.FAILED, TaskStatus.CANCELLED


@pytest.fixture(autouse=True, scope="module")
def _close_listeners() -> Iterator[None]:
    yield
    close_listeners()


@pytest.fixture
def store(transactional_db: None) -> DatabaseWorkerStore:
    return DatabaseWorkerStore()


def submit(key: str, task: object, **kwargs: object) -> str:
    return submit_task(key, task, System(), scope="global", **kwargs)  # type: ignore[arg-type]


def retrying(store: DatabaseWorkerStore, task_id: str) -> None:
    """Wait until ``task_id`` failed its first attempt and waits for its retry."""
    wait_until(
        lambda: (info := store.get_task_info(task_id)) is not None and info.retrying,
        timeout=20.0,
    )


def test_a_sigterm_during_a_backoff_keeps_the_retry_for_the_next_worker(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    options = TaskOptions(retries=2, retry_backoff=3.0, retry_jitter=False)
    task_id = submit("flaky", tasks.fail_until_attempt, args=[2], options=options)
    first = worker_processes.start()
    retrying(store, task_id)
    first.send(signal.SIGTERM)
    assert first.wait(20.0) == 0  # nothing was running: the drain is immediate
    waiting = store.get_task_info(task_id)
    assert waiting is not None
    assert (waiting.status, waiting.attempts, waiting.retry_summary() is not None) == (
        PENDING,
        1,
        True,
    )
    worker_processes.start()
    done = wait_for_status(store, task_id, COMPLETED, timeout=30.0)
    assert (done.result, done.attempts) == (2, 2)
    assert [e.message for e in done.errors] == ["attempt 1 fails"]


def test_a_worker_with_one_thread_runs_other_tasks_while_a_retry_waits(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    worker_processes.start("--concurrency", "1")
    options = TaskOptions(retries=1, retry_backoff=30.0, retry_jitter=False)
    backing_off = submit("backing-off", tasks.fail_until_attempt, args=[2], options=options)
    retrying(store, backing_off)
    other = submit("other", tasks.add, args=[2, 3])
    assert wait_for_status(store, other, COMPLETED, timeout=20.0).result == 5
    still = store.get_task_info(backing_off)
    assert still is not None
    assert (still.status, still.attempts) == (PENDING, 1)


def test_a_cancel_during_a_backoff_ends_the_task_at_once(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    worker_processes.start()
    options = TaskOptions(retries=3, retry_backoff=30.0, retry_jitter=False)
    task_id = submit_task(
        "doomed", tasks.fail_until_attempt, Owner("ann"), args=[9], options=options
    )
    retrying(store, task_id)
    ended = cancel_task(task_id, Owner("ann"))
    assert (ended.status, ended.attempts) == (CANCELLED, 1)
    assert get_task_status(task_id, Owner("ann")).status == CANCELLED


def test_retry_after_asks_for_the_next_attempt_later_and_fails_with_its_cause_at_the_end(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    worker_processes.start()
    later = submit("later", tasks.retry_once_after, args=[0.5], options=TaskOptions(retries=1))
    never = submit("never", tasks.retry_from_lookup_error, options=TaskOptions(retries=2))
    done = wait_for_status(store, later, COMPLETED, timeout=20.0)
    assert (done.result, [e.type for e in done.errors]) == (2, ["django_workers.exceptions.Retry"])
    assert done.errors[0].message == "the service said: try again later"
    failed = wait_for_status(store, never, FAILED, timeout=20.0)
    assert failed.attempts == 3
    assert failed.error is not None
    assert (failed.error.type, failed.error.message) == (
        "builtins.LookupError",
        "the row is not there yet",
    )


def test_an_undo_interrupted_by_a_kill_is_retried_and_the_workflow_is_compensated(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    victim = worker_processes.start()
    wf = Workflow("saga", System())
    charge = wf.add("charge", tasks.add, args=[1, 1]).undo(tasks.undo_that_hangs_first)
    wf.add("ship", tasks.fail).after(charge)
    handle = wf.submit()
    undo_id = wait_until(
        lambda: next(
            (n.undo.task_id for n in handle.status().nodes if n.undo and n.undo.task_id),
            None,
        ),
        timeout=20.0,
    )
    wait_until(Execution.objects.filter(task_id=undo_id).exists, timeout=20.0)
    victim.kill()  # mid-undo
    worker_processes.start()  # its start-up sweep finds the dead process on this host
    assert handle.wait(30.0).state == "compensated"
    undone = store.get_task_info(undo_id)
    assert undone is not None
    assert (undone.status, undone.result, undone.attempts) == (
        COMPLETED,
        "undone on attempt 2",
        2,
    )
    assert Execution.objects.filter(task_id=undo_id).count() == 2
