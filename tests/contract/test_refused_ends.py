"""An end the database refuses raises, and leaves the store as usable as before.

The values here get past no submit or run (they are refused in Python first),
so each end is built by hand: it stands for any value a database may refuse.
PostgreSQL refuses a lone surrogate in JSON; SQLite keeps it.
"""

from __future__ import annotations

import pytest
from django.db import DatabaseError

from django_workers import System, TaskStatus, clock, lifecycle, submit_task
from django_workers.stores import WorkerStore
from django_workers.workflows import Workflow
from tests.tasks import add, noop

WORKER = "w-refused"
REFUSED = "\ud800"


def _end_with(store: WorkerStore, queue: str) -> tuple[str, bool | None]:
    [run] = store.claim(WORKER, [queue], 1, clock.now())
    assert store.begin_runs([run]) == [True]
    end = lifecycle.run_end(run, WORKER, TaskStatus.COMPLETED, clock.now(), result=REFUSED)
    try:
        return run.id, store.end_tasks([end])[0]
    except DatabaseError:
        return run.id, None


@pytest.mark.parametrize("kind", ["task", "workflow node"])
def test_a_refused_end_leaves_the_store_usable(tx_store: WorkerStore, kind: str) -> None:
    # A workflow node's end on PostgreSQL opens its transaction with a BEGIN of its own:
    # a refusal after it must not leave that transaction open and failed.
    if kind == "task":
        submit_task("t", add, System(), args=[1, 2], scope="global", queue="q", store=tx_store)
    else:
        wf = Workflow("wf", System())
        wf.add("only", noop, queue="q")
        wf.submit(store=tx_store)
    task_id, won = _end_with(tx_store, "q")
    info = tx_store.get_task_info(task_id)
    assert info is not None
    assert info.status == (TaskStatus.RUNNING if won is None else TaskStatus.COMPLETED)
    later = submit_task("later", add, System(), args=[1, 2], scope="global", store=tx_store)
    assert tx_store.get_task_info(later) is not None
