"""Guarantees of the runtime at its edges: stop during a claim, django.tasks fidelity.

Tasks claimed as a stop is requested go back to the queue unstarted; a run
the zombie sweep ends still sends Django's ``task_finished``; and a task's
``TaskResult.errors`` keeps the error of every failed attempt.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from django.tasks import TaskResult, task_backends
from django.tasks.signals import task_finished

from django_workers import System, TaskOptions, TaskStatus, submit_task
from django_workers.lifecycle import EndKind, TaskEnd
from django_workers.models import TaskRecord
from django_workers.runtime.runtime import EXIT_OK, EXIT_STALLED, WorkerRuntime
from django_workers.stores.database import DatabaseWorkerStore
from django_workers.stores.memory import InMemoryWorkerStore
from tests import tasks
from tests.helpers import (
    RuntimeThread,
    WorkerProcesses,
    start_runtime,
    wait_for_status,
    wait_until,
)

COMPLETED, FAILED, RUNNING, PENDING = (
    TaskStatus.COMPLETED,
    TaskStatus.FAILED,
    TaskStatus.RUNNING,
    TaskStatus.PENDING,
)
WORKER_LOST = "django_workers.exceptions.WorkerLost"


pytestmark = pytest.mark.usefixtures("coordination")


@pytest.fixture
def finished() -> Iterator[list[TaskResult]]:
    """Every TaskResult Django's ``task_finished`` carries while the test runs."""
    results: list[TaskResult] = []

    def receive(sender: Any, task_result: TaskResult, **kwargs: Any) -> None:
        results.append(task_result)

    task_finished.connect(receive)
    yield results
    task_finished.disconnect(receive)


# -- stop ---------------------------------------------------------------------------------------


def test_tasks_claimed_as_a_stop_is_requested_go_back_to_pending_unstarted(
    db_store: DatabaseWorkerStore, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    ids = [
        submit_task(f"t{i}", tasks.record, System(), args=[name, f"t{i}"], scope="global")
        for i in range(3)
    ]
    before = {i: db_store.get_task_info(i).attempts for i in ids}  # type: ignore[union-attr]
    runtime = WorkerRuntime(
        db_store, concurrency=4, poll_interval=0.02, heartbeat_interval=0.2, lease_timeout=5.0
    )
    claim = db_store.claim

    def claim_then_stop(*args: Any, **kwargs: Any) -> Any:
        claimed = claim(*args, **kwargs)
        if claimed:
            runtime.request_stop()  # SIGTERM lands while the claim is in flight
        return claimed

    monkeypatch.setattr(db_store, "claim", claim_then_stop)
    served = RuntimeThread(runtime, drain_timeout=5.0).start()
    assert served.join(10.0) == EXIT_OK
    started = set(tasks.seen[name])
    # (status, attempts counted, worker, whether its function started) of each task.
    outcomes = {
        info.id: (info.status, info.attempts - before[info.id], info.worker_id, info.id in started)
        for info in map(db_store.get_task_info, ids)
        if info is not None
    }
    assert outcomes == dict.fromkeys(ids, (PENDING, 0, None, False))
    monkeypatch.undo()
    served = start_runtime(db_store)  # and the next worker runs each of them once
    try:
        done = [wait_for_status(db_store, i, COMPLETED) for i in ids]
    finally:
        served.stop()
    assert [info.attempts - before[info.id] for info in done] == [1, 1, 1]


# -- django.tasks fidelity ----------------------------------------------------------------------


@pytest.mark.integration
def test_a_task_the_zombie_sweep_ends_sends_task_finished(
    db_store: DatabaseWorkerStore,
    worker_processes: WorkerProcesses,
    finished: list[TaskResult],
) -> None:
    result = tasks.dj_sleep.enqueue(30)
    victim = worker_processes.start()
    wait_for_status(db_store, result.id, RUNNING, timeout=20.0)
    victim.kill()
    # A dead pid on this host: this runtime's start-up sweep ends the run FAILED at once.
    served = start_runtime(db_store)
    try:
        wait_for_status(db_store, result.id, FAILED, timeout=10.0)
        [sent] = wait_until(lambda: [r for r in finished if r.id == result.id], timeout=5.0)
    finally:
        served.stop()
    assert sent.status == "FAILED"
    assert [e.exception_class_path for e in sent.errors] == [WORKER_LOST]


def test_task_result_errors_lists_every_failed_attempt_oldest_first(
    db_store: DatabaseWorkerStore,
) -> None:
    result = tasks.dj_fail_every_attempt.enqueue()
    # django.tasks has no retry setting: give the record the options submit_task would store.
    record = TaskRecord.objects.get(pk=result.id)
    retries = TaskOptions(retries=2, retry_backoff=0.01, retry_jitter=False).to_json()
    TaskRecord.objects.filter(pk=result.id).update(options={**record.options, **retries})
    served = start_runtime(db_store)
    try:
        wait_for_status(db_store, result.id, FAILED, timeout=10.0)
    finally:
        served.stop()
    errors = task_backends["workers"].get_result(result.id).errors
    assert [e.traceback.splitlines()[-1] for e in errors] == [
        f"RuntimeError: attempt {n} fails" for n in (1, 2, 3)
    ]
    assert {e.exception_class_path for e in errors} == {"builtins.RuntimeError"}


# -- liveness -----------------------------------------------------------------------------------


class StuckEndWriter(InMemoryWorkerStore):
    """A store whose writing of runs' own ends hangs until ``unstick`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.unstick = threading.Event()

    def end_tasks(self, ends: Sequence[TaskEnd]) -> list[bool]:
        if any(end.kind is EndKind.RUN for end in ends):
            self.unstick.wait(30.0)
        return super().end_tasks(ends)


def test_a_runtime_whose_end_writer_is_stuck_stops_renewing_and_its_run_is_recovered() -> None:
    store = StuckEndWriter()
    stuck = start_runtime(store, lease_timeout=1.0, heartbeat_interval=0.1)
    task_id = submit_task("t", tasks.add, System(), args=[1, 2], scope="global", store=store)
    wait_until(lambda: stuck.runtime.stalled == "the end writer", timeout=10.0)
    # Its lease lapses; another worker's sweep declares it dead and recovers the run.
    rescuer = start_runtime(store, lease_timeout=1.0, heartbeat_interval=0.1)
    info = wait_for_status(store, task_id, FAILED, timeout=10.0)
    assert info.error is not None
    assert info.error.type == WORKER_LOST
    store.unstick.set()
    assert stuck.join() == EXIT_STALLED
    rescuer.stop()
