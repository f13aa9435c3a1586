"""What the workflow engine and the stores share: the record to write, rows, and run ids.

Below both: the stores write ``NewTask`` records, the workflow engine builds them
(a node's undo) and mints their run ids, and neither imports the other for it.
The rows a store reads and hands up (a task record, a workflow, a node's record)
are typed here, so each layer says which columns it reads.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NotRequired, Protocol, TypedDict

from django_workers.info import TaskInfo, TaskStatus


@dataclass(slots=True, kw_only=True)
class NewTask:
    """A record to write: a first submit, or the re-run that replaces a finished one.

    Never changed once built. Not a frozen dataclass only for speed: one is built per
    submitted task, and a frozen one's ``__init__`` pays a ``setattr`` call per field
    (an eighth of a bulk submit's time).
    """

    id: str
    key: str
    owner: str | None
    scope: str
    task_path: str
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str
    priority: int
    run_after: datetime | None
    options: dict[str, Any]
    run_id: str
    created_at: datetime
    # Identities granted read/list/cancel besides the owner derived from the id.
    watchers: tuple[str, ...] = ()
    status: TaskStatus = TaskStatus.PENDING
    workflow: str | None = None
    node: str | None = None
    # ``(args, kwargs, args as JSON text, kwargs as JSON text)`` as the submission's check
    # encoded them: a writer that sends JSON as text takes the text while ``args`` and
    # ``kwargs`` are still those objects, instead of encoding them again.
    arguments_json: tuple[Any, Any, str, str] | None = field(
        default=None, compare=False, repr=False
    )


class TaskRow(TypedDict):
    """A task record's columns by attribute name, as the ORM's ``values()`` and the SQL reads
    give them (JSON decoded, datetimes aware); ``rows.info_of`` makes a ``TaskInfo`` of one."""

    id: str
    key: str
    owner: str | None
    scope: str
    task_path: str
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str
    priority: int
    run_after: datetime | None
    options: dict[str, Any]
    status: str
    progress: float
    attempts: int
    result: Any
    #: ``TaskFailure.to_json()`` of the last failure, and of every failed attempt.
    error: dict[str, Any] | None
    errors: list[dict[str, Any]]
    cancel_reason: str
    run_id: str
    worker_id: str | None
    workflow: str | None
    node: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class GrantedTaskRow(TaskRow):
    """A task row as the hand-written reads give it: with its watchers' grants, in order."""

    grants: NotRequired[list[str]]


class NodeRow(TypedDict):
    """What a workflow's status reads of one node's (or undo's) task record."""

    id: str
    status: str
    result: Any
    error: dict[str, Any] | None
    cancel_reason: str


class LiveNodeRow(TypedDict):
    """A node's record as the workflow engine reads it before ending or starting it."""

    id: str
    run_id: str
    status: str
    worker_id: str | None
    queue: str
    #: A node's record always names its workflow, and its node (``engine.records.node_label``).
    workflow: str
    node: str
    cancel_reason: str


class StoredUndo(TypedDict):
    """A node's undo call in a workflow row, and where the undo is (``UndoStatus``)."""

    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str
    options: dict[str, Any]
    status: str


class StoredNode(TypedDict):
    """One node in a workflow row's ``nodes``: the machine's view of it and its calls."""

    name: str
    deps: list[str]
    always: bool
    queue: str
    #: ``NodeStatus``
    status: str
    undo: StoredUndo | None


class WorkflowColumns(TypedDict):
    """The columns that hold the workflow machine's state: what the engine writes."""

    state: str
    outcome: str | None
    unabsorbed_failure: bool
    cancel_undo: bool | None
    nodes: list[StoredNode]
    #: Stamped once, by the write that ends the workflow.
    finished_at: NotRequired[datetime | None]
    #: Why the accepted cancel came (``user``, ``deadline``); written by a cancel and a re-run.
    cancel_reason: NotRequired[str | None]
    #: How many times its nodes have been run; a re-run adds one.
    runs: NotRequired[int]
    #: When the current run passes its deadline; a re-run sets it again.
    deadline_at: NotRequired[datetime | None]


class WorkflowRow(WorkflowColumns):
    """A workflow's columns by attribute name: what the engine reads and a snapshot shows."""

    id: str
    key: str
    owner: str | None
    plan_hash: str
    fail_fast: bool
    undo_on_cancel: bool
    created_at: datetime
    #: The deadline in seconds as submitted (None: none).
    deadline: NotRequired[float | None]
    #: The user ids granted read and cancel at submit, besides the owner.
    watchers: NotRequired[list[str]]


class ReadsTasks(Protocol):
    """What reads one task's record: the part of a store a workflow node's context needs."""

    def get_task_info(self, task_id: str) -> TaskInfo | None:
        """The durable snapshot of a record, or None."""


#: Run ids minted ahead, from one read of the random source (a system call each).
_RUN_IDS: deque[str] = deque()
_RUN_ID_BLOCK = 256


def new_run_id() -> str:
    """Mint the identity of a new run: 32 hex digits, formatted like ``uuid.uuid4().hex``."""
    try:
        return _RUN_IDS.popleft()  # atomic: no two callers get the same id
    except IndexError:
        _RUN_IDS.extend(_mint_run_ids(_RUN_ID_BLOCK))
        return _RUN_IDS.popleft()


def new_run_ids(count: int) -> list[str]:
    """Mint ``count`` run ids; a large batch reads the random source once for all of them."""
    if count >= _RUN_ID_BLOCK:
        return _mint_run_ids(count)
    return [new_run_id() for _ in range(count)]


# The version (4) and variant (RFC 4122) bits of a random UUID, as uuid.uuid4() sets them,
# as tables for bytes.translate.
_VERSION_BITS = bytes(b & 0x0F | 0x40 for b in range(256))
_VARIANT_BITS = bytes(b & 0x3F | 0x80 for b in range(256))


def _mint_run_ids(count: int) -> list[str]:
    raw = bytearray(os.urandom(16 * count))
    raw[6::16] = raw[6::16].translate(_VERSION_BITS)
    raw[8::16] = raw[8::16].translate(_VARIANT_BITS)
    text = raw.hex()
    return [text[i : i + 32] for i in range(0, 32 * count, 32)]


# A forked child must not hand out the ids its parent still holds.
os.register_at_fork(after_in_child=_RUN_IDS.clear)
