"""One stop request means one drain under ``runworkers --processes``, whoever signals whom.

A terminal's Ctrl-C, systemd's ``KillMode=control-group`` and some container
runtimes signal the supervisor and its worker processes together; the
supervisor then forwards its own SIGTERM. Each test here signals the whole
process group of a real ``runworkers`` with ``os.killpg``.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest

from django_workers import System, TaskStatus, submit_task
from django_workers.models import WorkerProcess
from django_workers.runtime.process import FORWARDED_STOP
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


@pytest.mark.parametrize(
    "send",
    [
        pytest.param(lambda pid: os.kill(pid, signal.SIGTERM), id="SIGTERM-to-the-supervisor"),
        pytest.param(lambda pid: os.killpg(pid, signal.SIGINT), id="SIGINT-to-the-group"),
    ],
)
def test_a_stop_while_the_worker_processes_start_up_stops_them_cleanly(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses, send: Any
) -> None:
    worker = worker_processes.start("--processes", "2")
    # Both started, neither done importing Django: the stop reaches them before their handlers.
    wait_until(lambda: worker.log().count("Started worker process") == 2, timeout=20.0)
    send(worker.pid)
    assert worker.wait(30.0) == 0, worker.log()
    assert "Traceback" not in worker.log()
    assert not WorkerProcess.objects.exists()  # each drained and gave its lease back


def test_a_stop_forwarded_while_a_worker_process_exits_does_not_fail_it(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    worker = worker_processes.start("--processes", "2")
    worker_processes.wait_registered(2)
    children = list(WorkerProcess.objects.values_list("pid", flat=True))
    stop_hammering = threading.Event()

    def hammer() -> None:
        # The forwarded stop at every moment of the children's exit, as a late forward lands.
        alive = set(children)
        while alive and not stop_hammering.is_set():
            for pid in list(alive):
                try:
                    os.kill(pid, FORWARDED_STOP)
                except ProcessLookupError:
                    alive.discard(pid)
            time.sleep(0.001)

    hammering = threading.Thread(target=hammer)
    hammering.start()
    try:
        worker.send(signal.SIGTERM)
        assert worker.wait(30.0) == 0, worker.log()
    finally:
        stop_hammering.set()
        hammering.join()
    assert "was killed by" not in worker.log(), worker.log()
