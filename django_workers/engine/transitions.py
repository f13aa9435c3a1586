"""How one transition of the workflow machine is worked out: a draft of the next state.

``machine`` builds a ``Draft`` of a state, applies an event's rule to it, and
freezes it into a ``Transition``. Each rule is written once, here; the rules
themselves are stated in ``docs/workflows.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from django_workers.engine.vocabulary import (
    BROKEN,
    UNDO_ENDS,
    UNDO_OPEN,
    CancelWaiting,
    Effect,
    Finished,
    InvalidEvent,
    Node,
    NodeStatus,
    Outcome,
    Promote,
    RefuseQueued,
    StartUndo,
    StopRunning,
    Transition,
    UndoStatus,
    UnknownNode,
    WorkflowState,
    WorkflowStatus,
)


def check_plan(nodes: Sequence[Node]) -> None:
    if not nodes:
        raise ValueError("A workflow needs at least one node.")
    seen: set[str] = set()
    for node in nodes:
        if node.name in seen:
            raise ValueError(f"Two nodes are named {node.name!r}.")
        late = [dep for dep in node.deps if dep not in seen]
        if late:
            raise ValueError(f"Node {node.name!r} runs after {late!r}, not added before it.")
        if len(set(node.deps)) != len(node.deps):
            raise ValueError(f"Node {node.name!r} names a dependency twice.")
        if node.status is not NodeStatus.WAITING or node.undo is not UndoStatus.IDLE:
            raise ValueError(f"Node {node.name!r} has already begun; a plan starts fresh.")
        seen.add(node.name)


class Draft:
    """A working copy of one transition; ``transition()`` freezes it."""

    def __init__(self, state: WorkflowState) -> None:
        self.before = state
        self.state = state
        self.nodes = list(state.nodes)
        self.index = {node.name: i for i, node in enumerate(state.nodes)}
        self.effects: list[Effect] = []

    def position(self, name: str) -> int:
        try:
            return self.index[name]
        except KeyError:
            raise UnknownNode(name) from None

    def set_status(self, i: int, status: NodeStatus) -> None:
        self.nodes[i] = replace(self.nodes[i], status=status)

    def set_undo(self, i: int, undo: UndoStatus) -> None:
        self.nodes[i] = replace(self.nodes[i], undo=undo)

    def deps(self, i: int) -> list[Node]:
        return [self.nodes[self.index[dep]] for dep in self.nodes[i].deps]

    def dependents(self, i: int) -> list[int]:
        name = self.nodes[i].name
        return [j for j in range(i + 1, len(self.nodes)) if name in self.nodes[j].deps]

    def descendants(self, i: int) -> set[int]:
        found: set[int] = set()
        todo = self.dependents(i)
        while todo:
            j = todo.pop()
            if j not in found:
                found.add(j)
                todo.extend(self.dependents(j))
        return found

    def absorbed(self, i: int) -> bool:
        dependents = self.dependents(i)
        return bool(dependents) and all(self.nodes[j].always for j in dependents)

    def transition(self) -> Transition:
        if self.nodes == list(self.before.nodes) and self.state == self.before:
            return Transition(self.before, tuple(self.effects))
        return Transition(replace(self.state, nodes=tuple(self.nodes)), tuple(self.effects))


def node_started(draft: Draft, name: str) -> None:
    i = draft.position(name)
    status = draft.nodes[i].status
    if status is NodeStatus.WAITING:
        raise InvalidEvent(f"Node {name!r} is waiting for its dependencies; it cannot start.")
    if status is NodeStatus.PENDING:
        draft.set_status(i, NodeStatus.RUNNING)


def node_ended(draft: Draft, name: str, outcome: Outcome) -> None:
    i = draft.position(name)
    node = draft.nodes[i]
    if node.ended:
        return
    if node.status is NodeStatus.WAITING and outcome is not Outcome.CANCELLED:
        raise InvalidEvent(f"Node {name!r} is waiting; only a cancel can end it before it runs.")
    draft.set_status(i, NodeStatus(outcome.value))
    stop_except: frozenset[str] | None = None
    if _first_unabsorbed_failure(draft, i, outcome):
        draft.state = replace(draft.state, unabsorbed_failure=True)
        if draft.state.fail_fast:
            # The failed node's .always() dependents still run, and so does every .always()
            # node already queued: it was made to run whatever came before it.
            stop_except = frozenset(
                [draft.nodes[j].name for j in _always_dependents(draft, i)]
                + [n.name for n in draft.nodes if n.always and n.status is NodeStatus.PENDING]
            )
    settle(draft, stop_except=stop_except)
    end_run_if_done(draft)


def _first_unabsorbed_failure(draft: Draft, i: int, outcome: Outcome) -> bool:
    # After a cancel, failures are the cancel's doing: they neither fail fast nor fail the run.
    return (
        outcome is not Outcome.COMPLETED
        and not draft.state.unabsorbed_failure
        and draft.state.cancel_undo is None
        and not draft.absorbed(i)
    )


def _always_dependents(draft: Draft, i: int) -> list[int]:
    return [j for j in draft.dependents(i) if draft.nodes[j].always]


def cancel(draft: Draft, undo: bool | None) -> None:
    state = draft.state
    if undo and not state.undo_on_cancel:
        raise ValueError(
            "This workflow was submitted with undo_on_cancel=False; a cancel may only "
            "narrow that. Pass undo=None or undo=False."
        )
    if state.status is not WorkflowStatus.RUNNING:
        return
    # With no undo step in the plan there is nothing to undo: the cancel does not compensate
    # (and a reader shows it as ``cancelling``, not ``compensating``).
    has_undo = any(node.has_undo for node in state.nodes)
    compensate = (state.undo_on_cancel if undo is None else undo) and has_undo
    if state.cancel_undo is not None:
        # A repeated cancel may still narrow the first one; the nodes are already stopped.
        draft.state = replace(state, cancel_undo=state.cancel_undo and compensate)
        return
    draft.state = replace(state, cancel_undo=compensate)
    settle(draft, stop_except=frozenset(), stop_running=True)
    end_run_if_done(draft)


def settle(
    draft: Draft, *, stop_except: frozenset[str] | None = None, stop_running: bool = False
) -> None:
    # One pass in the order nodes were added reaches every cascade, since deps come first.
    for i, node in enumerate(draft.nodes):
        if node.status is NodeStatus.RUNNING and stop_running:
            draft.effects.append(StopRunning(node.name))
        elif node.status not in (NodeStatus.WAITING, NodeStatus.PENDING):
            continue
        elif stop_except is not None and node.name not in stop_except:
            _stop(draft, i)
        elif node.status is NodeStatus.WAITING:
            _resolve(draft, i)


def _stop(draft: Draft, i: int) -> None:
    node = draft.nodes[i]
    effect = CancelWaiting if node.status is NodeStatus.WAITING else RefuseQueued
    draft.set_status(i, NodeStatus.CANCELLED)
    draft.effects.append(effect(node.name))


def _resolve(draft: Draft, i: int) -> None:
    node = draft.nodes[i]
    deps = draft.deps(i)
    if not node.always and any(dep.status in BROKEN for dep in deps):
        draft.set_status(i, NodeStatus.CANCELLED)
        draft.effects.append(CancelWaiting(node.name))
    elif all(dep.ended for dep in deps):
        draft.set_status(i, NodeStatus.PENDING)
        draft.effects.append(Promote(node.name))


def end_run_if_done(draft: Draft) -> None:
    if draft.state.status is not WorkflowStatus.RUNNING:
        return
    if not all(node.ended for node in draft.nodes):
        return
    state = draft.state
    if state.unabsorbed_failure:
        outcome, compensate = Outcome.FAILED, True
    elif state.cancel_undo is not None:
        outcome, compensate = Outcome.CANCELLED, state.cancel_undo
    else:
        outcome, compensate = Outcome.COMPLETED, False
    draft.state = replace(state, outcome=outcome)
    if compensate:
        for i, node in enumerate(draft.nodes):
            if node.has_undo and node.status is NodeStatus.COMPLETED:
                draft.set_undo(i, UndoStatus.WAITING)
    if any(node.undo is UndoStatus.WAITING for node in draft.nodes):
        draft.state = replace(draft.state, status=WorkflowStatus.COMPENSATING)
        _advance_compensation(draft)
    else:
        _finish(draft, WorkflowStatus(outcome.value))


def undo_started(draft: Draft, name: str) -> None:
    i = _undo_position(draft, name)
    undo = draft.nodes[i].undo
    if undo in (UndoStatus.IDLE, UndoStatus.WAITING):
        raise InvalidEvent(f"The undo of node {name!r} is not queued; it cannot start.")
    if undo is UndoStatus.PENDING:
        draft.set_undo(i, UndoStatus.RUNNING)


def undo_ended(draft: Draft, name: str, outcome: Outcome) -> None:
    i = _undo_position(draft, name)
    undo = draft.nodes[i].undo
    if undo in UNDO_ENDS:
        return
    if undo in (UndoStatus.IDLE, UndoStatus.WAITING):
        raise InvalidEvent(f"The undo of node {name!r} is not queued; it cannot end.")
    draft.set_undo(i, UndoStatus(outcome.value))
    _advance_compensation(draft)


def _undo_position(draft: Draft, name: str) -> int:
    i = draft.position(name)
    if not draft.nodes[i].has_undo:
        raise InvalidEvent(f"Node {name!r} has no undo.")
    return i


def _advance_compensation(draft: Draft) -> None:
    for i, node in enumerate(draft.nodes):
        if node.undo is UndoStatus.WAITING and not _undo_blocked(draft, i):
            draft.set_undo(i, UndoStatus.PENDING)
            draft.effects.append(StartUndo(node.name))
    if any(node.undo in UNDO_OPEN for node in draft.nodes):
        return
    undone = all(node.undo in (UndoStatus.IDLE, UndoStatus.COMPLETED) for node in draft.nodes)
    _finish(draft, WorkflowStatus.COMPENSATED if undone else WorkflowStatus.COMPENSATION_FAILED)


def _undo_blocked(draft: Draft, i: int) -> bool:
    # Descendants without a due undo are passed through: only open undos below X hold it back.
    return any(draft.nodes[j].undo in UNDO_OPEN for j in draft.descendants(i))


def _finish(draft: Draft, status: WorkflowStatus) -> None:
    draft.state = replace(draft.state, status=status)
    draft.effects.append(Finished(status))
