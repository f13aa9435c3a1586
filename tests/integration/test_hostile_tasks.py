"""Hostile tasks and records under real ``runworkers`` subprocesses.

Each hostile task ends its record FAILED with a useful error, and its worker
serves on; only ``os._exit`` takes its worker down, and a second worker's
zombie sweep then recovers its task. A record that no end can be written for
is logged by the sweep, and stops neither the recovery of the others nor the
start of the worker.
"""

from __future__ import annotations

from typing import Any

import pytest

from django_workers import System, TaskStatus, clock, submit_task
from django_workers.info import TaskInfo
from django_workers.models import TaskRecord, WorkflowRecord
from django_workers.stores.database import DatabaseWorkerStore
from django_workers.workflows import Workflow
from tests import tasks
from tests.helpers import WorkerProcesses, wait_for_status

pytestmark = pytest.mark.integration

COMPLETED, FAILED, RUNNING = TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.RUNNING
WORKER_LOST = "django_workers.exceptions.WorkerLost"

#: Each hostile task, the type of the error it ends FAILED with, and words of its message.
HOSTILE_TASKS: dict[str, tuple[Any, str, str]] = {
    "sys-exit": (tasks.exits, "builtins.SystemExit", "3"),
    "recursion": (tasks.recurses, "builtins.RecursionError", "maximum recursion depth"),
    "unserializable": (
        tasks.returns_unserializable,
        "django_workers.exceptions.ArgumentsNotSerializable",
        "JSON-serializable",
    ),
    "lone-surrogate": (
        tasks.returns_lone_surrogate,
        "django_workers.exceptions.ArgumentsNotSerializable",
        "lone surrogate",
    ),
    "too-deep": (
        tasks.returns_too_deep,
        "django_workers.exceptions.ArgumentsNotSerializable",
        "nested too deeply",
    ),
    "huge": (tasks.big_result, "django_workers.exceptions.ResultTooLarge", "RESULT_MAX_BYTES"),
    "unprintable": (
        tasks.raises_unprintable,
        "tests.tasks.Unprintable",
        "its text could not be made",
    ),
    "huge-message": (tasks.raises_huge_message, "builtins.ValueError", "mmmm"),
}


@pytest.fixture
def store(transactional_db: None) -> DatabaseWorkerStore:
    return DatabaseWorkerStore()


def submit(key: str, task: Any, **kwargs: Any) -> str:
    return submit_task(key, task, System(), scope="global", **kwargs)


def test_each_hostile_task_ends_failed_and_its_worker_serves_on(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    ids = {
        name: submit(name, task, args=[10**6] if task is tasks.big_result else [])
        for name, (task, _type, _words) in HOSTILE_TASKS.items()
    }
    after = submit("after", tasks.add, args=[2, 3])
    worker = worker_processes.start("--burst", "--concurrency", "1")
    assert worker.wait(120.0) == 0, worker.log()
    for name, (_task, kind, words) in HOSTILE_TASKS.items():
        info = store.get_task_info(ids[name])
        assert info is not None
        assert info.status == FAILED, (name, info, worker.log())
        assert info.error is not None
        assert (info.error.type, name) == (kind, name)
        assert words in info.error.message, (name, info.error.message[:200])
        assert info.error.traceback, name
    ended = store.get_task_info(after)
    assert ended is not None
    assert (ended.status, ended.result) == (COMPLETED, 5)


def test_a_task_that_ends_its_process_is_recovered_by_the_next_workers_sweep(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    task_id = submit("crash", tasks.os_exits)
    victim = worker_processes.start()
    assert victim.wait(60.0) == 7  # its own exit code: nothing else ended it
    running = wait_for_status(store, task_id, RUNNING)
    survivor = worker_processes.start("--burst")
    assert survivor.wait(60.0) == 0, survivor.log()
    info = store.get_task_info(task_id)
    assert info is not None
    assert info.status == FAILED
    assert info.error is not None
    assert info.error.type == WORKER_LOST
    assert info.worker_id is None or info.worker_id == running.worker_id


def _claimed_by_a_dead_worker(store: DatabaseWorkerStore, *queues: str) -> list[TaskInfo]:
    """Claim what waits in ``queues`` as a worker that holds no lease: dead at once."""
    return store.claim("ghost:1:dead", list(queues), 10, clock.now())


def test_a_record_no_end_can_be_written_for_stops_no_worker_from_starting(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    wf = Workflow("wf", System())
    wf.add("node", tasks.noop, queue="lost")
    wf.submit(store=store)
    plain = submit("plain", tasks.add, args=[1, 2], queue="lost")
    assert len(_claimed_by_a_dead_worker(store, "lost")) == 2
    # A workflow row that no longer names its node, as a hand edit might leave it:
    # the node's end cannot be applied to it.
    WorkflowRecord.objects.filter(pk="wf").update(nodes=[])
    after = submit("after", tasks.add, args=[2, 3])
    worker = worker_processes.start("--burst")
    assert worker.wait(60.0) == 0, worker.log()
    assert "The zombie sweep could not end task wf:node" in worker.log()
    recovered = store.get_task_info(plain)
    assert recovered is not None
    assert recovered.status == FAILED
    assert recovered.error is not None
    assert recovered.error.type == WORKER_LOST
    assert TaskRecord.objects.get(pk="wf:node").status == RUNNING  # left for a later sweep
    done = store.get_task_info(after)
    assert done is not None
    assert (done.status, done.result) == (COMPLETED, 5)
