"""The workflow machine ends the same whatever the order of its nodes' ends.

hypothesis draws DAGs (``.always()`` nodes, undos), an outcome for each node and
each undo, and feeds the ends in random orders a real workflow could see: only
a node the machine has made runnable (queued or running) starts or ends, and
only a queued or running undo. Without fail_fast every order gives the same
final state. With fail_fast, which queued nodes finish before the first failure
stops the rest is a matter of timing (see the example at the end), so every
order gives the same outcome, and each node ends as without fail_fast or
cancelled.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from django_workers.engine import machine
from django_workers.engine.machine import (
    Event,
    Node,
    NodeEnded,
    NodeStarted,
    NodeStatus,
    Outcome,
    UndoEnded,
    UndoStarted,
    UndoStatus,
    WorkflowState,
    WorkflowStatus,
)

PROPERTIES = settings(max_examples=300, derandomize=True, database=None, deadline=None)

type Choose = Callable[[list[Event]], Event]

#: Mostly completed, so that runs reach their later nodes.
outcomes = st.sampled_from(
    [Outcome.COMPLETED, Outcome.COMPLETED, Outcome.FAILED, Outcome.CANCELLED]
)


@st.composite
def plans(draw: st.DrawFn) -> tuple[list[Node], dict[str, Outcome], dict[str, Outcome]]:
    """Nodes in the order added, each after up to three earlier ones; every outcome."""
    nodes: list[Node] = []
    for i in range(draw(st.integers(1, 8))):
        deps = draw(st.lists(st.integers(0, i - 1), unique=True, max_size=3)) if i else []
        nodes.append(
            Node(
                name=f"n{i}",
                deps=tuple(f"n{dep}" for dep in sorted(deps)),
                always=draw(st.booleans()),
                has_undo=draw(st.booleans()),
            )
        )
    ends = {node.name: draw(outcomes) for node in nodes}
    undo_ends = {node.name: draw(outcomes) for node in nodes if node.has_undo}
    return nodes, ends, undo_ends


def possible(
    state: WorkflowState, ends: dict[str, Outcome], undo_ends: dict[str, Outcome]
) -> list[Event]:
    """What may happen next: a runnable node starts or ends, a queued or running undo too."""
    events: list[Event] = []
    for node in state.nodes:
        if node.status is NodeStatus.PENDING:
            events += [NodeStarted(node.name), NodeEnded(node.name, ends[node.name])]
        elif node.status is NodeStatus.RUNNING:
            events.append(NodeEnded(node.name, ends[node.name]))
        if node.undo is UndoStatus.PENDING:
            events += [UndoStarted(node.name), UndoEnded(node.name, undo_ends[node.name])]
        elif node.undo is UndoStatus.RUNNING:
            events.append(UndoEnded(node.name, undo_ends[node.name]))
    return events


def run(
    nodes: list[Node],
    ends: dict[str, Outcome],
    undo_ends: dict[str, Outcome],
    choose: Choose,
    *,
    fail_fast: bool,
) -> WorkflowState:
    """Feed chosen events until nothing can happen; the workflow must have ended by then."""
    state = machine.start(nodes, fail_fast=fail_fast).state
    while events := possible(state, ends, undo_ends):
        state = machine.apply(state, choose(events)).state
    assert state.ended, state
    return state


def in_plan_order(events: list[Event]) -> Event:
    """The first end, of the earliest node added: one order to compare the others with."""
    return next(event for event in events if isinstance(event, (NodeEnded, UndoEnded)))


@PROPERTIES
@given(plans(), st.data())
def test_without_fail_fast_every_order_of_ends_gives_the_same_end(plan, data) -> None:
    nodes, ends, undo_ends = plan
    reference = run(nodes, ends, undo_ends, in_plan_order, fail_fast=False)
    shuffled = run(
        nodes, ends, undo_ends, lambda events: data.draw(st.sampled_from(events)), fail_fast=False
    )
    assert shuffled == reference


@PROPERTIES
@given(plans(), st.data())
def test_with_fail_fast_every_order_fails_alike_and_only_cancels_more(plan, data) -> None:
    nodes, ends, undo_ends = plan
    unstopped = run(nodes, ends, undo_ends, in_plan_order, fail_fast=False)
    state = run(
        nodes, ends, undo_ends, lambda events: data.draw(st.sampled_from(events)), fail_fast=True
    )
    assert state.outcome is unstopped.outcome
    for before, node in zip(unstopped.nodes, state.nodes, strict=True):
        assert node.status in (before.status, NodeStatus.CANCELLED), node
        due = (
            state.outcome is Outcome.FAILED
            and node.has_undo
            and node.status is NodeStatus.COMPLETED
        )
        assert node.undo == (UndoStatus(undo_ends[node.name].value) if due else UndoStatus.IDLE)
    undos = [node.undo for node in state.nodes if node.undo is not UndoStatus.IDLE]
    if state.outcome is Outcome.COMPLETED:
        expected = WorkflowStatus.COMPLETED
    elif not undos:
        expected = WorkflowStatus.FAILED
    elif all(undo is UndoStatus.COMPLETED for undo in undos):
        expected = WorkflowStatus.COMPENSATED
    else:
        expected = WorkflowStatus.COMPENSATION_FAILED
    assert state.status is expected


def test_with_fail_fast_a_queued_node_ends_as_it_ran_before_the_failure_or_refused_after() -> None:
    nodes = [Node(name="a"), Node(name="b")]
    ends = {"a": Outcome.FAILED, "b": Outcome.COMPLETED}

    def order(first: str) -> Choose:
        return lambda events: next(
            (e for e in events if isinstance(e, NodeEnded) and e.node == first), events[-1]
        )

    b_first = run(nodes, ends, {}, order("b"), fail_fast=True)
    a_first = run(nodes, ends, {}, order("a"), fail_fast=True)
    assert b_first.node("b").status is NodeStatus.COMPLETED
    assert a_first.node("b").status is NodeStatus.CANCELLED
    assert a_first.status is b_first.status is WorkflowStatus.FAILED
