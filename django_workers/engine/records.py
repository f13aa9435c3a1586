"""How a workflow is kept: its row's encoding of the machine's state, and what a reader sees.

A workflow is one row (its flags, and per node the machine's view plus the
node's queue and undo call) and one task record per node and per started
undo. A node's task key is ``"<workflow key>:<node>"`` and its undo's
``"<workflow key>:<node>:undo"``, scoped like the workflow id; the record's
``node`` column holds the node's name, with ``:undo`` for its undo. Names and
keys never hold ``:``, so these read back without doubt.

Pure: this module imports only the state machine and the row types; the
stores read and write the rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, TypedDict, cast

from django_workers.bounds import NODE_LABEL_MAX_LENGTH, NODE_NAME_MAX_LENGTH
from django_workers.core import StoredNode, StoredUndo, WorkflowColumns, WorkflowRow
from django_workers.engine.machine import (
    NODE_ENDS,
    RERUNNABLE,
    WORKFLOW_ENDS,
    Node,
    NodeStatus,
    Outcome,
    UndoStatus,
    WorkflowState,
    WorkflowStatus,
)

UNDO_SUFFIX: Final = ":undo"
#: The node states a node never leaves.
NODE_END_STATES: Final = frozenset(status.value for status in NODE_ENDS)
#: Retries of an undo given no options: compensation runs at least once, whatever crashes.
UNDO_RETRIES: Final = 3
# The ``node`` column holds the longest name with its undo's suffix.
assert NODE_NAME_MAX_LENGTH + len(UNDO_SUFFIX) <= NODE_LABEL_MAX_LENGTH
#: What a reader sees of a running workflow whose cancel, without undo, waits for running nodes.
CANCELLING: Final = "cancelling"
#: Every state a snapshot shows: the machine's, with ``cancelling`` after ``running``.
SHOWN_STATES: Final = (
    WorkflowStatus.RUNNING.value,
    CANCELLING,
    *(s.value for s in WorkflowStatus if s is not WorkflowStatus.RUNNING),
)
#: The workflow columns the machine's state is kept in (besides ``nodes``).
STATE_COLUMNS: Final = ("state", "outcome", "unabsorbed_failure", "cancel_undo")


def node_key(workflow_key: str, name: str, *, undo: bool = False) -> str:
    """The task key of a node (or of its undo) in the workflow keyed ``workflow_key``."""
    return f"{workflow_key}:{name}{UNDO_SUFFIX if undo else ''}"


def node_label(name: str, *, undo: bool = False) -> str:
    """What a node's task record holds in its ``node`` column."""
    return f"{name}{UNDO_SUFFIX if undo else ''}"


def read_label(label: str) -> tuple[str, bool]:
    """The node name and whether the record is its undo, from a ``node`` column."""
    if label.endswith(UNDO_SUFFIX):
        return label[: -len(UNDO_SUFFIX)], True
    return label, False


def node_task_id(workflow_id: str, workflow_key: str, label: str) -> str:
    """The task id of a node's record: the workflow id with its key replaced by the node's."""
    name, undo = read_label(label)
    return workflow_id[: len(workflow_id) - len(workflow_key)] + node_key(
        workflow_key, name, undo=undo
    )


# -- the row ------------------------------------------------------------------------------------


class HasNodes(TypedDict):
    """A workflow row, or the start of one: its ``nodes`` column is all ``row_fields`` reads."""

    nodes: list[StoredNode]


def plan_nodes(nodes: Sequence[Mapping[str, Any]]) -> list[StoredNode]:
    """The ``nodes`` column of a new workflow, from each node's name, deps, flags and calls."""
    return [
        {
            "name": node["name"],
            "deps": list(node["deps"]),
            "always": node["always"],
            "queue": node["queue"],
            "status": NodeStatus.WAITING.value,
            # The plan's undo call (``UndoPlan.to_json()``), not queued yet.
            "undo": None
            if node["undo"] is None
            else cast(StoredUndo, {**node["undo"], "status": "idle"}),
        }
        for node in nodes
    ]


def state_of(row: WorkflowRow) -> WorkflowState:
    """The machine's state of the workflow ``row`` holds."""
    nodes = tuple(
        Node(
            name=node["name"],
            deps=tuple(node["deps"]),
            always=node["always"],
            has_undo=node["undo"] is not None,
            status=NodeStatus(node["status"]),
            undo=UndoStatus(node["undo"]["status"]) if node["undo"] else UndoStatus.IDLE,
        )
        for node in row["nodes"]
    )
    return WorkflowState(
        nodes=nodes,
        fail_fast=row["fail_fast"],
        undo_on_cancel=row["undo_on_cancel"],
        status=WorkflowStatus(row["state"]),
        outcome=Outcome(row["outcome"]) if row["outcome"] else None,
        unabsorbed_failure=row["unabsorbed_failure"],
        cancel_undo=row["cancel_undo"],
    )


def row_fields(row: HasNodes, state: WorkflowState) -> WorkflowColumns:
    """The columns to write so that ``row`` holds ``state``."""
    nodes = []
    for stored, node in zip(row["nodes"], state.nodes, strict=True):
        kept: StoredNode = {**stored, "status": node.status.value}
        if stored["undo"] is not None:
            kept["undo"] = {**stored["undo"], "status": node.undo.value}
        nodes.append(kept)
    return {
        "state": state.status.value,
        "outcome": state.outcome.value if state.outcome else None,
        "unabsorbed_failure": state.unabsorbed_failure,
        "cancel_undo": state.cancel_undo,
        "nodes": nodes,
    }


# -- what a reader sees -------------------------------------------------------------------------


def shown_state(state: str, cancel_undo: bool | None) -> str:
    """The state a reader sees: a cancel accepted while nodes still run shows at once.

    The machine stays ``running`` until its running nodes have stopped; a reader
    sees ``compensating`` if the cancel undoes completed steps, else ``cancelling``.
    """
    if state != WorkflowStatus.RUNNING or cancel_undo is None:
        return state
    return WorkflowStatus.COMPENSATING.value if cancel_undo else CANCELLING


def state_columns(shown: str) -> list[dict[str, Any]]:
    """The rows in the shown state ``shown``: alternatives of column equalities (None: NULL)."""
    running = WorkflowStatus.RUNNING.value
    if shown == running:
        return [{"state": running, "cancel_undo": None}]
    if shown == CANCELLING:
        return [{"state": running, "cancel_undo": False}]
    if shown == WorkflowStatus.COMPENSATING:
        return [{"state": shown}, {"state": running, "cancel_undo": True}]
    return [{"state": shown}]


def in_state(row: WorkflowRow, shown: str) -> bool:
    """Whether a workflow row is in the shown state ``shown``."""
    return shown_state(row["state"], row.get("cancel_undo")) == shown


@dataclass(frozen=True, slots=True, kw_only=True)
class UndoInfo:
    """A node's compensation step: where it is, and its task once it was queued."""

    state: str
    task_path: str
    queue: str
    #: None until the undo is queued (its task record is made then).
    task_id: str | None = None
    #: Why it did not complete: its error's message or its cancel reason.
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowNodeInfo:
    """One node of a workflow as its status reads now."""

    name: str
    #: ``waiting``, ``pending``, ``running``, ``completed``, ``failed`` or ``cancelled``.
    state: str
    deps: tuple[str, ...]
    always: bool
    queue: str
    task_id: str
    #: Why it did not complete: its error's message or its cancel reason.
    reason: str | None = None
    #: The size in bytes of its JSON result, once completed (never the result itself).
    result_size: int | None = None
    undo: UndoInfo | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowInfo:
    """A snapshot of one workflow; every read returns a new one."""

    id: str
    key: str
    owner: str | None
    #: ``running``, ``cancelling``, ``completed``, ``failed``, ``cancelled``,
    #: ``compensating``, ``compensated`` or ``compensation_failed``.
    state: str
    fail_fast: bool
    undo_on_cancel: bool
    plan_hash: str
    created_at: datetime
    finished_at: datetime | None
    nodes: tuple[WorkflowNodeInfo, ...]
    #: None until a cancel is accepted; then whether it undoes completed steps.
    cancel_undo: bool | None = None
    #: Why the accepted cancel came: ``user`` or ``deadline``; None if never cancelled.
    cancel_reason: str | None = None
    #: How many times its nodes have been run: 1, plus one for each re-run.
    runs: int = 1
    #: When the current run is cancelled (its deadline); None if it has none.
    deadline_at: datetime | None = None
    #: The user ids that may read and cancel it (and its nodes' records), owner first.
    watchers: tuple[str, ...] = ()

    @property
    def is_finished(self) -> bool:
        """True once the workflow is in an end state until it is re-run."""
        return self.state in WORKFLOW_ENDS

    @property
    def accepts_rerun(self) -> bool:
        """Whether ``rerun_workflow`` may run it again: it ended without undoing its steps."""
        return self.state in RERUNNABLE

    @property
    def accepts_cancel(self) -> bool:
        """Whether a cancel may still be asked: some node has not ended yet."""
        return not self.is_finished and any(
            node.state not in NODE_END_STATES for node in self.nodes
        )

    @property
    def cancel_pending(self) -> bool:
        """Whether a cancel was accepted while some node still runs."""
        return self.cancel_undo is not None and self.accepts_cancel

    def node(self, name: str) -> WorkflowNodeInfo:
        """The node called ``name``; KeyError if the workflow has none."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"Workflow {self.id!r} has no node named {name!r}.")


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What a workflow's status reads from one node's (or undo's) task record."""

    status: str
    reason: str | None
    result_size: int | None


def info_of(row: WorkflowRow, records: Mapping[str, NodeRecord]) -> WorkflowInfo:
    """The snapshot of a workflow ``row``; ``records`` maps its task ids to what they hold."""
    workflow_id, key = row["id"], row["key"]
    nodes = []
    for node in row["nodes"]:
        task_id = node_task_id(workflow_id, key, node["name"])
        record = records.get(task_id)
        undo = None
        if node["undo"] is not None:
            undo = _undo_info(
                node["undo"], node_task_id(workflow_id, key, node["name"] + UNDO_SUFFIX), records
            )
        nodes.append(
            WorkflowNodeInfo(
                name=node["name"],
                state=_live_state(node["status"], record),
                deps=tuple(node["deps"]),
                always=node["always"],
                queue=node["queue"],
                task_id=task_id,
                reason=record.reason if record else None,
                result_size=record.result_size if record else None,
                undo=undo,
            )
        )
    return WorkflowInfo(
        id=workflow_id,
        key=key,
        owner=row["owner"],
        state=shown_state(row["state"], row.get("cancel_undo")),
        fail_fast=row["fail_fast"],
        undo_on_cancel=row["undo_on_cancel"],
        plan_hash=row["plan_hash"],
        created_at=row["created_at"],
        finished_at=row["finished_at"],
        nodes=tuple(nodes),
        cancel_undo=row.get("cancel_undo"),
        cancel_reason=row.get("cancel_reason"),
        runs=row.get("runs", 1),
        deadline_at=row.get("deadline_at"),
        watchers=watchers_of(row),
    )


def granted(row: Mapping[str, Any]) -> tuple[str, ...]:
    """The watchers a workflow ``row`` gives each record written for it (node, undo, re-run)."""
    return tuple(row.get("watchers") or ())


def watchers_of(row: Mapping[str, Any]) -> tuple[str, ...]:
    """The user ids that may see a workflow ``row``: its owner first, then its watchers."""
    owner = row["owner"]
    granted = [w for w in row.get("watchers") or () if w != owner]
    return tuple(([owner] if owner else []) + granted)


def _undo_info(undo: StoredUndo, task_id: str, records: Mapping[str, NodeRecord]) -> UndoInfo:
    record = records.get(task_id)
    queued = undo["status"] not in (UndoStatus.IDLE, UndoStatus.WAITING)
    return UndoInfo(
        state=_live_state(undo["status"], record),
        task_path=undo["task"],
        queue=undo["queue"],
        task_id=task_id if queued else None,
        reason=record.reason if record and queued else None,
    )


def _live_state(stored: str, record: NodeRecord | None) -> str:
    # The machine learns a node runs at its pre-run check; the record says so at its claim.
    if (
        stored in ("pending", "running")
        and record is not None
        and record.status in ("pending", "running")
    ):
        return record.status
    return stored
