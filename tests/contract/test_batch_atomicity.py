"""A ``submit_tasks`` batch is all or nothing on every store, whatever it mixes.

Run on ``tx_store`` so the database store commits for real: a batch that
writes outside its own transaction is caught, not hidden by the test's.
"""

from __future__ import annotations

from typing import Any

import pytest

from django_workers import (
    AuthorizationError,
    Owner,
    TaskSubmission,
    set_watch_authorizer,
    submit_task,
    submit_tasks,
)
from django_workers.info import TaskStatus
from django_workers.stores import WorkerStore
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
    assert listed["shared"].run_id == tx_store.get_task_info(shared).run_id  # joined, not re-run


def test_a_refusal_in_a_batch_written_in_one_statement_writes_nothing(
    tx_store: WorkerStore, shared: str
) -> None:
    before = snapshot(tx_store)
    batch = [*(sub(f"n{i}", scope="global") for i in range(60)), sub("shared", scope="global")]
    with pytest.raises(AuthorizationError):
        submit_tasks(batch, Owner("42"), store=tx_store)
    assert snapshot(tx_store) == before
