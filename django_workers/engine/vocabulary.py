"""The workflow machine's words: statuses, the state, the events and the effects.

Pure values with no behaviour beyond reading themselves; ``machine`` decides
what happens (its ``start``, ``apply``, ``rerun``) through ``transitions``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final


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
BROKEN: Final = frozenset({NodeStatus.FAILED, NodeStatus.CANCELLED})
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
