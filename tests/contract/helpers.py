"""What the contract tests of every role share: owners, a claim, an end, a record's identity."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from django_workers import Owner, TaskStatus
from django_workers.info import TaskInfo
from django_workers.stores import WorkerStore
from tests.helpers import end_record

ALICE, BOB, CAROL, SVC = Owner("alice"), Owner("bob"), Owner("carol"), Owner("svc")
ALL_STATUSES = list(TaskStatus)


def finish(store: WorkerStore, task_id: str, status: TaskStatus = TaskStatus.COMPLETED) -> None:
    """End the current run of ``task_id`` with ``status``, through the real claim and end path."""
    end_record(store, task_id, status)


def claim_one(store: WorkerStore, task_id: str, worker_id: str = "w1") -> TaskInfo:
    """Move ``task_id`` (the only pending task) to RUNNING for ``worker_id``."""
    [claimed] = store.claim(worker_id, None, 1, timezone.now())
    assert claimed.id == task_id
    return claimed


def identity(info: TaskInfo | None) -> tuple[Any, ...]:
    assert info is not None
    return (info.run_id, info.watchers, info.status, info.args, info.result)


class Recorder:
    """An authorizer that records its calls and answers ``allow``."""

    def __init__(self, allow: bool = True) -> None:
        self.allow = allow
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, *args: Any) -> bool:
        self.calls.append(args)
        return self.allow
