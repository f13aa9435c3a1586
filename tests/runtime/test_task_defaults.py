"""Declared defaults and retry rules as a worker applies them; a record that names no task;
async submit. In-process runtimes over every store; ``tests/integration/test_task_defaults.py``
does the same with real worker processes."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from django_workers import (
    AuthorizationError,
    InvalidTaskOptions,
    Owner,
    System,
    TaskHandle,
    TaskNotAllowed,
    TaskOptions,
    TaskStatus,
    TaskSubmission,
    asubmit,
    asubmit_task,
    asubmit_tasks,
    get_task_status,
    set_queue_authorizer,
    submit_task,
)
from django_workers.models import TaskRecord
from django_workers.stores import WorkerStore
from django_workers.stores.database import DatabaseWorkerStore
from tests import tasks
from tests.helpers import RuntimeThread, start_runtime, wait_for_status

COMPLETED, FAILED = TaskStatus.COMPLETED, TaskStatus.FAILED
ALICE = Owner("alice")


@pytest.fixture
def served(tx_store: WorkerStore) -> Iterator[RuntimeThread]:
    runtime = start_runtime(tx_store, concurrency=2)
    yield runtime
    if runtime.alive:
        runtime.stop()


def submit(store: WorkerStore, key: str, task: Any, **kwargs: Any) -> str:
    return submit_task(key, task, System(), scope="global", store=store, **kwargs)


def error_types(store: WorkerStore, task_id: str) -> list[str]:
    info = store.get_task_info(task_id)
    assert info is not None
    return [e.type for e in info.errors]


# -- retry rules ----------------------------------------------------------------------------


def test_retry_on_retries_a_listed_exception_and_fails_any_other_at_once(
    tx_store: WorkerStore, served: RuntimeThread
) -> None:
    listed = submit(tx_store, "down", tasks.retried_on_connection_errors, args=["down"])
    other = submit(tx_store, "bad", tasks.retried_on_connection_errors, args=["bad"])
    done = wait_for_status(tx_store, listed, COMPLETED)
    assert (done.result, done.attempts) == (2, 2)
    assert error_types(tx_store, listed) == ["tests.tasks.ServiceDown"]
    failed = wait_for_status(tx_store, other, FAILED)
    assert failed.attempts == 1  # retries=3 declared, but ValueError is not in retry_on
    assert failed.error is not None
    assert (failed.error.type, failed.error.message) == ("builtins.ValueError", "bad data")


def test_retry_never_fails_at_once_and_options_given_at_submit_override_it(
    tx_store: WorkerStore, served: RuntimeThread
) -> None:
    never = submit(tx_store, "never", tasks.never_retried_on_key_errors)
    assert wait_for_status(tx_store, never, FAILED).attempts == 1
    # The call's retry_never (empty) replaces the declared one: KeyError is retried.
    given = TaskOptions(retry_never=[], retries=1)
    retried = submit(tx_store, "retried", tasks.never_retried_on_key_errors, options=given)
    failed = wait_for_status(tx_store, retried, FAILED)
    assert failed.attempts == 2
    assert error_types(tx_store, retried) == ["builtins.KeyError", "builtins.KeyError"]


def test_a_retry_the_task_asks_for_is_taken_whatever_retry_on_says(
    tx_store: WorkerStore, served: RuntimeThread
) -> None:
    task_id = submit(tx_store, "asks", tasks.asks_for_a_retry)
    done = wait_for_status(tx_store, task_id, COMPLETED)
    assert (done.result, done.attempts) == (2, 2)
    assert error_types(tx_store, task_id) == ["django_workers.exceptions.Retry"]


# -- a record that names no task -----------------------------------------------------------


def test_a_record_that_names_no_task_fails_without_its_module_being_imported(
    db_store: DatabaseWorkerStore,
) -> None:
    task_id = submit(
        db_store, "rewritten", tasks.add, args=[1, 2], queue="held", options=TaskOptions(retries=3)
    )
    # As a bug or an injection elsewhere in the site might rewrite it. Importing "this"
    # prints the Zen of Python: the worker must refuse the path before any import.
    sys.modules.pop("this", None)
    TaskRecord.objects.filter(id=task_id).update(task_path="this.main", queue="default")
    runtime = start_runtime(db_store)
    try:
        failed = wait_for_status(db_store, task_id, FAILED)
    finally:
        runtime.stop()
    assert "this" not in sys.modules
    assert failed.attempts == 1  # never retried, though retries=3
    assert failed.error is not None
    assert failed.error.type == "django_workers.exceptions.TaskNotAllowed"
    assert "'this.main' is not in a module a worker may run tasks from" in failed.error.message
    assert "TASK_MODULES" in failed.error.message


def test_a_record_that_names_a_function_imported_into_an_app_fails(
    db_store: DatabaseWorkerStore,
) -> None:
    task_id = submit(db_store, "imported", tasks.add, args=[1, 2], queue="held")
    TaskRecord.objects.filter(id=task_id).update(
        task_path="tests.tasks.getoutput", args=["echo ran"], queue="default"
    )
    runtime = start_runtime(db_store)
    try:
        failed = wait_for_status(db_store, task_id, FAILED)
    finally:
        runtime.stop()
    assert failed.result is None
    assert failed.error is not None
    assert failed.error.type == "django_workers.exceptions.TaskNotAllowed"
    assert "from 'subprocess', which is no task" in failed.error.message


# -- async submit ------------------------------------------------------------------------------


def test_asubmit_task_submits_as_submit_task_does(store: WorkerStore) -> None:
    task_id = async_to_sync(asubmit_task)(
        "async", tasks.retried_on_connection_errors, ALICE, args=["down"], store=store
    )
    info = get_task_status(task_id, ALICE, store=store)
    assert (info.key, info.task_path, info.args) == (
        "async",
        "tests.tasks.retried_on_connection_errors",
        ["down"],
    )
    assert info.options.retries == 3  # the declared defaults apply here too


def test_asubmit_tasks_submits_a_batch(store: WorkerStore) -> None:
    specs = [TaskSubmission(key=f"a{n}", task=tasks.add, args=[n, 1]) for n in range(3)]
    ids = async_to_sync(asubmit_tasks)(specs, ALICE, store=store)
    assert [get_task_status(i, ALICE, store=store).args for i in ids] == [[0, 1], [1, 1], [2, 1]]


def test_asubmit_returns_a_handle(store: WorkerStore) -> None:
    handle = async_to_sync(asubmit)("handled", tasks.add, ALICE, args=[1, 2], store=store)
    assert isinstance(handle, TaskHandle)
    assert handle.status().status == TaskStatus.PENDING


async def refused_path(store: WorkerStore) -> object:
    return await asubmit_task("k", "os.getcwd", ALICE, store=store)


async def bad_priority(store: WorkerStore) -> object:
    return await asubmit("k", tasks.add, ALICE, args=[1, 2], priority=500, store=store)


async def refused_in_a_batch(store: WorkerStore) -> object:
    specs = [TaskSubmission(key="ok", task=tasks.add), TaskSubmission(key="k", task="os.getcwd")]
    return await asubmit_tasks(specs, ALICE, store=store)


async def no_authority(store: WorkerStore) -> object:
    return await asubmit_task("k", tasks.add, None, store=store)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (refused_path, TaskNotAllowed),
        (bad_priority, InvalidTaskOptions),
        (refused_in_a_batch, TaskNotAllowed),
        (no_authority, TypeError),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_async_submit_refuses_as_the_sync_one_does_and_writes_nothing(
    store: WorkerStore, call: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        async_to_sync(call)(store)
    assert store.list_tasks(user_id=None) == []


def test_async_submit_asks_the_queue_authorizer(store: WorkerStore) -> None:
    set_queue_authorizer(store, lambda queue, user_id: queue != "private")
    with pytest.raises(AuthorizationError):
        async_to_sync(asubmit_task)("k", tasks.add, ALICE, queue="private", store=store)
    assert store.list_tasks(user_id=None) == []
