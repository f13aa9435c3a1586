"""Declaring a workflow: ``Workflow``, its nodes, and the frozen plan they check out to.

A ``Workflow`` only records: ``add``, ``.after()``, ``.always()``, ``.undo()``
and ``.priority()`` never raise for a misuse (an object that is not a node of
this workflow, a duplicate or malformed name, a node that runs after one added
later, a second undo). ``Workflow.plan()`` then checks every node's task,
arguments, queue, priority and options the way a plain task submission is
checked, and raises one ``InvalidWorkflow`` listing every problem, or returns
a ``WorkflowPlan``. Nothing is written here.

``WorkflowPlan`` and how its hash is taken are in ``workflows.plan``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Final, Self

from django.db import InterfaceError, OperationalError
from django.tasks import Task

from django_workers import clock
from django_workers.authority import (
    Authority,
    Owner,
    check_authority,
    scoped_task_key,
    user_id_of,
)
from django_workers.bounds import NODE_NAME_MAX_LENGTH
from django_workers.core import new_run_id
from django_workers.engine import machine
from django_workers.engine.records import (
    HasNodes,
    node_key,
    node_label,
    node_task_id,
    plan_nodes,
    row_fields,
)
from django_workers.exceptions import (
    AuthorizationError,
    DatabaseUnavailable,
    InvalidWorkflow,
    WorkflowExists,
)
from django_workers.info import TaskStatus
from django_workers.options import TaskOptions
from django_workers.references import TaskRef
from django_workers.stores import NewTask, WorkerStore, default_store
from django_workers.stores.base import NewWorkflow
from django_workers.submission import (
    _authorize_queue,
    _check_priority,
)
from django_workers.workflows import sharing, validation
from django_workers.workflows.handles import WorkflowHandle
from django_workers.workflows.plan import NodePlan, WorkflowPlan

NAME_PATTERN: Final = re.compile(rf"[A-Za-z0-9_.-]{{1,{NODE_NAME_MAX_LENGTH}}}")
ID_PATTERN: Final = re.compile(r"[A-Za-z0-9_.-]{1,128}")
#: Ids a workflow may not take (they name listings, not workflows).
RESERVED_IDS: Final = frozenset({"index"})

# -- the builder ------------------------------------------------------------------------------


class WorkflowNode:
    """A node of one workflow, returned by ``Workflow.add``; its methods chain."""

    __slots__ = (
        "_after",
        "_always",
        "_call",
        "_index",
        "_options",
        "_priority",
        "_undo",
        "_workflow",
        "name",
    )

    def __init__(
        self, workflow: Workflow, index: int, name: str, call: validation.Call, options: Any
    ) -> None:
        self._workflow = workflow
        self._index = index
        self.name = name
        self._call = call
        self._options = options
        self._after: set[int] = set()
        self._always = False
        self._priority: Any = None
        self._undo: validation.Call | None = None

    def __repr__(self) -> str:
        return f"<WorkflowNode {self.name!r} of {self._workflow.id!r}>"

    def after(self, *nodes: WorkflowNode) -> Self:
        """Run this node after ``nodes``, each added to the same workflow before it."""
        for node in nodes:
            problem = self._dependency_problem(node)
            if problem:
                self._workflow._record(problem)
            else:
                self._after.add(node._index)
        return self

    def always(self) -> Self:
        """Run this node once its dependencies have ended, however they ended."""
        self._always = True
        return self

    def undo(
        self,
        task: TaskRef,
        *,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        queue: str | None = None,
        options: TaskOptions | None = None,
    ) -> Self:
        """Give this node a compensation step, run if the workflow must undo its work.

        Without ``options`` it has ``UNDO_RETRIES`` retries: an undo interrupted by a
        crash, or failing once, is tried again before the compensation is declared failed.
        """
        if self._undo is not None:
            self._workflow._record(
                f"Node {self.name!r} is given a second .undo(); a node has at most one."
            )
        else:
            self._undo = validation.Call(task, args, kwargs, queue, options)
        return self

    def priority(self, priority: int) -> Self:
        """Set the priority of this node's task in its queue (-100 to 100)."""
        self._priority = priority
        return self

    def _dependency_problem(self, node: object) -> str | None:
        if not isinstance(node, WorkflowNode):
            return (
                f"Node {self.name!r} runs .after() a {type(node).__name__}, not a node; pass "
                "the objects wf.add() returned."
            )
        if node._workflow is not self._workflow:
            return (
                f"Node {self.name!r} runs .after() node {node.name!r} of another workflow "
                f"({node._workflow.id!r}); a workflow's nodes depend only on each other."
            )
        if node is self:
            return f"Node {self.name!r} runs .after() itself."
        if node._index > self._index:
            return (
                f"Node {self.name!r} runs .after() node {node.name!r}, which was added after it; "
                "add a node's dependencies first (so no cycle can be built)."
            )
        return None


class Workflow:
    """A DAG of tasks across queues, declared node by node and checked by ``plan()``."""

    def __init__(
        self,
        id: str,
        authority: Authority,
        *,
        fail_fast: bool = False,
        undo_on_cancel: bool = True,
        deadline: float | timedelta | None = None,
        watchers: Sequence[Owner] = (),
    ) -> None:
        self.authority = check_authority(authority)
        self.id = id
        self.fail_fast = fail_fast
        self.undo_on_cancel = undo_on_cancel
        #: Seconds (or a timedelta) from submit after which the workflow is cancelled.
        self.deadline = deadline
        self.watchers = watchers
        self._nodes: list[WorkflowNode] = []
        self._problems: list[str] = []

    def __repr__(self) -> str:
        return f"<Workflow {self.id!r}, {len(self._nodes)} nodes>"

    def add(
        self,
        name: str,
        task: TaskRef,
        *,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        queue: str | None = None,
        options: TaskOptions | None = None,
    ) -> WorkflowNode:
        """Add a node that runs ``task``; chain ``.after()`` to give it dependencies."""
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
            self._record(
                f"Node name {name!r} must be 1 to {NODE_NAME_MAX_LENGTH} letters, digits, '_', '.' "
                "or '-'."
            )
        elif any(node.name == name for node in self._nodes):
            self._record(f"Two nodes are named {name!r}; node names are unique in a workflow.")
        node = WorkflowNode(
            self, len(self._nodes), name, validation.Call(task, args, kwargs, queue), options
        )
        self._nodes.append(node)
        return node

    def plan(self, store: WorkerStore | None = None) -> WorkflowPlan:
        """Check the whole workflow and return its plan, or raise InvalidWorkflow listing all."""
        problems: list[str] = []
        scoped_id = self._check_id(problems)
        for flag in ("fail_fast", "undo_on_cancel"):
            if not isinstance(getattr(self, flag), bool):
                problems.append(f"{flag} must be True or False, got {getattr(self, flag)!r}.")
        deadline = validation.deadline_seconds(self.deadline, problems)
        if not self._nodes:
            problems.append("A workflow needs at least one node; add one with wf.add(name, task).")
        watchers = sharing.watcher_ids(self.watchers, self.authority, problems)
        problems.extend(self._problems)
        nodes = [self._plan_node(node, problems) for node in self._nodes]
        if problems:
            raise InvalidWorkflow(problems)
        assert scoped_id is not None
        plan = WorkflowPlan(
            id=scoped_id,
            key=self.id,
            owner=user_id_of(self.authority),
            fail_fast=self.fail_fast,
            undo_on_cancel=self.undo_on_cancel,
            nodes=tuple(node for node in nodes if node is not None),
            deadline=deadline,
            watchers=watchers,
        )
        self._authorize(plan, store if store is not None else default_store())
        return plan

    def submit(self, store: WorkerStore | None = None) -> WorkflowHandle:
        """Check the workflow and write it with its nodes at once; return its handle.

        Idempotent per id: the same plan again is a no-op returning the same handle;
        a different plan under the id raises WorkflowExists. Nothing is written when
        InvalidWorkflow, AuthorizationError or WorkflowExists is raised.
        """
        store = store if store is not None else default_store()
        return _write(self.plan(store), self.authority, store)

    def _record(self, problem: str) -> None:
        self._problems.append(problem)

    def _check_id(self, problems: list[str]) -> str | None:
        key = self.id
        if not isinstance(key, str) or not ID_PATTERN.fullmatch(key):
            problems.append(
                f"Workflow id {key!r} must be 1 to 128 letters, digits, '_', '.' or '-'."
            )
            return None
        if key in RESERVED_IDS:
            problems.append(f"Workflow id {key!r} is reserved; choose another id.")
            return None
        if isinstance(self.authority, Owner):
            return scoped_task_key(key, self.authority, "user")
        return scoped_task_key(key, self.authority, "global")

    def _plan_node(self, node: WorkflowNode, problems: list[str]) -> NodePlan | None:
        where = f"Node {node.name!r}"
        checked = validation.check_call(node._call, where, problems)
        django_task = node._call.task if isinstance(node._call.task, Task) else None
        declared = validation.task_defaults(node._call.task)
        options = validation.attempt(
            problems, where, validation.stored_options, node._options, declared, django_task
        )
        priority = node._priority
        if priority is None:
            priority = getattr(django_task, "priority", 0)
        priority = validation.attempt(problems, where, _check_priority, priority)
        undo = None
        if node._undo is not None:
            undo = validation.plan_undo(node._undo, f"The undo of node {node.name!r}", problems)
        if checked is None or options is None or priority is None:
            return None
        path, args, kwargs, queue = checked
        return NodePlan(
            name=node.name,
            deps=tuple(self._nodes[i].name for i in sorted(node._after)),
            always=node._always,
            task_path=path,
            args=args,
            kwargs=kwargs,
            queue=queue,
            priority=priority,
            options=options,
            undo=undo,
        )

    def _authorize(self, plan: WorkflowPlan, store: WorkerStore) -> None:
        refusals: list[AuthorizationError] = []
        for node in plan.nodes:
            queues = [node.queue] + ([node.undo.queue] if node.undo else [])
            for queue in queues:
                try:
                    _authorize_queue(store, queue, self.authority)
                except AuthorizationError as e:
                    refusals.append(e)
        if refusals:
            listed = " ".join(str(e) for e in refusals)
            raise AuthorizationError(
                f"Workflow {plan.key!r} uses queues its authority may not submit to: {listed}"
            ) from refusals[0]
        sharing.authorize_watchers(plan, self.authority, store)


# -- writing ------------------------------------------------------------------------------------


def _write(plan: WorkflowPlan, authority: Authority, store: WorkerStore) -> WorkflowHandle:
    """Write a checked plan: its row and its node records in one transaction, or nothing."""
    start = machine.start(
        plan.machine_nodes(), fail_fast=plan.fail_fast, undo_on_cancel=plan.undo_on_cancel
    )
    row: HasNodes = {
        "nodes": plan_nodes(
            [
                {
                    "name": node.name,
                    "deps": node.deps,
                    "always": node.always,
                    "queue": node.queue,
                    "undo": node.undo.to_json() if node.undo else None,
                }
                for node in plan.nodes
            ]
        )
    }
    promoted = {effect.node for effect in start.effects if isinstance(effect, machine.Promote)}
    now = clock.now()
    tasks = [
        NewTask(
            id=node_task_id(plan.id, plan.key, node_label(node.name)),
            key=node_key(plan.key, node.name),
            owner=plan.owner,
            scope="user" if plan.owner else "global",
            task_path=node.task_path,
            args=node.args,
            kwargs=node.kwargs,
            queue=node.queue,
            priority=node.priority,
            run_after=None,
            options=node.options,
            run_id=new_run_id(),
            created_at=now,
            status=TaskStatus.PENDING if node.name in promoted else TaskStatus.WAITING,
            # Whoever may see the workflow sees its nodes.
            watchers=plan.watchers,
            workflow=plan.id,
            node=node_label(node.name),
        )
        for node in plan.nodes
    ]
    workflow = NewWorkflow(
        id=plan.id,
        key=plan.key,
        owner=plan.owner,
        plan_hash=plan.plan_hash,
        fail_fast=plan.fail_fast,
        undo_on_cancel=plan.undo_on_cancel,
        state=row_fields(row, start.state),
        created_at=now,
        deadline=plan.deadline,
        deadline_at=None if plan.deadline is None else now + timedelta(seconds=plan.deadline),
        watchers=plan.watchers,
    )
    try:
        existing = store.submit_workflow(workflow, tasks)
    except (OperationalError, InterfaceError) as e:
        raise DatabaseUnavailable("submit the workflow", e) from e
    if existing is not None and existing != plan.plan_hash:
        raise WorkflowExists(plan.id, plan.plan_hash, existing)
    return WorkflowHandle(plan.id, authority, store)
