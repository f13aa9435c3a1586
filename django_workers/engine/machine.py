"""The workflow state machine: the one place that decides what each end of a node does.

Pure: no Django, no database, no I/O, no clock. ``start`` turns a plan into the
first state; ``apply`` takes a state and an event and returns the next state
with the effects a store must carry out, in the transaction that recorded the
event. The same state and event always give the same transition, and node
effects come out in the order the nodes were added.

A failure (a node that ended failed or cancelled) is *absorbed* when the node
has at least one dependent and every dependent is ``.always()``: the workflow
can still complete. ``docs/workflows.md`` states every rule.

The words it speaks (statuses, the state, events, effects) are in
``vocabulary`` and exported here; how a transition is worked out is
``transitions``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import assert_never

from django_workers.engine import transitions
from django_workers.engine.vocabulary import (
    BROKEN,
    NODE_ENDS,
    RERUNNABLE,
    UNDO_ENDS,
    UNDO_OPEN,
    WORKFLOW_ENDS,
    CancelWaiting,
    CancelWorkflow,
    Effect,
    Event,
    Finished,
    InvalidEvent,
    Node,
    NodeEnded,
    NodeStarted,
    NodeStatus,
    Outcome,
    Promote,
    RefuseQueued,
    StartUndo,
    StopRunning,
    Transition,
    UndoEnded,
    UndoStarted,
    UndoStatus,
    UnknownNode,
    WorkflowState,
    WorkflowStatus,
)

# -- the machine ------------------------------------------------------------------------------


def start(
    nodes: Iterable[Node], *, fail_fast: bool = False, undo_on_cancel: bool = True
) -> Transition:
    """Return a new workflow of ``nodes`` with its roots promoted."""
    state = WorkflowState(nodes=tuple(nodes), fail_fast=fail_fast, undo_on_cancel=undo_on_cancel)
    transitions.check_plan(state.nodes)
    draft = transitions.Draft(state)
    transitions.settle(draft)
    return draft.transition()


def apply(state: WorkflowState, event: Event) -> Transition:
    """Return the state after ``event`` and the effects a store must carry out."""
    draft = transitions.Draft(state)
    match event:
        case NodeStarted(name):
            transitions.node_started(draft, name)
        case NodeEnded(name, outcome):
            transitions.node_ended(draft, name, outcome)
        case UndoStarted(name):
            transitions.undo_started(draft, name)
        case UndoEnded(name, outcome):
            transitions.undo_ended(draft, name, outcome)
        case CancelWorkflow(undo):
            transitions.cancel(draft, undo)
        case _:
            assert_never(event)
    return draft.transition()


def rerun(state: WorkflowState) -> Transition:
    """Return the workflow running again from where it ended, with its ready nodes promoted.

    A completed node whose work was not undone keeps its result; every other node
    (failed, cancelled, never run, or undone by a compensation) waits again, and so
    does every node after one that runs again. The flags of the ended run are cleared.
    """
    if state.status not in RERUNNABLE:
        raise InvalidEvent(f"A {state.status} workflow cannot be re-run.")
    again: set[str] = set()
    nodes = []
    for node in state.nodes:
        kept = (
            node.status is NodeStatus.COMPLETED
            and node.undo is UndoStatus.IDLE
            and again.isdisjoint(node.deps)
        )
        if not kept:
            again.add(node.name)
        status = NodeStatus.COMPLETED if kept else NodeStatus.WAITING
        nodes.append(replace(node, status=status, undo=UndoStatus.IDLE))
    fresh = WorkflowState(
        nodes=tuple(nodes), fail_fast=state.fail_fast, undo_on_cancel=state.undo_on_cancel
    )
    draft = transitions.Draft(fresh)
    transitions.settle(draft)
    # Nothing to run again (a cancel that every node outran): the run ends at once.
    transitions.end_run_if_done(draft)
    return draft.transition()


def may_start(state: WorkflowState, name: str, *, undo: bool = False) -> bool:
    """Whether a worker may start the node (or its undo): the pre-run check.

    Queued work may start; so may running work, whose run went back to its queue
    after its worker was lost and is claimed again.
    """
    node = state.node(name)
    if undo:
        return node.undo in (UndoStatus.PENDING, UndoStatus.RUNNING)
    return node.status in (NodeStatus.PENDING, NodeStatus.RUNNING)


__all__ = [
    "BROKEN",
    "NODE_ENDS",
    "RERUNNABLE",
    "UNDO_ENDS",
    "UNDO_OPEN",
    "WORKFLOW_ENDS",
    "CancelWaiting",
    "CancelWorkflow",
    "Effect",
    "Event",
    "Finished",
    "InvalidEvent",
    "Node",
    "NodeEnded",
    "NodeStarted",
    "NodeStatus",
    "Outcome",
    "Promote",
    "RefuseQueued",
    "StartUndo",
    "StopRunning",
    "Transition",
    "UndoEnded",
    "UndoStarted",
    "UndoStatus",
    "UnknownNode",
    "WorkflowState",
    "WorkflowStatus",
    "apply",
    "may_start",
    "rerun",
    "start",
]
