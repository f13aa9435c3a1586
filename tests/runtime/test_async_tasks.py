"""``async def`` tasks see their run, report progress and honour cancel, on every store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from django_workers import CancelReason, System, TaskStatus, cancel_task, submit_task
from django_workers.stores import WorkerStore
from tests import tasks
from tests.helpers import RuntimeThread, start_runtime, wait_for_status, wait_until


@pytest.fixture
def runtime(tx_store: WorkerStore) -> Iterator[RuntimeThread]:
    tasks.reset_coordination()
    served = start_runtime(tx_store)
    yield served
    tasks.reset_coordination()
    served.stop()


def test_an_async_task_reports_progress_and_stops_when_cancelled(
    tx_store: WorkerStore, runtime: RuntimeThread
) -> None:
    name = "async-progress"
    task_id = submit_task(
        "async",
        tasks.async_progress_until_cancelled,
        System(),
        args=[name],
        scope="global",
        store=tx_store,
    )
    wait_until(lambda: tx_store.get_task_info(task_id).progress == 50.0)  # type: ignore[union-attr]
    assert tasks.seen[name] == [task_id]  # current_run() inside the coroutine
    cancel_task(task_id, System(), store=tx_store)
    wait_until(lambda: not runtime.runtime.active_runs())
    info = tx_store.get_task_info(task_id)
    assert info is not None
    assert (info.status, info.cancel_reason, info.progress) == (
        TaskStatus.CANCELLED,
        CancelReason.USER,
        50.0,
    )


def test_the_sync_update_progress_in_an_async_task_names_the_async_one(
    tx_store: WorkerStore, runtime: RuntimeThread
) -> None:
    task_id = submit_task(
        "sync-in-async", tasks.async_sync_progress, System(), scope="global", store=tx_store
    )
    info = wait_for_status(tx_store, task_id, TaskStatus.FAILED)
    assert info.error is not None
    assert "await aupdate_progress(" in info.error.message
