"""The store contract, reads: listing, and what a user may see and cancel.

One test body, run against every store.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from django_workers import (
    CancelReason,
    TaskAlreadyFinished,
    TaskCancelled,
    TaskNotFound,
    TaskStatus,
    cancel_task,
    clock,
    get_all_tasks,
    get_task_status,
    lifecycle,
    submit_task,
)
from django_workers.info import TERMINAL_STATUSES
from django_workers.stores import WorkerStore
from tests.contract.helpers import ALICE, BOB, SVC, claim_one, finish, identity
from tests.factories import NewTaskFactory
from tests.tasks import add

# -- listing ------------------------------------------------------------------------------------


def test_list_is_newest_first_then_by_id(store: WorkerStore) -> None:
    now = timezone.now()
    old = now - timedelta(minutes=1)
    for key, created in [("b", now), ("a", now), ("c", now), ("z", old), ("y", now)]:
        store.submit(NewTaskFactory(key=key, created_at=created), "alice")
    got = [t.key for t in store.list_tasks(user_id="alice")]
    assert got == ["y", "c", "b", "a", "z"]


def test_list_pages_through_every_task_once(store: WorkerStore) -> None:
    for _ in range(7):
        store.submit(NewTaskFactory(), "alice")
    everything = store.list_tasks(user_id=None)
    pages = [store.list_tasks(user_id=None, offset=o, limit=3) for o in (0, 3, 6)]
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [t.id for p in pages for t in p] == [t.id for t in everything]
    assert store.list_tasks(user_id=None, offset=7) == []
    assert [t.id for t in get_all_tasks(ALICE, offset=2, limit=2, store=store)] == [
        t.id for t in everything[2:4]
    ]


def test_list_filters_by_status_and_queue(store: WorkerStore) -> None:
    a = NewTaskFactory(queue="q1")
    b = NewTaskFactory(queue="q2")
    c = NewTaskFactory(queue="q1")
    for new in (a, b, c):
        store.submit(new, "alice")
    finish(store, c.id)

    def ids(**filters: Any) -> list[str]:
        return [t.id for t in store.list_tasks(user_id="alice", **filters)]

    assert ids(queue="q1") == [c.id, a.id]
    assert ids(status=TaskStatus.PENDING) == [b.id, a.id]
    assert ids(status=TaskStatus.PENDING, queue="q1") == [a.id]
    assert ids(status=TaskStatus.RUNNING) == []
    pending = get_all_tasks(ALICE, status="PENDING", queue="q2", store=store)
    assert [t.id for t in pending] == [b.id]


def test_list_shows_an_owner_what_it_owns_or_watches(store: WorkerStore) -> None:
    mine = NewTaskFactory(watchers=("alice", "svc"))
    shared = NewTaskFactory(global_scope=True, watchers=("bob", "alice"))
    bobs = NewTaskFactory(owner="bob")
    unwatched = NewTaskFactory(global_scope=True, watchers=())
    for new in (mine, shared, bobs, unwatched):
        store.submit(new, None)

    def ids(user_id: str | None) -> set[str]:
        return {t.id for t in store.list_tasks(user_id=user_id)}

    assert ids("alice") == {mine.id, shared.id}
    assert ids("bob") == {shared.id, bobs.id}
    assert ids("svc") == {mine.id}
    assert ids("carol") == set()
    assert ids(None) == {mine.id, shared.id, bobs.id, unwatched.id}


def test_an_owners_list_merges_owned_and_watched_tasks_newest_first(store: WorkerStore) -> None:
    start = timezone.now() - timedelta(hours=1)

    def at(minute: int, **fields: Any) -> Any:
        return NewTaskFactory(created_at=start + timedelta(minutes=minute), **fields)

    owned = [at(m) for m in (0, 2, 4)]
    watched = [at(m, owner="bob", watchers=("bob", "alice")) for m in (1, 3, 5)]
    both = at(6, watchers=("alice", "bob"))
    for new in (*owned, *watched, both):
        store.submit(new, None)
    store.add_watcher(both.id, "alice")  # owned and watched at once: still listed once
    by_age = sorted([*owned, *watched], key=lambda t: t.created_at, reverse=True)
    newest_first = [both.id, *(t.id for t in by_age)]

    pages = [store.list_tasks(user_id="alice", offset=o, limit=3) for o in (0, 3, 6)]

    assert [[t.id for t in page] for page in pages] == [
        newest_first[0:3],
        newest_first[3:6],
        newest_first[6:],
    ]
    assert [t.id for t in get_all_tasks(ALICE, offset=1, limit=4, store=store)] == newest_first[1:5]


# -- visibility and cancel through the API ---------------------------------------------------------


def _refusal(call: Callable[[], object]) -> Exception:
    with pytest.raises(Exception) as caught:  # noqa: PT011 - compared to a missing id's below
        call()
    return caught.value


@pytest.mark.parametrize("finished", [False, True], ids=["live", "finished"])
def test_an_unseen_task_answers_exactly_like_a_missing_one(
    store: WorkerStore, finished: bool
) -> None:
    task_id = submit_task("secret", add, ALICE, args=[1, 2], store=store)
    if finished:
        finish(store, task_id)
    missing = "alice::absent"
    for call in (get_task_status, cancel_task):
        # mypy infers no lambda with a default argument.
        foreign = _refusal(lambda c=call: c(task_id, BOB, store=store))  # type: ignore[misc]
        absent = _refusal(lambda c=call: c(missing, BOB, store=store))  # type: ignore[misc]
        assert type(foreign) is type(absent) is TaskNotFound
        assert str(foreign) == str(absent).replace(missing, task_id)
    assert get_all_tasks(BOB, store=store) == []
    assert get_task_status(task_id, ALICE, store=store).status != "CANCELLED"


def test_a_watcher_may_read_list_and_cancel(store: WorkerStore) -> None:
    task_id = submit_task("k", add, ALICE, args=[1, 2], watchers=[SVC], store=store)
    assert get_task_status(task_id, SVC, store=store).id == task_id
    assert [t.id for t in get_all_tasks(SVC, store=store)] == [task_id]
    assert cancel_task(task_id, SVC, store=store).status == "CANCELLED"


def test_cancel_of_a_pending_task_ends_it_cancelled_by_user(store: WorkerStore) -> None:
    task_id = submit_task("k", add, ALICE, args=[1, 2], store=store)
    info = cancel_task(task_id, ALICE, store=store)
    assert info == get_task_status(task_id, ALICE, store=store)
    assert (info.status, info.cancel_reason) == ("CANCELLED", CancelReason.USER)
    assert info.error is not None
    assert info.error.message == "Cancelled by user"
    assert info.error.type.endswith(TaskCancelled.__qualname__)
    assert info.finished_at is not None
    assert store.claim("w1", None, 10, timezone.now()) == []


def test_cancel_of_a_running_task_claims_its_record(store: WorkerStore) -> None:
    task_id = submit_task("k", add, ALICE, args=[1, 2], store=store)
    running = claim_one(store, task_id)
    info = cancel_task(task_id, ALICE, store=store)
    assert (info.status, info.cancel_reason, info.run_id) == (
        "CANCELLED",
        CancelReason.USER,
        running.run_id,
    )
    end = lifecycle.run_end(running, "w1", TaskStatus.COMPLETED, clock.now(), result=3)
    assert store.end_tasks([end]) == [False]
    assert get_task_status(task_id, ALICE, store=store).status == "CANCELLED"


@pytest.mark.parametrize("status", sorted(TERMINAL_STATUSES))
def test_cancel_of_an_ended_task_is_refused(store: WorkerStore, status: TaskStatus) -> None:
    task_id = submit_task("k", add, ALICE, args=[1, 2], store=store)
    finish(store, task_id, status)
    before = identity(store.get_task_info(task_id))
    with pytest.raises(TaskAlreadyFinished, match=status) as caught:
        cancel_task(task_id, ALICE, store=store)
    assert (caught.value.task_id, caught.value.status) == (task_id, status)
    assert identity(store.get_task_info(task_id)) == before
