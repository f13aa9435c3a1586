"""The zombie sweep ends every dead worker's run it can, whatever one bad record does.

A record whose end fails (here: a workflow node whose workflow row no longer
names it, and an end the database refuses) is told to ``refused`` and left
RUNNING for the next sweep; every other record is still recovered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from django.db import DataError

from django_workers import System, TaskStatus, clock, submit_task
from django_workers.lifecycle import EndKind, TaskEnd
from django_workers.models import WorkflowRecord
from django_workers.stores import WorkerStore
from django_workers.stores.memory import InMemoryWorkerStore
from django_workers.workflows import Workflow
from tests.tasks import add, noop

DEAD = "w-dead"


def _submit(store: WorkerStore, key: str) -> str:
    return submit_task(key, add, System(), args=[1, 2], scope="global", queue="q", store=store)


def _forget_nodes(store: WorkerStore, workflow_id: str) -> None:
    """Leave a workflow row that names none of its nodes, as a hand edit might."""
    if isinstance(store, InMemoryWorkerStore):
        store._flows[workflow_id]["nodes"] = []
    else:
        WorkflowRecord.objects.filter(pk=workflow_id).update(nodes=[])


def _sweep(store: WorkerStore) -> tuple[list[TaskEnd], list[tuple[str, Exception]]]:
    told: list[tuple[str, Exception]] = []
    recovered = store.recover_zombies(
        now=clock.now(),
        stale_before=clock.now() - timedelta(seconds=30),
        dead=[DEAD],
        refused=lambda task_id, error: told.append((task_id, error)),
    )
    return recovered, told


def _status(store: WorkerStore, task_id: str) -> TaskStatus:
    info = store.get_task_info(task_id)
    assert info is not None
    return info.status


def test_a_record_whose_end_fails_is_told_and_the_others_are_recovered(
    store: WorkerStore,
) -> None:
    before = _submit(store, "before")
    wf = Workflow("wf", System())
    wf.add("node", noop, queue="q")
    wf.submit(store=store)
    after = _submit(store, "after")
    claimed = store.claim(DEAD, ["q"], 10, clock.now())
    assert len(claimed) == 3
    _forget_nodes(store, "wf")
    recovered, told = _sweep(store)
    assert sorted(end.task_id for end in recovered) == sorted([before, after])
    assert all(end.kind is EndKind.WORKER_LOST for end in recovered)
    assert [task_id for task_id, _error in told] == ["wf:node"]
    assert (_status(store, before), _status(store, after)) == ("FAILED", "FAILED")
    if not isinstance(store, InMemoryWorkerStore):  # which has no transaction to roll back
        assert _status(store, "wf:node") == "RUNNING"  # left for the next sweep


def test_an_end_the_database_refuses_is_told_and_the_others_are_recovered(
    store: WorkerStore,
) -> None:
    ids = [_submit(store, key) for key in ("a", "refused", "c")]
    store.claim(DEAD, ["q"], 10, clock.now())
    end_tasks: Callable[[Sequence[TaskEnd]], list[bool]] = store.end_tasks

    def refusing(ends: Sequence[TaskEnd], *args: Any) -> list[bool]:
        if any(end.task_id == "refused" for end in ends):
            raise DataError("value too long (a test's)")
        return end_tasks(ends, *args)

    store.end_tasks = refusing  # type: ignore[method-assign]
    recovered, told = _sweep(store)
    assert sorted(end.task_id for end in recovered) == ["a", "c"]
    assert [(task_id, str(error)) for task_id, error in told] == [
        ("refused", "value too long (a test's)")
    ]
    assert [_status(store, task_id) for task_id in ids] == ["FAILED", "RUNNING", "FAILED"]
