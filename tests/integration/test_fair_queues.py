"""A fair queue with a real ``runworkers``: a second owner is not held behind a first's backlog."""

from __future__ import annotations

import json

import pytest

from django_workers import Owner, TaskStatus, TaskSubmission, submit_task, submit_tasks
from django_workers.models import TaskRecord
from django_workers.stores.database import DatabaseWorkerStore
from tests.helpers import WorkerProcesses, wait_for_status

pytestmark = pytest.mark.integration

BACKLOG = 10_000
CONCURRENCY = 4


def test_a_second_owners_task_starts_in_the_first_claims_behind_ten_thousand(
    transactional_db: None, worker_processes: WorkerProcesses
) -> None:
    alice = Owner("alice")
    for first in range(0, BACKLOG, 1000):
        submit_tasks(
            [
                TaskSubmission(
                    key=f"backlog-{n}", task="tests.tasks.add", args=(n, 1), queue="shared"
                )
                for n in range(first, first + 1000)
            ],
            alice,
        )
    late = submit_task("late", "tests.tasks.add", Owner("bob"), args=(1, 1), queue="shared")
    fair = {"QUEUES": {"shared": {"fair": True}}}
    worker_processes.start(
        "--concurrency", str(CONCURRENCY), env={"WORKERS_TEST_SETTINGS": json.dumps(fair)}
    )
    done = wait_for_status(DatabaseWorkerStore(), late, TaskStatus.COMPLETED, timeout=60.0)
    worker_processes.kill_all()
    assert done.started_at is not None
    before = TaskRecord.objects.filter(owner="alice", started_at__lt=done.started_at).count()
    assert before < CONCURRENCY  # an ordinary queue would have run all ten thousand first
    assert TaskRecord.objects.filter(owner="alice", status=TaskStatus.PENDING).count() > 0
