"""Workflows on real workers: ``runworkers`` subprocesses on the test database.

Each node records its executions in ``tests.models.Execution``, so "runs
exactly once" and "undone in reverse order" are read from what the worker
processes did, not from what the records say.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from django_workers import Owner, System, TaskNotFound, TaskOptions, TaskStatus, get_task_status
from django_workers.handles import close_listeners
from django_workers.models import TaskRecord, WorkflowRecord
from django_workers.stores import set_watch_authorizer
from django_workers.stores.database import DatabaseWorkerStore
from django_workers.workflows import (
    Workflow,
    WorkflowHandle,
    WorkflowInfo,
    WorkflowNotFound,
    open_workflow,
)
from tests import tasks
from tests.helpers import WorkerProcesses, wait_for_status
from tests.models import Execution

pytestmark = pytest.mark.integration

WAIT = 30.0


@pytest.fixture(autouse=True, scope="module")
def _close_listeners() -> Iterator[None]:
    # The LISTEN connection of wait() must be gone before pytest-django drops the database.
    yield
    close_listeners()


@pytest.fixture
def store(transactional_db: None) -> DatabaseWorkerStore:
    return DatabaseWorkerStore()


def executions() -> Counter[str]:
    return Counter(Execution.objects.values_list("task_id", flat=True))


def states(info: WorkflowInfo) -> dict[str, str]:
    return {node.name: node.state for node in info.nodes}


def serve(worker_processes: WorkerProcesses, *queue_sets: str) -> None:
    for queues in queue_sets:
        worker_processes.start("--queues", queues, "--concurrency", "4")
    worker_processes.wait_registered(len(queue_sets))


def test_a_diamond_across_two_queues_runs_each_node_once_with_its_dependencies_results(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    serve(worker_processes, "left", "right")
    wf = Workflow("diamond", System())
    top = wf.add("top", tasks.wf_value, args=[1], queue="left")
    a = wf.add("a", tasks.wf_value, args=[10], queue="right").after(top)
    b = wf.add("b", tasks.wf_value, args=[100], queue="left").after(top)
    wf.add("sum", tasks.wf_sum, args=["top", "a", "b"], queue="right").after(a, b)
    info = wf.submit().wait(WAIT)
    assert info.state == "completed"
    assert states(info) == dict.fromkeys(["top", "a", "b", "sum"], "completed")
    assert store.get_task_info(info.node("sum").task_id).result == 111  # type: ignore[union-attr]
    assert executions() == Counter({f"diamond:{n}": 1 for n in ("top", "a", "b", "sum")})


def test_an_always_node_runs_after_a_failure_and_the_workflow_completes(
    worker_processes: WorkerProcesses,
) -> None:
    serve(worker_processes, "default")
    wf = Workflow("always", System())
    upload = wf.add("upload", tasks.wf_fail)
    wf.add("thumb", tasks.wf_value, args=[1]).after(upload)
    wf.add("report", tasks.wf_outcomes, args=["upload", "thumb"]).after(upload).always()
    info = wf.submit().wait(WAIT)
    # thumb is cancelled (its dependency failed) and report runs anyway; upload's failure
    # is not absorbed (thumb is a dependent without .always()), so the workflow fails.
    assert states(info) == {"upload": "failed", "thumb": "cancelled", "report": "completed"}
    assert info.state == "failed"
    report = TaskRecord.objects.get(pk="always:report")
    assert report.result == {"upload": "failed", "thumb": "cancelled"}
    assert info.node("upload").reason == "node failed"
    assert "always:thumb" not in executions()


def test_an_absorbed_failure_lets_the_workflow_complete(
    worker_processes: WorkerProcesses,
) -> None:
    serve(worker_processes, "default")
    wf = Workflow("absorbed", System())
    upload = wf.add("upload", tasks.wf_fail)
    wf.add("report", tasks.wf_outcomes, args=["upload"]).after(upload).always()
    info = wf.submit().wait(WAIT)
    assert (info.state, states(info)) == ("completed", {"upload": "failed", "report": "completed"})


def test_fail_fast_cancels_waiting_nodes_and_lets_running_ones_finish(
    worker_processes: WorkerProcesses,
) -> None:
    serve(worker_processes, "default")
    wf = Workflow("fast", System(), fail_fast=True)
    slow = wf.add("slow", tasks.wf_value, args=[1, 1.0])
    wf.add("broken", tasks.wf_fail)
    wf.add("after_slow", tasks.wf_value, args=[2]).after(slow)
    info = wf.submit().wait(WAIT)
    assert info.state == "failed"
    assert states(info) == {"slow": "completed", "broken": "failed", "after_slow": "cancelled"}
    assert "fast:after_slow" not in executions()


def test_a_saga_undoes_completed_nodes_in_reverse_dependency_order(
    worker_processes: WorkerProcesses,
) -> None:
    serve(worker_processes, "default", "undo")
    wf = Workflow("saga", System())
    reserve = wf.add("reserve", tasks.wf_value, args=[1]).undo(
        tasks.wf_value, args=[-1, 0.2], queue="undo"
    )
    charge = (
        wf.add("charge", tasks.wf_value, args=[2])
        .after(reserve)
        .undo(tasks.wf_value, args=[-2, 0.2], queue="undo")
    )
    ship = wf.add("ship", tasks.wf_value, args=[3]).after(charge)  # no undo: passed through
    wf.add("email", tasks.wf_fail).after(ship)
    info = wf.submit().wait(WAIT)
    assert info.state == "compensated"
    assert info.node("charge").undo.state == "completed"  # type: ignore[union-attr]
    assert info.node("reserve").undo.state == "completed"  # type: ignore[union-attr]
    undone = {e.task_id: e for e in Execution.objects.filter(task_id__endswith=":undo")}
    assert set(undone) == {"saga:charge:undo", "saga:reserve:undo"}
    # The undo of reserve starts only after the undo of charge (its descendant) ended.
    charge_ended = undone["saga:charge:undo"].finished_at
    assert charge_ended is not None
    assert charge_ended <= undone["saga:reserve:undo"].started_at


def test_a_watcher_waits_for_a_shared_workflow_whose_undo_the_worker_shares_too(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    serve(worker_processes, "default", "undo")
    set_watch_authorizer(store, lambda workflow_id, watchers, user_id: True)
    wf = Workflow("shared", Owner("alice"), watchers=[Owner("bob")])
    reserve = wf.add("reserve", tasks.wf_value, args=[1]).undo(
        tasks.wf_value, args=[-1], queue="undo"
    )
    wf.add("email", tasks.wf_fail).after(reserve)
    workflow_id = wf.submit(store).id
    info = open_workflow(workflow_id, Owner("bob"), store=store).wait(WAIT)
    assert (info.state, info.watchers) == ("compensated", ("alice", "bob"))
    # The worker wrote the undo step's record from the workflow row: it is shared too.
    undo = info.node("reserve").undo
    assert undo is not None
    assert undo.task_id is not None
    assert get_task_status(undo.task_id, Owner("bob"), store=store).watchers == ("alice", "bob")
    with pytest.raises(TaskNotFound):
        get_task_status(undo.task_id, Owner("carol"), store=store)
    with pytest.raises(WorkflowNotFound):
        open_workflow(workflow_id, Owner("carol"), store=store)


@pytest.mark.parametrize("undo", [None, False])
def test_cancelling_a_running_workflow_stops_its_node_and_undoes_as_asked(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses, undo: bool | None
) -> None:
    serve(worker_processes, "default")
    wf = Workflow("stop", System())
    first = wf.add("first", tasks.wf_value, args=[1]).undo(tasks.wf_value, args=[-1])
    waiting = wf.add("waiting", tasks.wait_for_cancel).after(first)
    wf.add("never", tasks.wf_value, args=[3]).after(waiting)
    handle = wf.submit()
    wait_for_status(store, "stop:waiting", TaskStatus.RUNNING, timeout=WAIT)
    handle.cancel(undo=undo)
    info = handle.wait(WAIT)
    assert states(info) == {"first": "completed", "waiting": "cancelled", "never": "cancelled"}
    stopped = store.get_task_info("stop:waiting")
    assert stopped is not None
    assert stopped.cancel_reason == "user"
    if undo is None:  # undo_on_cancel=True, frozen at submit
        assert info.state == "compensated"
        assert executions()["stop:first:undo"] == 1
    else:
        assert info.state == "cancelled"
        assert store.get_task_info("stop:first:undo") is None
    assert "stop:never" not in executions()


def test_a_node_whose_worker_is_killed_is_recovered_and_its_dependent_runs_once(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    wf = Workflow("crash", System())
    hang = wf.add("hang", tasks.hang_on_first_attempt, options=TaskOptions(retries=1))
    wf.add("next", tasks.wf_value, args=[7]).after(hang)
    handle = wf.submit()
    victim = worker_processes.start()
    wait_for_status(store, "crash:hang", TaskStatus.RUNNING, timeout=WAIT)
    victim.kill()
    worker_processes.start()
    info = handle.wait(WAIT)
    assert (info.state, states(info)) == ("completed", {"hang": "completed", "next": "completed"})
    hung = store.get_task_info("crash:hang")
    assert hung is not None
    assert (hung.result, hung.attempts) == ("done on attempt 2", 2)
    assert executions()["crash:next"] == 1


def test_sixteen_threads_submitting_one_workflow_make_one(store: DatabaseWorkerStore) -> None:
    handles: list[WorkflowHandle] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(16)

    def submit() -> None:
        from django.db import connections

        try:
            wf = Workflow("race", System())
            a = wf.add("a", tasks.wf_value, args=[1])
            wf.add("b", tasks.wf_value, args=[2]).after(a)
            barrier.wait(10.0)
            handles.append(wf.submit())
        except BaseException as e:
            errors.append(e)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=submit) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30.0)
    assert errors == []
    assert [h.id for h in handles] == ["race"] * 16
    assert WorkflowRecord.objects.count() == 1
    assert sorted(TaskRecord.objects.values_list("id", flat=True)) == ["race:a", "race:b"]


def test_a_workflow_failed_at_its_fourth_of_six_steps_reruns_four_to_six_and_completes(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    serve(worker_processes, "default")
    fixed = tmp_path / "fixed"
    wf = Workflow("six", System())
    previous = wf.add("s1", tasks.wf_value, args=[1])
    for number in (2, 3):
        previous = wf.add(f"s{number}", tasks.wf_value, args=[number]).after(previous)
    previous = wf.add("s4", tasks.wf_value_once_fixed, args=[4, str(fixed)]).after(previous)
    previous = wf.add("s5", tasks.wf_value, args=[5]).after(previous)
    wf.add("s6", tasks.wf_sum, args=["s1", "s2", "s3", "s4", "s5"]).after(previous)
    handle = wf.submit()
    failed = handle.wait(WAIT)
    assert failed.state == "failed"
    assert states(failed) == {
        **dict.fromkeys(["s1", "s2", "s3"], "completed"),
        "s4": "failed",
        **dict.fromkeys(["s5", "s6"], "cancelled"),
    }

    fixed.touch()
    again = handle.rerun(plan_hash=failed.plan_hash)
    assert again.runs == 2
    info = handle.wait(WAIT)

    assert info.state == "completed"
    assert info.runs == 2
    assert store.get_task_info("six:s6").result == 15  # type: ignore[union-attr]
    s4 = store.get_task_info("six:s4")
    assert s4 is not None
    assert [f.type for f in s4.errors] == ["builtins.RuntimeError"]
    assert executions() == Counter(
        {"six:s1": 1, "six:s2": 1, "six:s3": 1, "six:s4": 2, "six:s5": 1, "six:s6": 1}
    )


@pytest.mark.parametrize("undo", [False, True])
def test_a_workflow_with_a_two_second_deadline_and_a_stuck_step_is_cancelled_at_two_seconds(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses, undo: bool
) -> None:
    serve(worker_processes, "default")
    wf = Workflow("timed", System(), deadline=timedelta(seconds=2), undo_on_cancel=undo)
    first = wf.add("first", tasks.wf_value, args=[1]).undo(tasks.wf_value, args=[-1])
    stuck = wf.add("stuck", tasks.wait_for_cancel).after(first)
    wf.add("never", tasks.wf_value, args=[3]).after(stuck)

    info = wf.submit().wait(WAIT)

    assert info.state == ("compensated" if undo else "cancelled")
    assert info.cancel_reason == "deadline"
    assert states(info) == {"first": "completed", "stuck": "cancelled", "never": "cancelled"}
    record = store.get_task_info("timed:stuck")
    assert record is not None
    assert record.cancel_reason == "deadline"
    assert info.finished_at is not None
    took = (info.finished_at - info.created_at).total_seconds()
    # The sweep looks every second and a worker reads the stop within half a second.
    assert 2.0 <= took < 6.0, took
    assert "timed:never" not in executions()
    assert executions()["timed:first:undo"] == (1 if undo else 0)
