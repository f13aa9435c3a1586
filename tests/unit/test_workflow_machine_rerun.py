"""The machine's re-run: which nodes keep their results, which run again, and in what order."""

from __future__ import annotations

import pytest

from django_workers.engine import machine
from django_workers.engine.machine import (
    Finished,
    InvalidEvent,
    NodeStatus,
    Promote,
    UndoStatus,
    WorkflowState,
    WorkflowStatus,
)
from tests.unit.test_workflow_machine import (
    CASES,
    cancel,
    fail,
    nodes_of,
    ok,
    run,
    undo_fail,
    undo_ok,
)

CHAIN = ["s1", "s2: s1", "s3: s2", "s4: s3", "s5: s4", "s6: s5"]


def played(plan: list[str], *events: machine.Event, **flags: bool) -> WorkflowState:
    state = machine.start(nodes_of(*plan), **flags).state
    for event in events:
        state = machine.apply(state, event).state
    return state


def statuses(state: WorkflowState) -> dict[str, str]:
    return {node.name: node.status.value for node in state.nodes}


def test_a_chain_failed_at_its_fourth_step_runs_four_to_six_again() -> None:
    failed = played(CHAIN, ok("s1"), ok("s2"), ok("s3"), fail("s4"))
    assert failed.status is WorkflowStatus.FAILED

    again = machine.rerun(failed)

    assert again.state.status is WorkflowStatus.RUNNING
    assert statuses(again.state) == {
        "s1": "completed",
        "s2": "completed",
        "s3": "completed",
        "s4": "pending",
        "s5": "waiting",
        "s6": "waiting",
    }
    assert again.effects == (Promote("s4"),)
    assert again.state.outcome is None
    assert not again.state.unabsorbed_failure


def test_the_rerun_runs_to_completion_like_a_first_run() -> None:
    failed = played(CHAIN, ok("s1"), ok("s2"), ok("s3"), fail("s4"))
    state = machine.rerun(failed).state
    for name in ("s4", "s5", "s6"):
        state = machine.apply(state, ok(name)).state
    assert state.status is WorkflowStatus.COMPLETED


def test_a_completed_always_node_after_a_node_that_runs_again_runs_again() -> None:
    failed = played(["a", "b: a always", "c: a"], fail("a"), ok("b"))
    assert failed.status is WorkflowStatus.FAILED
    again = machine.rerun(failed)
    assert statuses(again.state) == {"a": "pending", "b": "waiting", "c": "waiting"}


def test_a_cancel_without_undo_reruns_the_cancelled_and_never_run_nodes() -> None:
    cancelled = played(["a", "b: a", "c: b"], ok("a"), run("b"), cancel(False), fail("b"))
    assert cancelled.status is WorkflowStatus.CANCELLED
    again = machine.rerun(cancelled)
    assert statuses(again.state) == {"a": "completed", "b": "pending", "c": "waiting"}
    assert again.state.cancel_undo is None


def test_compensation_failed_reruns_the_nodes_whose_undo_ran() -> None:
    plan = ["a: undo", "b: undo", "c: a b"]
    ended = played(plan, ok("a"), ok("b"), fail("c"))
    ended = machine.apply(ended, machine.UndoStarted("a")).state
    ended = machine.apply(ended, undo_ok("a")).state
    ended = machine.apply(ended, machine.UndoStarted("b")).state
    ended = machine.apply(ended, undo_fail("b")).state
    assert ended.status is WorkflowStatus.COMPENSATION_FAILED

    again = machine.rerun(ended)

    assert statuses(again.state) == {"a": "pending", "b": "pending", "c": "waiting"}
    assert all(node.undo is UndoStatus.IDLE for node in again.state.nodes)


def test_a_cancel_that_every_node_outran_completes_on_rerun() -> None:
    outran = played(["a"], run("a"), cancel(False), ok("a"))
    assert outran.status is WorkflowStatus.CANCELLED
    again = machine.rerun(outran)
    assert again.state.status is WorkflowStatus.COMPLETED
    assert again.effects == (Finished(WorkflowStatus.COMPLETED),)


@pytest.mark.parametrize(
    "status", [WorkflowStatus.RUNNING, WorkflowStatus.COMPLETED, WorkflowStatus.COMPENSATED]
)
def test_only_a_failed_cancelled_or_compensation_failed_workflow_reruns(
    status: WorkflowStatus,
) -> None:
    state = WorkflowState(nodes=tuple(nodes_of("a")), status=status)
    with pytest.raises(InvalidEvent, match=status.value):
        machine.rerun(state)


@pytest.mark.parametrize(
    "c",
    [c for c in CASES if c.status in machine.RERUNNABLE],
    ids=lambda c: c.id,
)
def test_every_rerunnable_case_keeps_exactly_its_undisturbed_completed_nodes(c: object) -> None:
    ended = played(list(c.plan), *(event for event, _ in c.steps), **_flags(c))  # type: ignore[attr-defined]
    again = machine.rerun(ended).state
    rerun: set[str] = set()
    for before, after in zip(ended.nodes, again.nodes, strict=True):
        kept = (
            before.status is NodeStatus.COMPLETED
            and before.undo is UndoStatus.IDLE
            and rerun.isdisjoint(before.deps)
        )
        if not kept:
            rerun.add(before.name)
        assert (after.status is NodeStatus.COMPLETED) == kept, before.name
    assert again.status in (WorkflowStatus.RUNNING, WorkflowStatus.COMPLETED)


def _flags(c: object) -> dict[str, bool]:
    return {"fail_fast": c.fail_fast, "undo_on_cancel": c.undo_on_cancel}  # type: ignore[attr-defined]
