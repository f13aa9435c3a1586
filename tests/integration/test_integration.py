"""Real ``manage.py runworkers`` subprocesses on the test database.

Workers are killed, signalled and restarted while the test process reads
and writes the same database, as a web process would. Children run with a
2 s lease (``tests.helpers.CHILD_SETTINGS``) so recovery fits in a test.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from typing import Any

import pytest
from django.db import connection

from django_workers import (
    CancelReason,
    System,
    TaskOptions,
    TaskStatus,
    TaskSubmission,
    cancel_task,
    submit_task,
    submit_tasks,
)
from django_workers.info import LIVE_STATUSES, TaskInfo
from django_workers.lifecycle import WORKER_LOST_MESSAGE
from django_workers.models import TaskRecord
from django_workers.models import WorkerProcess as Lease
from django_workers.stores.database import DatabaseWorkerStore
from tests import tasks
from tests.helpers import CHILD_SETTINGS, WorkerProcesses, wait_for_status, wait_until
from tests.models import Execution

pytestmark = pytest.mark.integration

COMPLETED, FAILED, CANCELLED = TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED
PENDING = TaskStatus.PENDING
RUNNING = TaskStatus.RUNNING
LEASE = CHILD_SETTINGS["LEASE_TIMEOUT"]
WORKER_LOST = "django_workers.exceptions.WorkerLost"


@pytest.fixture
def store(transactional_db: None) -> DatabaseWorkerStore:
    return DatabaseWorkerStore()


def submit(key: str, task: Any, **kwargs: Any) -> str:
    return submit_task(key, task, System(), scope="global", **kwargs)


def error_of(info: TaskInfo) -> tuple[str, str]:
    assert info.error is not None
    return info.error.type, info.error.message


# -- workers that die ---------------------------------------------------------------------


def test_a_killed_workers_run_is_run_again_by_the_next_worker(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    task_id = submit("hang", tasks.hang_on_first_attempt, options=TaskOptions(retries=1))
    victim = worker_processes.start()
    first = wait_for_status(store, task_id, RUNNING, timeout=20.0)
    victim.kill()
    assert store.get_task_info(task_id).status == RUNNING  # type: ignore[union-attr]
    started = time.monotonic()
    worker_processes.start()
    info = wait_for_status(store, task_id, COMPLETED, timeout=20.0)
    assert (info.result, info.attempts) == ("done on attempt 2", 2)
    assert info.worker_id != first.worker_id
    # A dead pid on this host is known dead at once; no need to wait out the lease.
    assert time.monotonic() - started < 10.0


def test_a_killed_workers_lease_runs_out_and_a_live_worker_recovers_its_run(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    watcher = worker_processes.start("--queues", "elsewhere")
    worker_processes.wait_registered(1)
    task_id = submit("hang", tasks.hang_on_first_attempt)
    victim = worker_processes.start("--queues", "default")
    wait_for_status(store, task_id, RUNNING, timeout=20.0)
    # As if the victim ran on another host: only its lease can tell that it died.
    Lease.objects.filter(pid=victim.pid).update(host="another-host")
    victim.kill()
    killed = time.monotonic()
    info = wait_for_status(store, task_id, FAILED, timeout=LEASE + 10.0)
    recovered_after = time.monotonic() - killed
    assert error_of(info) == (
        WORKER_LOST,
        WORKER_LOST_MESSAGE,
    )
    # Not before the lease ran out (its last heartbeat was at most ~1 s old at the kill),
    # and within the lease plus a sweep interval (half a lease) and some slack.
    assert LEASE - 1.2 <= recovered_after <= LEASE + 2.5, recovered_after
    assert watcher.popen.poll() is None


def test_a_supervisor_restarts_a_killed_worker_process_and_the_run_is_recovered(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    supervisor = worker_processes.start("--processes", "2")
    worker_processes.wait_registered(2)
    task_id = submit("hang", tasks.hang_on_first_attempt, options=TaskOptions(retries=1))
    running = wait_for_status(store, task_id, RUNNING, timeout=20.0)
    assert running.worker_id is not None
    victim = Lease.objects.get(pk=running.worker_id).pid
    os.kill(victim, signal.SIGKILL)
    info = wait_for_status(store, task_id, COMPLETED, timeout=20.0)
    assert (info.result, info.attempts) == ("done on attempt 2", 2)
    supervisor.wait_for_log(f"Worker process {victim} was killed by SIGKILL after ")
    wait_until(lambda: Lease.objects.exclude(pid=victim).count() == 2, timeout=20.0)
    assert supervisor.popen.poll() is None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# -- SIGTERM --------------------------------------------------------------------------------


def wait_started(task_id: str) -> None:
    """Wait until the task's function has begun (not only been claimed: a claimed task that
    has not started when a stop comes goes back to its queue)."""
    wait_until(lambda: Execution.objects.filter(task_id=task_id).exists(), timeout=20.0)


def test_sigterm_gives_a_cooperating_run_back_and_the_next_worker_runs_it(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    worker = worker_processes.start("--drain-timeout", "20")
    task_id = submit("wait", tasks.started_then_wait_for_cancel, args=[3])
    wait_started(task_id)
    worker.send(signal.SIGTERM)
    assert worker.wait(20.0) == 0, worker.log()
    info = store.get_task_info(task_id)
    assert info is not None
    # Stopped by the drain: back in its queue, its attempt not counted.
    assert (info.status, info.attempts, info.cancel_reason) == (PENDING, 0, CancelReason.NONE)
    assert not Lease.objects.filter(pid=worker.pid).exists()
    worker_processes.start()
    done = wait_for_status(store, task_id, COMPLETED, timeout=20.0)
    assert (done.result, done.attempts) == ("not cancelled", 1)


def test_sigterm_leaves_a_run_past_the_drain_timeout_to_the_next_sweep(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    worker = worker_processes.start("--drain-timeout", "0.5")
    task_id = submit("ignores", tasks.started_then_ignore_cancel, args=[60])
    wait_started(task_id)
    worker.send(signal.SIGTERM)
    assert worker.wait(10.0) == 3, worker.log()
    left = store.get_task_info(task_id)
    assert left is not None
    assert (left.status, left.error, left.finished_at) == (RUNNING, None, None)
    worker_processes.start()
    info = wait_for_status(store, task_id, FAILED, timeout=20.0)
    assert error_of(info)[0] == WORKER_LOST


@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_second_sigterm_exits_at_once(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses, processes: str
) -> None:
    worker = worker_processes.start("--drain-timeout", "60", "--processes", processes)
    worker_processes.wait_registered(int(processes))
    task_id = submit("ignores", tasks.started_then_ignore_cancel, args=[60])
    wait_started(task_id)
    worker.send(signal.SIGTERM)
    worker.wait_for_log("Got SIGTERM")
    signalled = time.monotonic()
    worker.send(signal.SIGTERM)
    assert worker.wait(5.0) == 130, worker.log()
    assert time.monotonic() - signalled < 2.0
    assert store.get_task_info(task_id).status == RUNNING  # type: ignore[union-attr]
    # Nothing of it is left running: a supervisor takes its worker processes along.
    pids = list(Lease.objects.values_list("pid", flat=True))
    wait_until(lambda: not any(_alive(pid) for pid in pids), timeout=5.0)


# -- cancel, timeout, retry across the process boundary --------------------------------------


def test_a_cancel_from_another_process_stops_the_run_within_a_second(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses, tmp_path: Any
) -> None:
    worker_processes.start()
    marker = tmp_path / "stopped-because"
    task_id = submit("wait", tasks.wait_for_cancel_marked, args=[str(marker)])
    wait_for_status(store, task_id, RUNNING, timeout=20.0)
    info = cancel_task(task_id, System())
    assert (info.status, info.cancel_reason) == (CANCELLED, CancelReason.USER)
    # The file exists a moment before its text does.
    assert wait_until(lambda: marker.exists() and marker.read_text(), timeout=1.5) == "user"
    after = store.get_task_info(task_id)
    assert after is not None
    assert error_of(after)[1] == "Cancelled by user"


def test_a_timeout_fails_the_task_without_a_retry(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    worker_processes.start()
    options = TaskOptions(timeout=0.5, retries=2, retry_backoff=0.01)
    task_id = submit("slow", tasks.ignore_cancel, args=[60], options=options)
    info = wait_for_status(store, task_id, FAILED, timeout=20.0)
    assert error_of(info) == ("django_workers.exceptions.TaskTimeoutError", "Timed out after 0.5 s")
    assert (info.attempts, info.cancel_reason) == (1, CancelReason.TIMEOUT)


def test_a_failing_task_is_retried_until_it_succeeds(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    worker_processes.start()
    options = TaskOptions(retries=3, retry_backoff=0.05)
    task_id = submit("flaky", tasks.fail_until_attempt, args=[3], options=options)
    info = wait_for_status(store, task_id, COMPLETED, timeout=20.0)
    assert (info.result, info.attempts) == (3, 3)


# -- many processes ---------------------------------------------------------------------------


def test_a_sequential_queue_keeps_order_across_three_processes(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    supervisor = worker_processes.start("--processes", "3", "--concurrency", "2")
    worker_processes.wait_registered(3)
    submissions = [
        TaskSubmission(
            key=f"seq-{i:02}", task=tasks.record_execution, args=[0.05], queue="seq", scope="global"
        )
        for i in range(10)
    ]
    ids = submit_tasks(submissions, System())
    for task_id in ids:
        wait_for_status(store, task_id, COMPLETED, timeout=30.0)
    runs = list(
        Execution.objects.order_by("started_at").values_list("task_id", "started_at", "finished_at")
    )
    assert [task_id for task_id, _s, _f in runs] == ids
    for (_a, _s, finished), (_b, started, _f) in itertools.pairwise(runs):
        assert finished is not None
        assert finished <= started  # one at a time
    supervisor.send(signal.SIGTERM)
    assert supervisor.wait(20.0) == 0, supervisor.log()


@pytest.mark.postgres_only
def test_two_thousand_tasks_over_three_processes_each_run_exactly_once(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the many-process run is a PostgreSQL (SKIP LOCKED, NOTIFY) test")
    supervisor = worker_processes.start("--processes", "3", "--concurrency", "4")
    worker_processes.wait_registered(3)
    submissions = [
        TaskSubmission(key=f"many-{i:04}", task=tasks.record_execution, scope="global")
        for i in range(2000)
    ]
    ids = submit_tasks(submissions, System())
    records = TaskRecord.objects.filter(pk__in=ids)
    wait_until(lambda: not records.filter(status__in=LIVE_STATUSES).exists(), 90.0, 0.2)
    assert records.filter(status=COMPLETED).count() == 2000
    runs = list(Execution.objects.values_list("task_id", "pid"))
    executed = [task_id for task_id, _pid in runs]
    assert len(executed) == len(set(executed)) == 2000  # no task ran twice
    assert set(executed) == set(ids)  # and none was missed
    assert len({pid for _task, pid in runs}) == 3  # all three processes took part
    supervisor.send(signal.SIGTERM)
    assert supervisor.wait(20.0) == 0, supervisor.log()
