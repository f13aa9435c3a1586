"""The visibility rule on every store: each path that decides who sees what agrees.

The same records are read by each reader through every path that filters
them: the rule in Python over every record (what the API and handles apply
to one record), the store's listing (one SQL statement on PostgreSQL and
SQLite, the ORM on MariaDB, a scan in memory), the rule's ``Q`` filter (the
admin), and the public API one id at a time. Every path must give the same
set, and that set must be the one written down here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest

from django_workers import (
    AuthorizationError,
    Owner,
    System,
    TaskNotFound,
    TaskStatus,
    cancel_task,
    get_task_status,
    visibility,
)
from django_workers.authority import Authority
from django_workers.models import TaskRecord, WorkflowRecord
from django_workers.stores import WorkerStore, set_watch_authorizer
from django_workers.stores.database import DatabaseWorkerStore
from django_workers.workflows import (
    InvalidWorkflow,
    Workflow,
    WorkflowNotFound,
    cancel_workflow,
    get_all_workflows,
    get_workflow_status,
)
from tests.contract.helpers import ALICE, BOB, CAROL, SVC, Recorder, finish
from tests.factories import NewTaskFactory
from tests.tasks import noop

READERS = [None, "alice", "bob", "carol", "svc"]


def allow_all(store: WorkerStore) -> None:
    set_watch_authorizer(store, lambda workflow_id, watchers, user_id: True)


def populate(store: WorkerStore) -> dict[str, str]:
    """Tasks and workflows owned, shared and global; their ids by name."""
    allow_all(store)
    tasks = {
        "alices": NewTaskFactory(watchers=("alice", "svc")),
        "shared": NewTaskFactory(global_scope=True, watchers=("bob", "alice")),
        "bobs": NewTaskFactory(owner="bob"),
        "nobodys": NewTaskFactory(global_scope=True, watchers=()),
    }
    for new in tasks.values():
        store.submit(new, None)
    flows = {
        "alices_flow": Workflow("report", ALICE, watchers=[BOB]),
        "carols_flow": Workflow("report", CAROL),
        "global_flow": Workflow("nightly", System(), watchers=[SVC]),
    }
    for wf in flows.values():
        first = wf.add("first", noop)
        wf.add("then", noop).after(first)
        wf.submit(store)
    return {
        **{k: v.id for k, v in tasks.items()},
        **{k: wf.plan(store).id for k, wf in flows.items()},
    }


def authority(user_id: str | None) -> Authority:
    return System() if user_id is None else Owner(user_id)


def readable(ids: Iterable[str], read: Callable[[str], Any], missing: type[Exception]) -> set[str]:
    seen = set()
    for some_id in ids:
        try:
            read(some_id)
        except missing:
            continue
        seen.add(some_id)
    return seen


@pytest.mark.parametrize("reader", READERS)
def test_every_path_shows_a_reader_the_same_tasks(store: WorkerStore, reader: str | None) -> None:
    ids = populate(store)
    every = store.list_tasks(user_id=None, limit=1000)
    by_rule = {t.id for t in every if visibility.sees_task(reader, t.id, t.watchers)}
    listed = {t.id for t in store.list_tasks(user_id=reader, limit=1000)}
    by_api = readable(
        (t.id for t in every),
        lambda task_id: get_task_status(task_id, authority(reader), store=store),
        TaskNotFound,
    )
    assert listed == by_rule == by_api
    if isinstance(store, DatabaseWorkerStore):
        assert (
            set(TaskRecord.objects.filter(visibility.tasks(reader)).values_list("id", flat=True))
            == by_rule
        )

    nodes = {
        name: {t.id for t in every if t.workflow == ids[name]}
        for name in ("alices_flow", "carols_flow", "global_flow")
    }
    expected = {
        None: {t.id for t in every},
        "alice": {ids["alices"], ids["shared"], *nodes["alices_flow"]},
        "bob": {ids["shared"], ids["bobs"], *nodes["alices_flow"]},
        "carol": nodes["carols_flow"],
        "svc": {ids["alices"], *nodes["global_flow"]},
    }
    assert by_rule == expected[reader]


@pytest.mark.parametrize("reader", READERS)
def test_every_path_shows_a_reader_the_same_workflows(
    store: WorkerStore, reader: str | None
) -> None:
    ids = populate(store)
    every = store.list_workflows(user_id=None, limit=1000)
    by_rule = {w.id for w in every if visibility.sees(reader, w.owner, w.watchers)}
    listed = {w.id for w in store.list_workflows(user_id=reader, limit=1000)}
    by_api = readable(
        (w.id for w in every),
        lambda workflow_id: get_workflow_status(workflow_id, authority(reader), store=store),
        WorkflowNotFound,
    )
    by_handles = {w.id for w in get_all_workflows(authority(reader), limit=1000, store=store)}
    assert listed == by_rule == by_api == by_handles
    if isinstance(store, DatabaseWorkerStore):
        queried = WorkflowRecord.objects.filter(visibility.workflows(reader))
        assert set(queried.values_list("id", flat=True)) == by_rule

    expected = {
        None: {ids["alices_flow"], ids["carols_flow"], ids["global_flow"]},
        "alice": {ids["alices_flow"]},
        "bob": {ids["alices_flow"]},
        "carol": {ids["carols_flow"]},
        "svc": {ids["global_flow"]},
    }
    assert by_rule == expected[reader]


def test_a_listing_by_state_keeps_to_what_the_reader_sees(store: WorkerStore) -> None:
    ids = populate(store)
    running = store.list_workflows(user_id="bob", state="running")
    assert [w.id for w in running] == [ids["alices_flow"]]
    assert store.list_workflows(user_id="bob", state="completed") == []


def test_a_workflow_and_each_of_its_records_list_the_same_watchers(store: WorkerStore) -> None:
    ids = populate(store)
    info = get_workflow_status(ids["alices_flow"], BOB, store=store)
    assert info.watchers == ("alice", "bob")
    for node in info.nodes:
        assert get_task_status(node.task_id, BOB, store=store).watchers == ("alice", "bob")
    assert get_workflow_status(ids["global_flow"], SVC, store=store).watchers == ("svc",)


def test_a_watcher_cancels_a_shared_workflow_and_a_stranger_cannot(store: WorkerStore) -> None:
    ids = populate(store)
    with pytest.raises(WorkflowNotFound):
        cancel_workflow(ids["alices_flow"], CAROL, store=store)
    # A bare key names the reader's own workflow, never someone else's.
    with pytest.raises(WorkflowNotFound):
        get_workflow_status("report", BOB, store=store)
    after = cancel_workflow(ids["alices_flow"], BOB, store=store)
    assert after.state in ("cancelled", "cancelling")
    assert get_workflow_status(ids["alices_flow"], ALICE, store=store).state == after.state


def test_an_undo_step_is_shown_to_the_workflows_watchers(store: WorkerStore) -> None:
    allow_all(store)
    wf = Workflow("order", ALICE, watchers=[BOB])
    charge = wf.add("charge", noop).undo(noop)
    wf.add("ship", noop).after(charge)
    handle = wf.submit(store)
    info = get_workflow_status(handle.id, ALICE, store=store)
    finish(store, info.node("charge").task_id)
    finish(store, info.node("ship").task_id, TaskStatus.FAILED)
    undo = get_workflow_status(handle.id, BOB, store=store).node("charge").undo
    assert undo is not None
    undo_id = undo.task_id
    assert undo_id is not None
    assert get_task_status(undo_id, BOB, store=store).watchers == ("alice", "bob")
    with pytest.raises(TaskNotFound):
        get_task_status(undo_id, CAROL, store=store)


def test_a_watcher_may_cancel_a_node_of_a_shared_workflow(store: WorkerStore) -> None:
    ids = populate(store)
    [first] = [
        n.task_id
        for n in get_workflow_status(ids["alices_flow"], BOB, store=store).nodes
        if n.state == "pending"
    ][:1]
    with pytest.raises(TaskNotFound):
        cancel_task(first, CAROL, store=store)
    assert cancel_task(first, BOB, store=store).status == TaskStatus.CANCELLED


# -- granting at submit --------------------------------------------------------------------------


def test_the_watch_authorizer_is_asked_about_each_watcher_an_owner_grants(
    store: WorkerStore,
) -> None:
    ask = Recorder(allow=True)
    set_watch_authorizer(store, ask)
    wf = Workflow("shared", ALICE, watchers=[BOB, SVC, ALICE, BOB])
    wf.add("one", noop)
    handle = wf.submit(store)
    assert ask.calls == [(handle.id, ("alice",), "bob"), (handle.id, ("alice",), "svc")]
    assert get_workflow_status(handle.id, SVC, store=store).watchers == ("alice", "bob", "svc")


@pytest.mark.parametrize("authorizer", [None, Recorder(allow=False)])
def test_a_refused_watcher_writes_nothing(store: WorkerStore, authorizer: Any) -> None:
    set_watch_authorizer(store, authorizer)
    wf = Workflow("shared", ALICE, watchers=[BOB])
    wf.add("one", noop)
    with pytest.raises(AuthorizationError, match="'bob'"):
        wf.submit(store)
    assert store.list_workflows(user_id=None) == []
    assert store.list_tasks(user_id=None) == []


def test_system_grants_watchers_without_asking(store: WorkerStore) -> None:
    ask = Recorder(allow=False)
    set_watch_authorizer(store, ask)
    wf = Workflow("nightly", System(), watchers=[BOB])
    wf.add("one", noop)
    assert get_workflow_status(wf.submit(store).id, BOB, store=store).watchers == ("bob",)
    assert ask.calls == []


@pytest.mark.parametrize(
    ("watchers", "problem"),
    [
        ("bob", "a list of Owner"),
        (Owner("bob"), "a list of Owner"),
        (["bob"], "got str"),
        ([System()], "got System"),
    ],
)
def test_watchers_that_are_not_owners_are_refused_before_anything_is_written(
    store: WorkerStore, watchers: Any, problem: str
) -> None:
    wf = Workflow("shared", ALICE, watchers=watchers)
    wf.add("one", noop)
    with pytest.raises(InvalidWorkflow, match=problem):
        wf.submit(store)
    assert store.list_workflows(user_id=None) == []
