"""A ``submit_tasks`` batch is all or nothing on every store, whatever it mixes.

Run on ``tx_store`` so the database store commits for real: a batch that
writes outside its own transaction is caught, not hidden by the test's.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction

from django_workers import (
    AuthorizationError,
    InvalidTaskKey,
    InvalidTaskOptions,
    Owner,
    TaskSubmission,
    set_queue_authorizer,
    set_watch_authorizer,
    submission,
    submit_task,
    submit_tasks,
)
from django_workers.info import TaskStatus
from django_workers.models import TaskRecord
from django_workers.stores import WorkerStore, sql
from django_workers.stores.base import NewTask
from django_workers.stores.database import DatabaseWorkerStore
from tests.helpers import end_record
from tests.tasks import add


def snapshot(store: WorkerStore) -> list[tuple[Any, ...]]:
    return [(t.id, t.run_id, t.watchers, t.status) for t in store.list_tasks(user_id=None)]


def sub(key: str, **kwargs: Any) -> TaskSubmission:
    return TaskSubmission(key=key, task=add, args=[1, 2], **kwargs)


@pytest.fixture
def shared(tx_store: WorkerStore) -> str:
    """A global task of another user, which "42" may not join."""
    return submit_task("shared", add, Owner("7"), args=[1, 2], scope="global", store=tx_store)


def test_a_refusal_after_a_repeated_key_writes_nothing(tx_store: WorkerStore, shared: str) -> None:
    before = snapshot(tx_store)
    batch = [sub("fresh1"), sub("fresh1"), sub("shared", scope="global")]
    with pytest.raises(AuthorizationError):
        submit_tasks(batch, Owner("42"), store=tx_store)
    assert snapshot(tx_store) == before


def test_a_refusal_undoes_a_join_and_a_rerun_of_the_same_batch(
    tx_store: WorkerStore, shared: str
) -> None:
    live = submit_task("live", add, Owner("7"), args=[1, 2], scope="global", store=tx_store)
    done = submit_task("done", add, Owner("42"), args=[1, 2], store=tx_store)
    end_record(tx_store, done, TaskStatus.COMPLETED)
    # "42" may join "live" (so it would become a watcher), but never "shared".
    set_watch_authorizer(tx_store, lambda task_id, watchers, user_id: task_id == live)
    before = snapshot(tx_store)
    batch = [
        sub("new"),
        sub("live", scope="global"),
        sub("done"),
        sub("new"),
        sub("shared", scope="global"),
    ]
    with pytest.raises(AuthorizationError):
        submit_tasks(batch, Owner("42"), store=tx_store)
    assert snapshot(tx_store) == before


def test_a_batch_of_repeats_and_joins_that_passes_writes_everything(
    tx_store: WorkerStore, shared: str
) -> None:
    batch = [sub("a"), sub("shared", scope="global"), sub("a"), sub("b")]
    ids = submit_tasks(batch, Owner("7"), store=tx_store)
    assert ids == ["7::a", "shared", "7::a", "7::b"]
    assert sorted(t.id for t in tx_store.list_tasks(user_id=None)) == ["7::a", "7::b", "shared"]


def test_a_batch_written_in_one_statement_still_joins_a_taken_id(
    tx_store: WorkerStore, shared: str
) -> None:
    # Large enough for PostgreSQL's COPY: the taken id fails it, and nothing of it stays.
    fresh = [sub(f"n{i}", scope="global") for i in range(60)]
    ids = submit_tasks([*fresh, sub("shared", scope="global")], Owner("7"), store=tx_store)
    assert ids == [*(f"n{i}" for i in range(60)), "shared"]
    listed = {t.id: t for t in tx_store.list_tasks(user_id=None, limit=1000)}
    assert len(listed) == 61
    shared_info = tx_store.get_task_info(shared)
    assert shared_info is not None
    assert listed["shared"].run_id == shared_info.run_id  # joined, not re-run


def test_a_refusal_in_a_batch_written_in_one_statement_writes_nothing(
    tx_store: WorkerStore, shared: str
) -> None:
    before = snapshot(tx_store)
    batch = [*(sub(f"n{i}", scope="global") for i in range(60)), sub("shared", scope="global")]
    with pytest.raises(AuthorizationError):
        submit_tasks(batch, Owner("42"), store=tx_store)
    assert snapshot(tx_store) == before


# A batch of plain submissions large enough for PostgreSQL's COPY, which reads its
# records while they are built: a bad one is found with the COPY under way.
COPIED = sql.COPY_MIN_ROWS + 10
LATE_MISTAKES = {
    "args": ({"args": "1, 2"}, InvalidTaskOptions),
    "key": ({"key": ""}, InvalidTaskKey),
    "watchers": ({"watchers": "bob"}, TypeError),
}


def copied(prefix: str, count: int = COPIED) -> list[TaskSubmission]:
    return [sub(f"{prefix}{i}") for i in range(count)]


def bad(mistake: str) -> TaskSubmission:
    fields: dict[str, Any] = {"key": "late", "task": add, "args": [1, 2]}
    fields.update(LATE_MISTAKES[mistake][0])
    return TaskSubmission(**fields)


@pytest.mark.parametrize("mistake", LATE_MISTAKES)
def test_a_bad_submission_late_in_a_copied_batch_writes_nothing(
    tx_store: WorkerStore, shared: str, mistake: str
) -> None:
    before = snapshot(tx_store)
    with pytest.raises(LATE_MISTAKES[mistake][1]):
        submit_tasks([*copied("n"), bad(mistake), sub("after")], Owner("42"), store=tx_store)
    assert snapshot(tx_store) == before


def test_a_bad_submission_late_in_a_copied_batch_leaves_the_callers_transaction_whole(
    db_store: DatabaseWorkerStore,
) -> None:
    with transaction.atomic():
        submit_task("before", add, Owner("42"), args=[1, 2], store=db_store)
        with pytest.raises(InvalidTaskOptions):
            submit_tasks([*copied("n"), bad("args")], Owner("42"), store=db_store)
        submit_task("after", add, Owner("42"), args=[1, 2], store=db_store)
    assert sorted(TaskRecord.objects.values_list("key", flat=True)) == ["after", "before"]


def test_a_copied_batch_that_repeats_a_key_joins_it(tx_store: WorkerStore) -> None:
    ids = submit_tasks([*copied("n"), sub("n3")], Owner("7"), store=tx_store)
    assert ids == [*(f"7::n{i}" for i in range(COPIED)), "7::n3"]
    assert len(tx_store.list_tasks(user_id=None, limit=1000)) == COPIED


def test_the_first_bad_submission_of_a_batch_is_the_one_reported(tx_store: WorkerStore) -> None:
    # The refused queue's submission is checked whole before the batch is written; the
    # bad arguments before it, only as its record is built.
    set_queue_authorizer(tx_store, lambda queue, user_id: queue != "vip")
    refused = sub("vip", queue="vip")
    with pytest.raises(InvalidTaskOptions, match="args must be"):
        submit_tasks(
            [*copied("a", 30), bad("args"), *copied("b", 30), refused], Owner("7"), store=tx_store
        )
    with pytest.raises(AuthorizationError):
        submit_tasks(
            [*copied("a", 30), refused, *copied("b", 30), bad("args")], Owner("7"), store=tx_store
        )
    assert snapshot(tx_store) == []


def test_a_queue_authorizer_may_read_the_database_during_a_copied_batch(
    db_store: DatabaseWorkerStore,
) -> None:
    asked: list[str] = []

    def allowed(queue: str, user_id: str) -> bool:
        asked.append(queue)
        return TaskRecord.objects.filter(queue=queue, owner=user_id).count() >= 0

    set_queue_authorizer(db_store, allowed)
    batch = [*copied("a", 30), *(sub(f"b{i}", queue="other") for i in range(30))]
    assert len(submit_tasks(batch, Owner("7"), store=db_store)) == 60
    assert asked == ["default", "other"]
    assert TaskRecord.objects.count() == 60


def test_a_copy_reads_the_batch_while_it_is_under_way(
    db_store: DatabaseWorkerStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not sql.copies(connection, COPIED):
        pytest.skip("the COPY is PostgreSQL's")
    from psycopg import pq

    seen: list[pq.TransactionStatus] = []
    build = submission._Alike.record

    def record(*args: Any) -> NewTask:
        seen.append(connection.connection.pgconn.transaction_status)
        return build(*args)

    monkeypatch.setattr(submission._Alike, "record", record)
    submit_tasks(copied("n"), Owner("7"), store=db_store)
    assert TaskRecord.objects.count() == COPIED
    # Built before the COPY, every record would have seen the connection idle.
    assert len(seen) == COPIED - 1
    assert set(seen) == {pq.TransactionStatus.ACTIVE}
