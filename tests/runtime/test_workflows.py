"""Workflows through the public API on every store: submit, read, cancel, inside a node, retention.

Tasks run in the test's thread through ``django_workers.testing.run_tasks``
(the claim, the pre-run check and the end path a worker takes), or on a
runtime thread where a test needs one.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings

from django_workers import (
    AuthorizationError,
    InvalidTaskKey,
    Owner,
    System,
    TaskStatus,
    Workflow,
    WorkflowAlreadyFinished,
    WorkflowCancelNarrows,
    WorkflowExists,
    WorkflowNotFound,
    cancel_task,
    cancel_workflow,
    clock,
    get_all_workflows,
    lifecycle,
    open_workflow,
    set_queue_authorizer,
    submit_task,
)
from django_workers.exceptions import InvalidWorkflow
from django_workers.handles import close_listeners
from django_workers.stores import WorkerStore
from django_workers.stores.database import DatabaseWorkerStore
from django_workers.stores.memory import InMemoryWorkerStore
from django_workers.testing import run_tasks
from tests import tasks as t
from tests.helpers import start_runtime, wait_until

ANN, BOB = Owner("ann"), Owner("bob")


def order(key: str, authority: Owner | System = ANN, *, value: int = 1, **flags: Any) -> Workflow:
    wf = Workflow(key, authority, **flags)
    charge = wf.add("charge", t.add, args=[value, 1]).undo(t.noop)
    wf.add("ship", t.add, args=[2, 2]).after(charge)
    return wf


# -- submit ------------------------------------------------------------------------------------


def test_submit_writes_the_nodes_and_is_a_no_op_for_the_same_plan(store: WorkerStore) -> None:
    handle = order("o1").submit(store=store)
    assert handle.id == "ann::o1"
    info = handle.status()
    assert (info.state, info.owner, info.key) == ("running", "ann", "o1")
    assert [(n.name, n.state, n.task_id) for n in info.nodes] == [
        ("charge", "pending", "ann::o1:charge"),
        ("ship", "waiting", "ann::o1:ship"),
    ]
    again = order("o1").submit(store=store)
    assert again.id == handle.id
    assert again.status().plan_hash == info.plan_hash
    with pytest.raises(WorkflowExists, match="different plan"):
        order("o1", value=2).submit(store=store)


def test_a_finished_workflow_submitted_again_stays_as_it_ended(store: WorkerStore) -> None:
    handle = order("o1").submit(store=store)
    run_tasks(store)
    assert handle.status().state == "completed"
    assert order("o1").submit(store=store).status().state == "completed"
    assert run_tasks(store) == []


def test_nothing_is_written_when_a_queue_is_refused(store: WorkerStore) -> None:
    set_queue_authorizer(store, lambda queue, user: queue != "vip")
    wf = Workflow("o1", ANN)
    wf.add("a", t.add, args=[1, 2]).undo(t.noop, queue="vip")
    with pytest.raises(AuthorizationError, match="vip"):
        wf.submit(store=store)
    assert store.get_workflow("ann::o1") is None
    assert store.get_task_info("ann::o1:a") is None


def test_a_node_id_taken_by_a_plain_task_refuses_the_workflow(store: WorkerStore) -> None:
    submit_task("o1:charge", t.add, ANN, args=[1, 2], store=store)
    with pytest.raises(InvalidWorkflow, match="taken by another task"):
        order("o1").submit(store=store)
    assert store.get_workflow("ann::o1") is None


def test_a_plain_submit_never_joins_or_reruns_a_node(store: WorkerStore) -> None:
    order("o1").submit(store=store)
    with pytest.raises(InvalidTaskKey, match="node of workflow"):
        submit_task("o1:charge", t.add, ANN, args=[1, 2], store=store)
    run_tasks(store)
    with pytest.raises(InvalidTaskKey, match="node of workflow"):
        submit_task("o1:charge", t.add, ANN, args=[1, 2], store=store)


# -- who sees what -----------------------------------------------------------------------------


def test_an_owner_sees_only_their_workflows(store: WorkerStore) -> None:
    order("o1").submit(store=store)
    order("o1", BOB).submit(store=store)
    assert open_workflow("o1", ANN, store=store).id == "ann::o1"  # a bare key is one's own
    assert open_workflow("ann::o1", ANN, store=store).id == "ann::o1"
    for call in (
        lambda: open_workflow("ann::o1", BOB, store=store),
        lambda: cancel_workflow("ann::o1", BOB, store=store),
        lambda: open_workflow("missing", BOB, store=store),
    ):
        with pytest.raises(WorkflowNotFound) as e:
            call()
        assert "visible to this authority" in str(e.value)
    assert [w.id for w in get_all_workflows(BOB, store=store)] == ["bob::o1"]
    assert {w.id for w in get_all_workflows(System(), store=store)} == {"ann::o1", "bob::o1"}
    assert open_workflow("ann::o1", System(), store=store).id == "ann::o1"


def test_listing_is_newest_first_filtered_and_paged(store: WorkerStore) -> None:
    for n in range(5):
        order(f"o{n}").submit(store=store)
    run_tasks(store)
    order("live").submit(store=store)
    assert [w.key for w in get_all_workflows(ANN, store=store)][:2] == ["live", "o4"]
    assert [w.key for w in get_all_workflows(ANN, state="running", store=store)] == ["live"]
    page = get_all_workflows(ANN, state="completed", offset=1, limit=2, store=store)
    assert [w.key for w in page] == ["o3", "o2"]
    with pytest.raises(ValueError, match="state must be one of"):
        get_all_workflows(ANN, state="done", store=store)
    with pytest.raises(ValueError, match="limit must be at most 1000"):
        get_all_workflows(ANN, limit=1001, store=store)


# -- cancel ------------------------------------------------------------------------------------


def test_cancel_before_anything_ran_runs_nothing(store: WorkerStore) -> None:
    handle = order("o1").submit(store=store)
    info = handle.cancel()
    assert (info.state, [n.state for n in info.nodes]) == ("cancelled", ["cancelled"] * 2)
    assert run_tasks(store) == []
    with pytest.raises(WorkflowAlreadyFinished, match="is cancelled"):
        handle.cancel()


def test_a_cancel_may_narrow_but_not_widen_the_undo_frozen_at_submit(store: WorkerStore) -> None:
    handle = order("o1", undo_on_cancel=False).submit(store=store)
    with pytest.raises(InvalidWorkflow, match="may only narrow"):
        handle.cancel(undo=True)
    with pytest.raises(InvalidWorkflow, match="undo must be None, True or False"):
        handle.cancel(undo="yes")  # type: ignore[arg-type]
    assert handle.status().state == "running"


def test_cancelling_after_a_node_completed_compensates_it(store: WorkerStore) -> None:
    handle = order("o1").submit(store=store)
    claimed = store.claim("w", None, 1, clock.now())
    assert store.begin_runs(claimed) == [True]
    run_tasks(store)  # nothing else is ready while charge runs
    info = handle.cancel()
    # charge still runs: the workflow waits for it, then undoes what it did; it says so at once.
    assert (info.state, info.cancel_undo, info.cancel_pending) == ("compensating", True, True)
    assert store.runs_to_stop("w", {claimed[0].id: claimed[0].run_id}) == {claimed[0].id: "user"}
    end = lifecycle.run_end(claimed[0], "w", TaskStatus.COMPLETED, clock.now(), result=2)
    assert store.end_tasks([end]) == [True]
    assert handle.status().state == "compensating"
    run_tasks(store)
    info = handle.status()
    assert (info.state, info.node("charge").undo.state) == ("compensated", "completed")  # type: ignore[union-attr]


def _cancel_while_charge_runs(store: WorkerStore, key: str, **flags: bool) -> tuple[str, object]:
    """Submit ``order(key)``, claim and start its charge; return the handle's id and the run."""
    handle = order(key, ANN, **flags).submit(store=store)
    [claimed] = store.claim("w", None, 1, clock.now())
    assert store.begin_runs([claimed]) == [True]
    return handle.id, claimed


def test_a_cancel_without_undo_while_a_node_runs_shows_cancelling(store: WorkerStore) -> None:
    workflow_id, claimed = _cancel_while_charge_runs(store, "o1")
    handle = open_workflow(workflow_id, ANN, store=store)
    info = handle.cancel(undo=False)
    assert (info.state, info.cancel_undo, info.cancel_pending) == ("cancelling", False, True)
    assert handle.status().state == "cancelling"
    assert not info.is_finished
    # Asking again changes nothing; the workflow ends once its running node has stopped.
    assert handle.cancel().state == "cancelling"
    end = lifecycle.run_end(claimed, "w", TaskStatus.CANCELLED, clock.now())  # type: ignore[arg-type]
    assert store.end_tasks([end]) == [True]
    info = handle.status()
    assert (info.state, info.cancel_pending) == ("cancelled", False)


def test_a_workflow_without_undo_steps_shows_cancelling_not_compensating(
    store: WorkerStore,
) -> None:
    wf = Workflow("plain", ANN)
    wf.add("only", t.add, args=[1, 1])
    handle = wf.submit(store=store)
    [claimed] = store.claim("w", None, 1, clock.now())
    assert store.begin_runs([claimed]) == [True]
    assert handle.cancel().state == "cancelling"


def test_dropping_the_undo_of_a_pending_cancel_must_be_asked_for(store: WorkerStore) -> None:
    workflow_id, claimed = _cancel_while_charge_runs(store, "o1")
    handle = open_workflow(workflow_id, ANN, store=store)
    assert handle.cancel().state == "compensating"
    with pytest.raises(WorkflowCancelNarrows, match="would drop them") as refused:
        handle.cancel(undo=False)
    assert refused.value.code == "cancel_narrows"
    assert handle.status().cancel_undo is True  # nothing changed
    assert handle.cancel().state == "compensating"  # the same cancel again changes nothing
    assert handle.cancel(undo=False, drop_undo=True).state == "cancelling"
    end = lifecycle.run_end(claimed, "w", TaskStatus.COMPLETED, clock.now(), result=2)  # type: ignore[arg-type]
    assert store.end_tasks([end]) == [True]
    info = handle.status()
    assert (info.state, info.node("charge").undo.state) == ("cancelled", "idle")  # type: ignore[union-attr]


def test_the_state_filter_reads_a_pending_cancel_as_shown(store: WorkerStore) -> None:
    _cancel_while_charge_runs(store, "undoing")
    open_workflow("undoing", ANN, store=store).cancel()
    _cancel_while_charge_runs(store, "stopping")
    open_workflow("stopping", ANN, store=store).cancel(undo=False)
    order("live").submit(store=store)

    def listed(state: str) -> list[str]:
        return [w.key for w in get_all_workflows(ANN, state=state, store=store)]

    assert listed("running") == ["live"]
    assert listed("cancelling") == ["stopping"]
    assert listed("compensating") == ["undoing"]
    assert [w.state for w in get_all_workflows(ANN, store=store)] == [
        "running",
        "cancelling",
        "compensating",
    ]


# -- inside a node -----------------------------------------------------------------------------


def test_a_node_reads_its_dependencies_through_current_run(store: WorkerStore) -> None:
    wf = Workflow("o1", ANN)
    ok = wf.add("ok", t.add, args=[20, 22])
    broken = wf.add("broken", t.fail)
    wf.add("read_ok", t.wf_read, args=["ok"]).after(ok)
    wf.add("read_broken", t.wf_read, args=["broken"]).after(broken).always()
    handle = wf.submit(store=store)
    run_tasks(store)
    seen = {n: store.get_task_info(f"ann::o1:{n}").result for n in ("read_ok", "read_broken")}  # type: ignore[union-attr]
    unknown = "Workflow 'ann::o1' has no node named 'nowhere'."
    assert seen["read_ok"] == {
        "id": "ann::o1",
        "outcome": "completed",
        "failed": False,
        "result": 42,
        "unknown": unknown,
    }
    assert seen["read_broken"] == {
        "id": "ann::o1",
        "outcome": "failed",
        "failed": True,
        "error": "builtins.ValueError: boom",
        "unknown": unknown,
    }
    assert handle.status().state == "completed"  # broken's failure was absorbed


@override_settings(DJANGO_WORKERS={"RESULT_MAX_BYTES": 100})
def test_a_result_over_the_limit_fails_the_node(store: WorkerStore) -> None:
    wf = Workflow("o1", ANN)
    big = wf.add("big", t.big_result, args=[500])
    wf.add("after", t.add, args=[1, 1]).after(big)
    handle = wf.submit(store=store)
    run_tasks(store)
    info = handle.status()
    assert (info.state, info.node("big").state, info.node("after").state) == (
        "failed",
        "failed",
        "cancelled",
    )
    assert "100" in (info.node("big").reason or "")
    assert info.node("big").result_size is None


def test_status_shows_result_sizes_and_reasons_never_results(store: WorkerStore) -> None:
    wf = Workflow("o1", ANN)
    wf.add("ok", t.big_result, args=[10])
    wf.add("broken", t.fail)
    handle = wf.submit(store=store)
    run_tasks(store)
    info = handle.status()
    assert (info.node("ok").result_size, info.node("ok").reason) == (12, None)
    assert (info.node("broken").result_size, info.node("broken").reason) == (None, "boom")


# -- retention ---------------------------------------------------------------------------------


def test_retention_deletes_ended_workflows_with_their_nodes_only(store: WorkerStore) -> None:
    order("done").submit(store=store)
    run_tasks(store)
    order("live").submit(store=store)
    later = clock.now() + timedelta(days=1)
    # A task retention pass leaves a workflow's nodes to their workflow.
    assert store.delete_finished(TaskStatus.COMPLETED, later, 100) == 0
    assert store.count_finished_workflows(later) == 1
    assert store.delete_finished_workflows(later, 100) == 1
    assert store.get_workflow("ann::done") is None
    assert store.get_task_info("ann::done:charge") is None
    assert store.get_workflow("ann::live") is not None
    assert store.get_task_info("ann::live:charge") is not None


# -- on a runtime ------------------------------------------------------------------------------


def test_a_promotion_wakes_an_idle_runtime_of_the_same_process() -> None:
    store = InMemoryWorkerStore()
    # Polling every 5 s: only the promotions' wake-ups can run five nodes within 4 s.
    runtime = start_runtime(store, poll_interval=5.0)
    try:
        wf = Workflow("chain", System())
        previous = None
        for n in range(5):
            node = wf.add(f"n{n}", t.add, args=[n, 0])
            if previous is not None:
                node.after(previous)
            previous = node
        info = wf.submit(store=store).wait(4.0)
        assert info.state == "completed"
    finally:
        runtime.stop()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="LISTEN/NOTIFY needs PostgreSQL")
def test_on_postgresql_notify_wakes_the_dependents_worker_and_the_waiter(
    db_store: DatabaseWorkerStore,
) -> None:
    # Idle workers and waiting handles poll every 5 s and 2 s here: only NOTIFY makes
    # three steps of a chain, and the wait on it, end within a second and a half.
    runtime = start_runtime(db_store, poll_interval=5.0)
    try:
        assert wait_until(lambda: runtime.runtime.listening, 10.0)
        wf = Workflow("notified", System())
        first = wf.add("first", t.add, args=[1, 1])
        second = wf.add("second", t.add, args=[2, 2]).after(first)
        wf.add("third", t.add, args=[3, 3]).after(second)
        handle = wf.submit(store=db_store)
        assert handle.wait(1.5).state == "completed"
    finally:
        runtime.stop()
        close_listeners()


def test_cancel_task_of_a_waiting_node_is_that_nodes_failure(store: WorkerStore) -> None:
    wf = Workflow("o1", ANN)
    first = wf.add("first", t.add, args=[1, 1])
    second = wf.add("second", t.add, args=[2, 2]).after(first)
    wf.add("third", t.add, args=[3, 3]).after(second)
    handle = wf.submit(store=store)
    cancelled = cancel_task("ann::o1:second", ANN, store=store)
    assert (cancelled.status, cancelled.cancel_reason) == ("CANCELLED", "user")
    run_tasks(store)
    info = handle.status()
    assert (info.state, [n.state for n in info.nodes]) == (
        "failed",
        ["completed", "cancelled", "cancelled"],
    )
    assert (
        info.node("third").reason
        == "Cancelled by its workflow: a dependency failed or was cancelled"
    )


@pytest.mark.parametrize("bad", ["a\x00b", "", "x" * 300, 7])
def test_an_id_that_cannot_exist_is_not_found_without_a_query(
    store: WorkerStore, bad: object
) -> None:
    with pytest.raises(WorkflowNotFound):
        open_workflow(bad, System(), store=store)  # type: ignore[arg-type]
