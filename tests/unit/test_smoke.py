from __future__ import annotations

from django_workers import Owner, get_task_status, submit_task
from django_workers.stores import WorkerStore
from tests.tasks import add


def test_submit_then_read(store: WorkerStore) -> None:
    task_id = submit_task("k", add, Owner("u1"), args=[1, 2], store=store)
    assert get_task_status(task_id, Owner("u1"), store=store).args == [1, 2]
