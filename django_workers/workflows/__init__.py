"""Workflows: DAGs of tasks across queues, with ``.always()`` nodes and saga compensation.

``machine`` is the pure state machine that decides what each end of a node
does (it imports no Django); ``builder`` declares a workflow and checks it into
a ``WorkflowPlan``; ``handles`` submits, reads, waits for, cancels and re-runs one;
``records`` is how the stores keep them, and ``persistence`` what they write
when a node ends, a workflow is cancelled or re-run.
"""

from __future__ import annotations

from django_workers.engine.records import UndoInfo, WorkflowInfo, WorkflowNodeInfo
from django_workers.exceptions import (
    InvalidWorkflow,
    WorkflowAlreadyFinished,
    WorkflowCancelNarrows,
    WorkflowCannotRerun,
    WorkflowExists,
    WorkflowNotFound,
)
from django_workers.workflows.builder import Workflow, WorkflowNode
from django_workers.workflows.handles import (
    WorkflowHandle,
    cancel_workflow,
    get_all_workflows,
    get_workflow_status,
    open_workflow,
    rerun_workflow,
)
from django_workers.workflows.plan import WorkflowPlan

__all__ = [
    "InvalidWorkflow",
    "UndoInfo",
    "Workflow",
    "WorkflowAlreadyFinished",
    "WorkflowCancelNarrows",
    "WorkflowCannotRerun",
    "WorkflowExists",
    "WorkflowHandle",
    "WorkflowInfo",
    "WorkflowNode",
    "WorkflowNodeInfo",
    "WorkflowNotFound",
    "WorkflowPlan",
    "cancel_workflow",
    "get_all_workflows",
    "get_workflow_status",
    "open_workflow",
    "rerun_workflow",
]
