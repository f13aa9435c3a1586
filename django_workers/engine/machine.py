"""The workflow state machine: the one place that decides what each end of a node does.

Pure: no Django, no database, no I/O, no clock. ``start`` turns a plan into the
first state; ``apply`` takes a state and an event and returns the next state
with the effects a store must carry out, in the transaction that recorded the
event. The same state and event always give the same transition, and node
effects come out in the order the nodes were added.

A failure (a node that ended failed or cancelled) is *absorbed* when the node
has at least one dependent and every dependent is ``.always()``: the workflow
can still complete. ``docs/workflows.md`` states every rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Final, assert_never


class NodeStatus(StrEnum):
    """Where a node is in its life."""

    #: Outside every queue: a dependency has not ended yet.
    WAITING = "waiting"
    #: In its queue, not started.
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class UndoStatus(StrEnum):
    """Where a node's undo (its saga compensation step) is."""

    #: No undo is due: none registered, the node did not complete, or nothing is undone.
    IDLE = "idle"
    #: Due: waits until the undos of the node's completed descendants have ended.
    WAITING = "waiting"
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class WorkflowStatus(StrEnum):
    """Where a workflow is: running its nodes, undoing them, or ended."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    COMPENSATING = "compensating"
    COMPENSATED = "compensated"
    COMPENSATION_FAILED = "compensation_failed"


class Outcome(StrEnum):
    """How a run ended: a node's, an undo's, or the nodes' as a whole."""

    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


NODE_ENDS: Final = frozenset({NodeStatus.COMPLETED, NodeStatus.FAILED, NodeStatus.CANCELLED})
UNDO_ENDS: Final = frozenset({UndoStatus.COMPLETED, UndoStatus.FAILED, UndoStatus.CANCELLED})
#: Undos that are due and have not ended: compensation goes on while one remains.
UNDO_OPEN: Final = frozenset({UndoStatus.WAITING, UndoStatus.PENDING, UndoStatus.RUNNING})
WORKFLOW_ENDS: Final = frozenset(
    {
        WorkflowStatus.COMPLETED,
        WorkflowStatus.FAILED,
        WorkflowStatus.CANCELLED,
        WorkflowStatus.COMPENSATED,
        WorkflowStatus.COMPENSATION_FAILED,
    }
)
_BROKEN: Final = frozenset({NodeStatus.FAILED, NodeStatus.CANCELLED})
#: The ends a workflow may be re-run from: its completed steps were not undone.
RERUNNABLE: Final = frozenset(
    {WorkflowStatus.FAILED, WorkflowStatus.CANCELLED, WorkflowStatus.COMPENSATION_FAILED}
)


class InvalidEvent(ValueError):
    """An event that cannot happen in this state: a store's mistake, not a user's."""


class UnknownNode(InvalidEvent, LookupError):
    """An event names a node the workflow does not have."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"The workflow has no node named {name!r}.")


# -- state ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    """One node: its place in the plan and where it is now."""

    name: str
    #: The nodes it runs after, each added before it.
    deps: tuple[str, ...] = ()
    #: Runs once its dependencies have ended, however they ended.
    always: bool = False
    has_undo: bool = False
    status: NodeStatus = NodeStatus.WAITING
    undo: UndoStatus = UndoStatus.IDLE

    @property
    def ended(self) -> bool:
        return self.status in NODE_ENDS


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowState:
    """A whole workflow as the machine sees it; nodes in the order they were added."""

    nodes: tuple[Node, ...]
    fail_fast: bool = False
    #: Whether a cancel with ``undo=None`` compensates; frozen when the workflow is submitted.
    undo_on_cancel: bool = True
    status: WorkflowStatus = WorkflowStatus.RUNNING
    #: How the nodes ended as a whole; None until every node has ended.
    outcome: Outcome | None = None
    #: A failure no ``.always()`` dependent absorbs has ended a node before any cancel.
    unabsorbed_failure: bool = False
    #: None: never cancelled; else whether the accepted cancel compensates.
    cancel_undo: bool | None = None

    def node(self, name: str) -> Node:
        """Return the node called ``name``."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise UnknownNode(name)

    @property
    def ended(self) -> bool:
        return self.status in WORKFLOW_ENDS


# -- events -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeStarted:
    """A worker starts running a pending node (after the pre-run check let it)."""

    node: str


@dataclass(frozen=True, slots=True)
class NodeEnded:
    """A node's task record ended, by its run or by any other end (cancel, timeout, lost)."""

    node: str
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class UndoStarted:
    """A worker starts running a node's undo."""

    node: str


@dataclass(frozen=True, slots=True)
class UndoEnded:
    """A node's undo ended; anything but completed makes the compensation fail."""

    node: str
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class CancelWorkflow:
    """Cancel the workflow; ``undo=None`` compensates as frozen at submit, False never."""

    undo: bool | None = None


type Event = NodeStarted | NodeEnded | UndoStarted | UndoEnded | CancelWorkflow


# -- effects ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Promote:
    """Make the node's task PENDING in its queue."""

    node: str


@dataclass(frozen=True, slots=True)
class CancelWaiting:
    """End the waiting node's task CANCELLED; it never runs."""

    node: str


@dataclass(frozen=True, slots=True)
class RefuseQueued:
    """End the queued node's task CANCELLED before it runs (the pre-run refusal)."""

    node: str


@dataclass(frozen=True, slots=True)
class StopRunning:
    """Give the running node's task the ``user`` cancel token."""

    node: str


@dataclass(frozen=True, slots=True)
class StartUndo:
    """Make the node's undo task PENDING in its queue."""

    node: str


@dataclass(frozen=True, slots=True)
class Finished:
    """The workflow has reached ``status``, an end it never leaves."""

    status: WorkflowStatus


type Effect = Promote | CancelWaiting | RefuseQueued | StopRunning | StartUndo | Finished


@dataclass(frozen=True, slots=True)
class Transition:
    """The state after an event and what a store must do, in this order."""

    state: WorkflowState
    effects: tuple[Effect, ...] = ()


# -- the machine ------------------------------------------------------------------------------


def start(
    nodes: Iterable[Node], *, fail_fast: bool = False, undo_on_cancel: bool = True
) -> Transition:
    """Return a new workflow of ``nodes`` with its roots promoted."""
    state = WorkflowState(nodes=tuple(nodes), fail_fast=fail_fast, undo_on_cancel=undo_on_cancel)
    _check_plan(state.nodes)
    draft = _Draft(state)
    _settle(draft)
    return draft.transition()


def apply(state: WorkflowState, event: Event) -> Transition:
    """Return the state after ``event`` and the effects a store must carry out."""
    draft = _Draft(state)
    match event:
        case NodeStarted(name):
            _node_started(draft, name)
        case NodeEnded(name, outcome):
            _node_ended(draft, name, outcome)
        case UndoStarted(name):
            _undo_started(draft, name)
        case UndoEnded(name, outcome):
            _undo_ended(draft, name, outcome)
        case CancelWorkflow(undo):
            _cancel(draft, undo)
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
    draft = _Draft(fresh)
    _settle(draft)
    # Nothing to run again (a cancel that every node outran): the run ends at once.
    _end_run_if_done(draft)
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


def _check_plan(nodes: Sequence[Node]) -> None:
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


class _Draft:
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


def _node_started(draft: _Draft, name: str) -> None:
    i = draft.position(name)
    status = draft.nodes[i].status
    if status is NodeStatus.WAITING:
        raise InvalidEvent(f"Node {name!r} is waiting for its dependencies; it cannot start.")
    if status is NodeStatus.PENDING:
        draft.set_status(i, NodeStatus.RUNNING)


def _node_ended(draft: _Draft, name: str, outcome: Outcome) -> None:
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
    _settle(draft, stop_except=stop_except)
    _end_run_if_done(draft)


def _first_unabsorbed_failure(draft: _Draft, i: int, outcome: Outcome) -> bool:
    # After a cancel, failures are the cancel's doing: they neither fail fast nor fail the run.
    return (
        outcome is not Outcome.COMPLETED
        and not draft.state.unabsorbed_failure
        and draft.state.cancel_undo is None
        and not draft.absorbed(i)
    )


def _always_dependents(draft: _Draft, i: int) -> list[int]:
    return [j for j in draft.dependents(i) if draft.nodes[j].always]


def _cancel(draft: _Draft, undo: bool | None) -> None:
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
    _settle(draft, stop_except=frozenset(), stop_running=True)
    _end_run_if_done(draft)


def _settle(
    draft: _Draft, *, stop_except: frozenset[str] | None = None, stop_running: bool = False
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


def _stop(draft: _Draft, i: int) -> None:
    node = draft.nodes[i]
    effect = CancelWaiting if node.status is NodeStatus.WAITING else RefuseQueued
    draft.set_status(i, NodeStatus.CANCELLED)
    draft.effects.append(effect(node.name))


def _resolve(draft: _Draft, i: int) -> None:
    node = draft.nodes[i]
    deps = draft.deps(i)
    if not node.always and any(dep.status in _BROKEN for dep in deps):
        draft.set_status(i, NodeStatus.CANCELLED)
        draft.effects.append(CancelWaiting(node.name))
    elif all(dep.ended for dep in deps):
        draft.set_status(i, NodeStatus.PENDING)
        draft.effects.append(Promote(node.name))


def _end_run_if_done(draft: _Draft) -> None:
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


def _undo_started(draft: _Draft, name: str) -> None:
    i = _undo_position(draft, name)
    undo = draft.nodes[i].undo
    if undo in (UndoStatus.IDLE, UndoStatus.WAITING):
        raise InvalidEvent(f"The undo of node {name!r} is not queued; it cannot start.")
    if undo is UndoStatus.PENDING:
        draft.set_undo(i, UndoStatus.RUNNING)


def _undo_ended(draft: _Draft, name: str, outcome: Outcome) -> None:
    i = _undo_position(draft, name)
    undo = draft.nodes[i].undo
    if undo in UNDO_ENDS:
        return
    if undo in (UndoStatus.IDLE, UndoStatus.WAITING):
        raise InvalidEvent(f"The undo of node {name!r} is not queued; it cannot end.")
    draft.set_undo(i, UndoStatus(outcome.value))
    _advance_compensation(draft)


def _undo_position(draft: _Draft, name: str) -> int:
    i = draft.position(name)
    if not draft.nodes[i].has_undo:
        raise InvalidEvent(f"Node {name!r} has no undo.")
    return i


def _advance_compensation(draft: _Draft) -> None:
    for i, node in enumerate(draft.nodes):
        if node.undo is UndoStatus.WAITING and not _undo_blocked(draft, i):
            draft.set_undo(i, UndoStatus.PENDING)
            draft.effects.append(StartUndo(node.name))
    if any(node.undo in UNDO_OPEN for node in draft.nodes):
        return
    undone = all(node.undo in (UndoStatus.IDLE, UndoStatus.COMPLETED) for node in draft.nodes)
    _finish(draft, WorkflowStatus.COMPENSATED if undone else WorkflowStatus.COMPENSATION_FAILED)


def _undo_blocked(draft: _Draft, i: int) -> bool:
    # Descendants without a due undo are passed through: only open undos below X hold it back.
    return any(draft.nodes[j].undo in UNDO_OPEN for j in draft.descendants(i))


def _finish(draft: _Draft, status: WorkflowStatus) -> None:
    draft.state = replace(draft.state, status=status)
    draft.effects.append(Finished(status))
