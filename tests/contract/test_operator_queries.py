"""The store's answers to `manage.py workers`: live counts per queue, finished records."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_workers import System, TaskStatus, cancel_task, clock, lifecycle, submit_task
from django_workers.stores import EndedCounts, QueueCounts, WorkerStore
from django_workers.stores.database import retention
from tests.helpers import end_record


def submit(store: WorkerStore, key: str, queue: str = "default") -> str:
    return submit_task(key, "tests.tasks.add", System(), scope="global", queue=queue, store=store)


def test_queue_counts_tell_pending_and_running_per_queue_and_worker(store: WorkerStore) -> None:
    first = submit(store, "a")
    submit(store, "b")
    submit(store, "c", queue="emails")
    store.claim("w1", ["default"], 1, clock.now())
    cancelled = submit(store, "d", queue="emails")
    cancel_task(cancelled, System(), store=store)
    done = submit(store, "e", queue="reports")
    end_record(store, done)

    counts = store.queue_counts()

    oldest = store.get_task_info(first)
    assert oldest is not None
    default, emails = counts
    assert [q.queue for q in counts] == ["default", "emails"]  # no live task in "reports"
    assert (default.pending, default.running, default.running_by_worker) == (1, 1, {"w1": 1})
    assert default.oldest_pending is not None
    assert default.oldest_pending > oldest.created_at
    assert emails == QueueCounts(
        queue="emails", pending=1, running=0, oldest_pending=emails.oldest_pending
    )


def test_queue_counts_tell_retrying_records_and_held_slots(store: WorkerStore) -> None:
    again = submit(store, "again")
    [claimed] = store.claim("w1", ["default"], 1, clock.now())
    requeue = lifecycle.TaskEnd(
        kind=lifecycle.EndKind.REQUEUE,
        task_id=again,
        run_id=claimed.run_id,
        worker_id="w1",
        queue="default",
        status=TaskStatus.PENDING,
    )
    assert store.end_tasks([requeue]) == [True]
    submit(store, "fresh")
    held = submit(store, "held", queue="emails")
    store.claim("w2", ["emails"], 1, clock.now())
    cancel_task(held, System(), store=store)  # its function still runs: the slot stays held

    counts = {q.queue: q for q in store.queue_counts()}

    assert (counts["default"].pending, counts["default"].retrying) == (2, 1)
    assert counts["default"].held_slots == 0
    # Nothing live in "emails", but a slot held by a function that has not returned.
    assert (counts["emails"].pending, counts["emails"].running) == (0, 0)
    assert counts["emails"].held_slots == 1


def test_ended_counts_count_completed_and_failed_records_per_window(store: WorkerStore) -> None:
    now = clock.now()
    ends = {
        ("a", "default", TaskStatus.COMPLETED): 60,
        ("b", "default", TaskStatus.COMPLETED): 1800,
        ("c", "default", TaskStatus.FAILED): 1800,
        ("d", "emails", TaskStatus.FAILED): 10,
        ("e", "default", TaskStatus.COMPLETED): 7200,  # before both windows
        ("f", "reports", TaskStatus.CANCELLED): 10,  # neither COMPLETED nor FAILED
    }
    for (key, queue, status), age in ends.items():
        end_record(
            store, submit(store, key, queue), status, finished_at=now - timedelta(seconds=age)
        )
    submit(store, "live")

    found = store.ended_counts([now - timedelta(seconds=300), now - timedelta(seconds=3600)])

    assert found == [
        EndedCounts(queue="default", completed=(1, 2), failed=(0, 1)),
        EndedCounts(queue="emails", completed=(0, 0), failed=(1, 1)),
    ]


def test_count_finished_counts_what_delete_finished_deletes(store: WorkerStore) -> None:
    old = [submit(store, f"old{n}") for n in range(3)]
    for task_id in old:
        end_record(store, task_id, TaskStatus.FAILED, finished_at=clock.now() - timedelta(days=2))
    end_record(store, submit(store, "new"), TaskStatus.FAILED)
    end_record(store, submit(store, "done"), finished_at=clock.now() - timedelta(days=2))
    before = clock.now() - timedelta(days=1)

    assert store.count_finished(TaskStatus.FAILED, before) == 3
    assert store.delete_finished(TaskStatus.FAILED, before, 2) == 2
    assert store.count_finished(TaskStatus.FAILED, before) == 1
    assert store.count_finished(TaskStatus.COMPLETED, before) == 1


def test_delete_finished_takes_the_oldest_first(store: WorkerStore) -> None:
    ages = {"d3": 3, "d5": 5, "d4": 4}
    ids = {key: submit(store, key) for key in ages}
    for key, days in ages.items():
        end_record(store, ids[key], finished_at=clock.now() - timedelta(days=days))
    before = clock.now() - timedelta(days=1)

    assert store.delete_finished(TaskStatus.COMPLETED, before, 1) == 1
    assert store.get_task_info(ids["d5"]) is None
    assert store.delete_finished(TaskStatus.COMPLETED, before, 1) == 1
    assert store.get_task_info(ids["d4"]) is None
    assert store.get_task_info(ids["d3"]) is not None


def test_delete_finished_deletes_a_batch_larger_than_a_transaction(
    store: WorkerStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retention, "SQLITE_DELETE_CHUNK", 2)
    ids = [submit(store, f"old{n}") for n in range(5)]
    for task_id in ids:
        end_record(store, task_id, finished_at=clock.now() - timedelta(days=2))
    before = clock.now() - timedelta(days=1)

    assert store.delete_finished(TaskStatus.COMPLETED, before, 4) == 4
    assert store.count_finished(TaskStatus.COMPLETED, before) == 1
