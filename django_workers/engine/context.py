"""Inside a node: ``current_run().workflow``, the workflow's id that also reads its nodes.

In a workflow's node, ``current_run().workflow`` is a ``WorkflowContext``: a
``str`` equal to the workflow id (so it compares, prints and serialises as the
id, as in every other snapshot), with ``result(name)``, ``failed(name)`` and
``outcome(name)`` to read what other nodes left. Outside a run, and for a
plain task, ``TaskInfo.workflow`` is the plain id or None.
"""

from __future__ import annotations

from typing import Any

from django_workers.authority import SEPARATOR
from django_workers.core import ReadsTasks
from django_workers.engine.records import node_label, node_task_id, read_label
from django_workers.exceptions import RemoteTaskError
from django_workers.info import TaskInfo, TaskStatus

_ENDED = (TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED)


class WorkflowContext(str):
    """The workflow id of the running node, with its nodes' outcomes and results."""

    _key: str
    _store: ReadsTasks
    #: The name of the node this run is (for an undo: the node it undoes).
    node: str
    #: True when this run is the node's undo (its compensation step).
    undo: bool

    def __new__(cls, info: TaskInfo, store: ReadsTasks) -> WorkflowContext:
        workflow_id = info.workflow or ""
        self = super().__new__(cls, workflow_id)
        self._key = workflow_id.split(SEPARATOR, 1)[1] if SEPARATOR in workflow_id else workflow_id
        self._store = store
        self.node, self.undo = read_label(info.node or "")
        return self

    def result(self, name: str) -> Any:
        """The JSON result of node ``name``; RemoteTaskError if it failed or was cancelled.

        LookupError if the workflow has no such node or it has not ended yet.
        """
        record = self._ended(name)
        if record.status == TaskStatus.COMPLETED:
            return record.result
        error = record.error
        raise RemoteTaskError(
            error.type if error else "",
            error.message if error else f"Node {name!r} ended {record.status}",
            error.traceback if error else "",
        )

    def failed(self, name: str) -> bool:
        """True if node ``name`` ended failed or cancelled (what an ``.always()`` node asks)."""
        return self._ended(name).status != TaskStatus.COMPLETED

    def outcome(self, name: str) -> str:
        """How node ``name`` ended: ``"completed"``, ``"failed"`` or ``"cancelled"``."""
        return str(self._ended(name).status).lower()

    def _ended(self, name: str) -> TaskInfo:
        task_id = node_task_id(str(self), self._key, node_label(name))
        record = self._store.get_task_info(task_id)
        if record is None or record.workflow != str(self):
            raise LookupError(f"Workflow {str(self)!r} has no node named {name!r}.")
        if record.status not in _ENDED:
            raise LookupError(
                f"Node {name!r} of workflow {str(self)!r} has not ended ({record.status}); "
                "a node reads only the nodes it runs .after()."
            )
        return record
