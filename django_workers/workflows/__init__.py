"""Workflows: DAGs of tasks across queues, with ``.always()`` nodes and saga compensation.

``machine`` is the pure state machine that decides what each end of a node
does (it imports no Django); ``builder`` declares a workflow and checks it into
a ``WorkflowPlan``. The persistence and the handles come later, so nothing
here submits a workflow yet.
"""

from __future__ import annotations

from django_workers.exceptions import InvalidWorkflow, WorkflowExists, WorkflowNotFound
from django_workers.workflows.builder import Workflow, WorkflowNode, WorkflowPlan

__all__ = [
    "InvalidWorkflow",
    "Workflow",
    "WorkflowExists",
    "WorkflowNode",
    "WorkflowNotFound",
    "WorkflowPlan",
]
