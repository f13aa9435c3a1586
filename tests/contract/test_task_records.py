"""The store contract, task records: submit, join, re-run, authorizers, state writes.

One test body, run against every store.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from django_workers import (
    AuthorizationError,
    CancelReason,
    InvalidTaskOptions,
    System,
    TaskNotFound,
    TaskStatus,
    TaskSubmission,
    cancel_task,
    clock,
    get_task_status,
    lifecycle,
    set_queue_authorizer,
    set_watch_authorizer,
    submit_task,
    submit_tasks,
    update_progress,
)
from django_workers.info import LIVE_STATUSES, TERMINAL_STATUSES, TaskFailure
from django_workers.stores import ANY_RUN, Submitted, WorkerStore
from tests.contract.helpers import (
    ALICE,
    ALL_STATUSES,
    CAROL,
    SVC,
    Recorder,
    claim_one,
    finish,
    identity,
)
from tests.factories import NewTaskFactory
from tests.tasks import add, django_add

# -- submit: insert, join, re-run, refuse ------------------------------------------------------


def test_submit_inserts_a_new_record(store: WorkerStore) -> None:
    new = NewTaskFactory(args=[3, 4], watchers=("alice", "svc", "bob"), priority=5, queue="q")
    assert store.submit(new, "alice") == Submitted(new.id, new.run_id, created=True)
    info = store.get_task_info(new.id)
    assert info is not None
    assert (info.id, info.key, info.owner, info.scope) == (new.id, new.key, "alice", "user")
    assert (info.args, info.queue, info.priority) == ([3, 4], "q", 5)
    assert (info.status, info.progress, info.attempts, info.result) == ("PENDING", 0.0, 0, None)
    # The owner first, then the grants in the order given.
    assert (info.run_id, info.watchers) == (new.run_id, ("alice", "svc", "bob"))
    assert info.cancel_reason is CancelReason.NONE


@pytest.mark.parametrize("status", sorted(LIVE_STATUSES))
def test_submit_joins_a_live_task_the_caller_watches(store: WorkerStore, status: str) -> None:
    first = NewTaskFactory(status=status)
    store.submit(first, "alice")
    again = NewTaskFactory(key=first.key, args=[9, 9], watchers=("alice", "carol"))
    assert store.submit(again, "alice") == Submitted(first.id, first.run_id, created=False)
    info = store.get_task_info(first.id)
    # Nothing new runs, and a join grants nobody: watchers come only from the first submit.
    assert identity(info) == (first.run_id, ("alice",), status, [1, 2], None)


@pytest.mark.parametrize("status", sorted(TERMINAL_STATUSES))
def test_submit_reruns_a_finished_task(store: WorkerStore, status: TaskStatus) -> None:
    first = NewTaskFactory(watchers=("alice", "svc"))
    store.submit(first, "alice")
    finish(store, first.id, status)
    again = NewTaskFactory(key=first.key, args=[5, 6], watchers=("alice", "carol"))
    done = store.submit(again, "alice")
    assert done == Submitted(first.id, again.run_id, created=True, replaced_run_id=first.run_id)
    info = store.get_task_info(first.id)
    assert identity(info) == (again.run_id, ("alice", "carol"), "PENDING", [5, 6], None)
    assert info is not None
    assert (info.error, info.finished_at, info.attempts) == (None, None, 0)


@pytest.mark.parametrize("finished", [False, True], ids=["live", "finished"])
def test_submit_by_a_non_watcher_is_refused_without_an_authorizer(
    store: WorkerStore, finished: bool
) -> None:
    first = NewTaskFactory(global_scope=True, watchers=("alice",))
    store.submit(first, "alice")
    if finished:
        finish(store, first.id)
    before = identity(store.get_task_info(first.id))
    with pytest.raises(AuthorizationError, match="does not watch"):
        store.submit(NewTaskFactory(global_scope=True, key=first.key, watchers=("bob",)), "bob")
    assert identity(store.get_task_info(first.id)) == before


@pytest.mark.parametrize("finished", [False, True], ids=["live", "finished"])
def test_the_watch_authorizer_is_consulted_only_for_non_watchers(
    store: WorkerStore, finished: bool
) -> None:
    fn = Recorder(allow=False)
    set_watch_authorizer(store, fn)
    mine = NewTaskFactory()
    shared = NewTaskFactory(global_scope=True, watchers=("alice", "svc"))
    store.submit(mine, "alice")
    store.submit(shared, "alice")
    if finished:
        finish(store, mine.id)
        finish(store, shared.id)
    store.submit(NewTaskFactory(key=mine.key), "alice")  # the owner, by id
    both = ("alice", "svc")
    store.submit(NewTaskFactory(global_scope=True, key=shared.key, watchers=both), "alice")
    if finished:
        finish(store, shared.id)
    store.submit(NewTaskFactory(global_scope=True, key=shared.key, watchers=both), "svc")
    assert fn.calls == []
    if finished:
        finish(store, shared.id)
    before = identity(store.get_task_info(shared.id))
    with pytest.raises(AuthorizationError):
        store.submit(NewTaskFactory(global_scope=True, key=shared.key, watchers=("bob",)), "bob")
    # The authorizer sees the task id, who watches it now, and the caller.
    assert fn.calls == [(shared.id, both, "bob")]
    assert identity(store.get_task_info(shared.id)) == before


def test_the_watch_authorizer_receives_the_owner_of_a_user_scoped_id(store: WorkerStore) -> None:
    fn = Recorder(allow=False)
    set_watch_authorizer(store, fn)
    new = NewTaskFactory(watchers=("alice", "svc"))
    store.submit(new, "alice")
    with pytest.raises(AuthorizationError):
        store.submit(NewTaskFactory(key=new.key), "bob")
    assert fn.calls == [(new.id, ("alice", "svc"), "bob")]


def test_an_allowed_join_of_a_live_task_makes_the_caller_a_watcher(store: WorkerStore) -> None:
    set_watch_authorizer(store, Recorder(allow=True))
    first = NewTaskFactory(global_scope=True, watchers=("alice",))
    store.submit(first, "alice")
    again = NewTaskFactory(global_scope=True, key=first.key, watchers=("bob", "carol"))
    assert store.submit(again, "bob") == Submitted(first.id, first.run_id, created=False)
    assert identity(store.get_task_info(first.id)) == (
        first.run_id,
        ("alice", "bob"),
        "PENDING",
        [1, 2],
        None,
    )


def test_an_allowed_rerun_of_a_finished_task_resets_its_watchers(store: WorkerStore) -> None:
    set_watch_authorizer(store, Recorder(allow=True))
    first = NewTaskFactory(global_scope=True, watchers=("alice", "svc"))
    store.submit(first, "alice")
    finish(store, first.id)
    again = NewTaskFactory(global_scope=True, key=first.key, watchers=("bob", "carol"))
    assert store.submit(again, "bob").created
    assert store.get_task_info(first.id).watchers == ("bob", "carol")  # type: ignore[union-attr]


def test_a_none_watch_authorizer_denies_every_cross_user_join(store: WorkerStore) -> None:
    set_watch_authorizer(store, Recorder(allow=True))
    set_watch_authorizer(store, None)
    assert store.watch_authorizer is None
    first = NewTaskFactory(global_scope=True, watchers=("alice",))
    store.submit(first, "alice")
    with pytest.raises(AuthorizationError):
        store.submit(NewTaskFactory(global_scope=True, key=first.key, watchers=("bob",)), "bob")


@pytest.mark.parametrize("finished", [False, True], ids=["live", "finished"])
def test_system_bypasses_the_watch_authorizer(store: WorkerStore, finished: bool) -> None:
    fn = Recorder(allow=False)
    set_watch_authorizer(store, fn)
    first = NewTaskFactory(global_scope=True, watchers=("alice",))
    store.submit(first, "alice")
    if finished:
        finish(store, first.id)
    again = NewTaskFactory(global_scope=True, key=first.key, watchers=())
    done = store.submit(again, None)
    assert fn.calls == []
    assert done.created is finished
    expected = ((), again.run_id) if finished else (("alice",), first.run_id)
    info = store.get_task_info(first.id)
    assert info is not None
    assert (info.watchers, info.run_id) == expected


def test_a_refused_batch_writes_nothing(store: WorkerStore) -> None:
    foreign = NewTaskFactory(global_scope=True, watchers=("alice",))
    store.submit(foreign, "alice")
    fresh = NewTaskFactory(owner="bob")
    clash = NewTaskFactory(global_scope=True, key=foreign.key, watchers=("bob",))
    with pytest.raises(AuthorizationError):
        store.submit_many([fresh, clash], "bob")
    assert store.get_task_info(fresh.id) is None
    assert [t.id for t in store.list_tasks(user_id=None)] == [foreign.id]


def test_a_batch_that_names_one_key_twice_writes_one_record(store: WorkerStore) -> None:
    batch = [TaskSubmission(key="twice", task=add, args=[1, 2])] * 2
    ids = submit_tasks(batch, ALICE, store=store)
    assert ids == ["alice::twice", "alice::twice"]
    assert [t.id for t in store.list_tasks(user_id=None)] == ["alice::twice"]


# -- submit through the API: the queue authorizer and watchers ------------------------------------


def test_the_queue_authorizer_is_consulted_on_every_submit_path(store: WorkerStore) -> None:
    fn = Recorder(allow=True)
    set_queue_authorizer(store, fn)
    task_id = submit_task("a", add, ALICE, args=[1, 2], store=store)
    submit_task("a", add, ALICE, args=[1, 2], store=store)  # join
    finish(store, task_id)
    submit_task("a", add, ALICE, args=[1, 2], store=store)  # re-run
    submit_task("b", add, ALICE, args=[1, 2], queue="reports", store=store)
    submit_task("c", django_add, ALICE, args=[1, 2], store=store)
    batch = [TaskSubmission(key=k, task=add, args=[1, 2], queue="bulk") for k in "de"]
    batch.append(TaskSubmission(key="f", task=add, queue="other"))
    submit_tasks(batch, ALICE, store=store)
    # A pure predicate: a batch asks once per queue its tasks share, not once per task.
    assert fn.calls == [("default", "alice")] * 3 + [
        ("reports", "alice"),
        ("default", "alice"),
        ("bulk", "alice"),
        ("other", "alice"),
    ]


@pytest.mark.parametrize("path", ["submit_task", "submit_tasks", "join"])
def test_a_queue_refusal_writes_nothing(store: WorkerStore, path: str) -> None:
    if path == "join":
        submit_task("a", add, ALICE, args=[1, 2], store=store)
    before = [identity(t) for t in store.list_tasks(user_id=None)]
    set_queue_authorizer(store, lambda queue, user_id: queue != "default")
    ok = TaskSubmission(key="ok", task=add, args=[1, 2], queue="reports")
    refused = TaskSubmission(key="a", task=add, args=[1, 2])
    call: Callable[[], object]
    if path == "submit_tasks":
        call = partial(submit_tasks, [ok, refused], ALICE, store=store)
    else:
        call = partial(submit_task, "a", add, ALICE, args=[1, 2], store=store)
    with pytest.raises(AuthorizationError, match="'default'"):
        call()
    assert [identity(t) for t in store.list_tasks(user_id=None)] == before


def test_system_bypasses_the_queue_authorizer(store: WorkerStore) -> None:
    fn = Recorder(allow=False)
    set_queue_authorizer(store, fn)
    task_id = submit_task("g", add, System(), args=[1, 2], scope="global", store=store)
    assert fn.calls == []
    assert get_task_status(task_id, System(), store=store).queue == "default"


def test_a_rerun_resets_watchers_to_the_submitter_and_the_given_ones(store: WorkerStore) -> None:
    task_id = submit_task("k", add, ALICE, args=[1, 2], watchers=[SVC], store=store)
    assert get_task_status(task_id, SVC, store=store).watchers == ("alice", "svc")
    finish(store, task_id)
    submit_task("k", add, ALICE, args=[1, 2], watchers=[CAROL], store=store)
    assert get_task_status(task_id, CAROL, store=store).watchers == ("alice", "carol")
    with pytest.raises(TaskNotFound):
        get_task_status(task_id, SVC, store=store)


# -- try_transition -----------------------------------------------------------------------------


def test_try_transition_moves_a_record_of_the_named_run(store: WorkerStore) -> None:
    new = NewTaskFactory()
    store.submit(new, "alice")
    assert store.try_transition(new.id, new.run_id, [TaskStatus.PENDING], TaskStatus.RUNNING)
    assert store.try_transition(
        new.id, new.run_id, [TaskStatus.RUNNING], TaskStatus.RUNNING, progress=5.0
    )
    info = store.get_task_info(new.id)
    assert info is not None
    assert (info.status, info.progress) == ("RUNNING", 5.0)


@pytest.mark.parametrize("status", sorted(TERMINAL_STATUSES))
def test_try_transition_and_set_task_state_cannot_end_a_record(
    store: WorkerStore, status: TaskStatus
) -> None:
    new = NewTaskFactory()
    store.submit(new, "alice")
    before = identity(store.get_task_info(new.id))
    with pytest.raises(ValueError, match="end_tasks"):
        store.try_transition(new.id, new.run_id, [TaskStatus.PENDING], status)
    with pytest.raises(ValueError, match="end_tasks"):
        store.set_task_state(new.id, new.run_id, status=status)
    assert identity(store.get_task_info(new.id)) == before


def test_try_transition_refuses_a_superseded_run(store: WorkerStore) -> None:
    first = NewTaskFactory()
    store.submit(first, "alice")
    finish(store, first.id, TaskStatus.FAILED)
    again = NewTaskFactory(key=first.key)
    store.submit(again, "alice")
    before = identity(store.get_task_info(first.id))
    # The late terminal write of the first run loses its fence, whatever state it names.
    assert not store.try_transition(
        first.id, first.run_id, ALL_STATUSES, TaskStatus.RUNNING, result="late"
    )
    assert not store.try_transition(first.id, "not-a-run", ALL_STATUSES, TaskStatus.RUNNING)
    assert identity(store.get_task_info(first.id)) == before


def test_try_transition_refuses_a_wrong_from_state(store: WorkerStore) -> None:
    new = NewTaskFactory()
    store.submit(new, "alice")
    wrong = [s for s in ALL_STATUSES if s != TaskStatus.PENDING]
    assert not store.try_transition(new.id, new.run_id, wrong, TaskStatus.RUNNING)
    assert not store.try_transition(new.id, ANY_RUN, wrong, TaskStatus.RUNNING)
    assert store.get_task_info(new.id).status == "PENDING"  # type: ignore[union-attr]


def test_try_transition_any_run_is_the_named_opt_out(store: WorkerStore) -> None:
    new = NewTaskFactory()
    store.submit(new, "alice")
    assert store.try_transition(new.id, ANY_RUN, [TaskStatus.PENDING], TaskStatus.RUNNING)
    info = store.get_task_info(new.id)
    assert info is not None
    assert (info.status, info.run_id) == ("RUNNING", new.run_id)


def test_try_transition_of_a_missing_task_is_false(store: WorkerStore) -> None:
    assert not store.try_transition("nope", ANY_RUN, ALL_STATUSES, TaskStatus.RUNNING)


@pytest.mark.parametrize(
    "fields", [{"watchers": ["bob"]}, {"status": "RUNNING"}, {"owner": "bob"}, {"colour": "red"}]
)
def test_try_transition_refuses_non_state_fields(store: WorkerStore, fields: dict) -> None:
    new = NewTaskFactory()
    store.submit(new, "alice")
    before = identity(store.get_task_info(new.id))
    with pytest.raises(ValueError, match="state"):
        store.try_transition(new.id, new.run_id, [TaskStatus.PENDING], TaskStatus.RUNNING, **fields)
    assert identity(store.get_task_info(new.id)) == before


# -- set_task_state, replace_task, add_watcher ---------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [{"watchers": ["bob"]}, {"owner": "bob"}, {"id": "x"}, {"colour": "red"}],
)
def test_set_task_state_refuses_identity_and_unknown_fields(
    store: WorkerStore, fields: dict
) -> None:
    new = NewTaskFactory(watchers=("alice", "svc"))
    store.submit(new, "alice")
    before = identity(store.get_task_info(new.id))
    with pytest.raises(ValueError, match="state"):
        store.set_task_state(new.id, new.run_id, progress=50.0, **fields)
    assert identity(store.get_task_info(new.id)) == before
    assert store.get_task_info(new.id).progress == 0.0  # type: ignore[union-attr]


def test_run_id_is_never_a_state_field(store: WorkerStore) -> None:
    new = NewTaskFactory()
    store.submit(new, "alice")
    fields: dict[str, Any] = {"run_id": "stolen"}
    with pytest.raises(TypeError, match="run_id"):
        store.set_task_state(new.id, new.run_id, **fields)
    with pytest.raises(TypeError, match="run_id"):
        store.try_transition(new.id, new.run_id, ALL_STATUSES, TaskStatus.RUNNING, **fields)
    assert store.get_task_info(new.id).run_id == new.run_id  # type: ignore[union-attr]


def test_set_task_state_writes_state_of_the_named_run_only(store: WorkerStore) -> None:
    new = NewTaskFactory(watchers=("alice", "svc"))
    store.submit(new, "alice")
    assert not store.set_task_state(new.id, "other-run", progress=10.0)
    assert not store.set_task_state("nope", ANY_RUN, progress=10.0)
    assert store.get_task_info(new.id).progress == 0.0  # type: ignore[union-attr]
    assert store.set_task_state(new.id, new.run_id, status=TaskStatus.WAITING, result=[1])
    assert store.set_task_state(new.id, ANY_RUN, progress=100.0)
    info = store.get_task_info(new.id)
    assert info is not None
    assert (info.status, info.result, info.progress) == ("WAITING", [1], 100.0)
    assert (info.run_id, info.watchers) == (new.run_id, ("alice", "svc"))


def test_replace_task_writes_the_whole_record(store: WorkerStore) -> None:
    first = NewTaskFactory(watchers=("alice", "svc"))
    store.submit(first, "alice")
    claim_one(store, first.id)
    finish(store, first.id)
    again = NewTaskFactory(key=first.key, args=[7], queue="other", watchers=("alice", "carol"))
    store.replace_task(again)
    info = store.get_task_info(first.id)
    assert info is not None
    assert identity(info) == (again.run_id, ("alice", "carol"), "PENDING", [7], None)
    assert (info.queue, info.attempts, info.worker_id, info.started_at) == ("other", 0, None, None)
    assert (info.created_at, info.finished_at) == (again.created_at, None)


def test_add_watcher_cannot_duplicate(store: WorkerStore) -> None:
    new = NewTaskFactory(global_scope=True, watchers=("alice",))
    store.submit(new, "alice")
    assert store.add_watcher(new.id, "bob")
    assert not store.add_watcher(new.id, "bob")
    assert not store.add_watcher(new.id, "alice")
    assert store.get_task_info(new.id).watchers == ("alice", "bob")  # type: ignore[union-attr]


def test_add_watcher_cannot_clobber_other_watchers(store: WorkerStore) -> None:
    new = NewTaskFactory(watchers=("alice", "svc"))
    store.submit(new, "alice")
    assert store.add_watcher(new.id, "bob")
    assert store.add_watcher(new.id, "carol")
    assert set(store.get_task_info(new.id).watchers) == {"alice", "svc", "bob", "carol"}  # type: ignore[union-attr]


def test_add_watcher_of_a_missing_task_is_false(store: WorkerStore) -> None:
    assert not store.add_watcher("nope", "bob")
    assert store.get_task_info("nope") is None
    assert store.list_tasks(user_id="bob") == []


# -- progress and late writes ----------------------------------------------------------------------


def test_update_progress_writes_only_while_its_run_is_running(store: WorkerStore) -> None:
    task_id = submit_task("k", add, ALICE, args=[1, 2], store=store)
    pending = get_task_status(task_id, ALICE, store=store)
    update_progress(pending, 10, store=store)
    assert get_task_status(task_id, ALICE, store=store).progress == 0.0
    running = claim_one(store, task_id)
    assert update_progress(running, 40, store=store).progress == 40.0
    assert get_task_status(task_id, ALICE, store=store).progress == 40.0
    cancel_task(task_id, ALICE, store=store)
    update_progress(running, 50, store=store)
    assert get_task_status(task_id, ALICE, store=store).progress == 40.0


def test_update_progress_of_a_superseded_run_changes_nothing(store: WorkerStore) -> None:
    task_id = submit_task("k", add, ALICE, args=[1, 2], store=store)
    old = claim_one(store, task_id)
    cancel_task(task_id, ALICE, store=store)
    submit_task("k", add, ALICE, args=[1, 2], store=store)
    new = claim_one(store, task_id)
    update_progress(old, 90, store=store)
    assert get_task_status(task_id, ALICE, store=store).progress == 0.0
    update_progress(new, 30, store=store)
    assert get_task_status(task_id, ALICE, store=store).progress == 30.0


@pytest.mark.parametrize("pct", [-0.1, 100.1, float("nan"), float("inf"), True, "50", None])
def test_update_progress_refuses_out_of_range(store: WorkerStore, pct: Any) -> None:
    task_id = submit_task("k", add, ALICE, args=[1, 2], store=store)
    running = claim_one(store, task_id)
    with pytest.raises(InvalidTaskOptions, match="progress"):
        update_progress(running, pct, store=store)
    assert get_task_status(task_id, ALICE, store=store).progress == 0.0


def test_ends_written_together_keep_each_ones_fields_and_what_it_leaves_out(
    store: WorkerStore,
) -> None:
    runs = []
    for n in range(3):
        task_id = submit_task(f"k{n}", add, ALICE, args=[n, 1], store=store)
        runs.append(update_progress(claim_one(store, task_id), 40, store=store))
    failure = TaskFailure("builtins.ValueError", "bad \u00e9 input", "Traceback ...")
    now = clock.now()
    ends = [
        # No progress, no errors: the stored ones stay.
        lifecycle.run_end(runs[0], "w1", TaskStatus.COMPLETED, now, result="a text"),
        lifecycle.run_end(
            runs[1],
            "w1",
            TaskStatus.FAILED,
            now,
            error=failure.to_json(),
            errors=[failure.to_json()],
            progress=75.0,
        ),
        lifecycle.run_end(
            runs[2],
            "w1",
            TaskStatus.COMPLETED,
            now,
            result={"a": [1, None, "\u00e9"]},
            progress=100.0,
        ),
    ]
    assert store.end_tasks(ends) == [True, True, True]
    done, failed, whole = (get_task_status(r.id, ALICE, store=store) for r in runs)
    assert (done.status, done.result, done.progress, done.error, done.errors) == (
        "COMPLETED",
        "a text",
        40.0,
        None,
        (),
    )
    assert (failed.status, failed.result, failed.progress) == ("FAILED", None, 75.0)
    assert (failed.error, failed.errors) == (failure, (failure,))
    assert (whole.result, whole.progress) == ({"a": [1, None, "\u00e9"]}, 100.0)
    assert {done.finished_at, failed.finished_at, whole.finished_at} == {now}


def test_a_late_finish_of_a_superseded_run_changes_nothing(store: WorkerStore) -> None:
    task_id = submit_task("k", add, ALICE, args=[1, 2], store=store)
    old = claim_one(store, task_id)
    cancel_task(task_id, ALICE, store=store)
    submit_task("k", add, ALICE, args=[3, 4], store=store)
    new = claim_one(store, task_id)  # the same worker runs the re-run
    late = lifecycle.run_end(old, "w1", TaskStatus.COMPLETED, clock.now(), result="late")
    assert store.end_tasks([late]) == [False]
    info = get_task_status(task_id, ALICE, store=store)
    assert identity(info) == (new.run_id, ("alice",), "RUNNING", [3, 4], None)
