"""One stop request means one drain under ``runworkers --processes``, whoever signals whom.

A terminal's Ctrl-C, systemd's ``KillMode=control-group`` and some container
runtimes signal the supervisor and its worker processes together; the
supervisor then forwards its own SIGTERM. Each test here signals the whole
process group of a real ``runworkers`` with ``os.killpg``.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from django_workers import System, TaskStatus, submit_task
from django_workers.stores.database import DatabaseWorkerStore
from tests import tasks
from tests.helpers import WorkerProcesses, WorkerSubprocess, wait_until
from tests.models import Execution

pytestmark = pytest.mark.integration

#: How long the run under test goes on after the stop request, ignoring its token.
RUN_SECONDS = 2.0


@pytest.fixture
def store(transactional_db: None) -> DatabaseWorkerStore:
    return DatabaseWorkerStore()


def start_with_a_running_task(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> tuple[WorkerSubprocess, str]:
    worker = worker_processes.start("--processes", "2", "--drain-timeout", "30")
    worker_processes.wait_registered(2)
    task_id = submit_task(
        "drained", tasks.record_execution, System(), args=[RUN_SECONDS], scope="global"
    )
    # Started, not only claimed: a claimed task that has not started goes back to its queue.
    wait_until(lambda: Execution.objects.filter(task_id=task_id).exists(), timeout=20.0)
    return worker, task_id


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_process_group_drains_once(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses, signum: int
) -> None:
    worker, task_id = start_with_a_running_task(store, worker_processes)
    # The session leader's pid is its process group id (start_new_session).
    os.killpg(worker.pid, signum)
    assert worker.wait(30.0) == 0, worker.log()
    info = store.get_task_info(task_id)
    assert info is not None
    assert info.status == TaskStatus.COMPLETED, worker.log()
    [execution] = Execution.objects.filter(task_id=task_id)
    assert info.result == execution.pid  # it ran once, and drained to its end


def test_a_second_signal_to_the_process_group_still_exits_at_once(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    worker, task_id = start_with_a_running_task(store, worker_processes)
    os.killpg(worker.pid, signal.SIGINT)
    worker.wait_for_log("Got SIGINT: stopping the worker processes")
    signalled = time.monotonic()
    os.killpg(worker.pid, signal.SIGINT)
    assert worker.wait(5.0) == 130, worker.log()
    assert time.monotonic() - signalled < RUN_SECONDS
    assert store.get_task_info(task_id).status == TaskStatus.RUNNING  # type: ignore[union-attr]
