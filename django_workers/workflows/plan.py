"""The frozen plan a ``Workflow`` checks out to: its nodes, their undos, its hash.

The plan hash
-------------
``WorkflowPlan.plan_hash`` is the SHA-256 hex digest of the UTF-8 bytes of the
plan's canonical JSON (``WorkflowPlan.canonical_json()``): sorted keys, no
whitespace (``separators=(",", ":")``), ASCII only (``ensure_ascii=True``), of

    {"encoding": 1, "fail_fast": bool, "undo_on_cancel": bool, "nodes": [node, ...]}

with the nodes in the order they were added, each

    {"name": str, "deps": [names, sorted], "always": bool, "task": dotted path,
     "args": list, "kwargs": dict, "queue": str, "priority": int,
     "options": dict, "undo": null | {"task", "args", "kwargs", "queue", "options"}}

Arguments appear as they will be stored (after the JSON round trip), options
as ``TaskOptions.to_json()`` gives them. The workflow id, its owner, its watchers
and its deadline are not hashed: the id is what two plans are compared under, the
watchers say who may see it, and a deadline bounds a run rather than saying what
runs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Final

from django_workers.engine import machine

#: The version of the canonical JSON the plan hash is taken over.
HASH_ENCODING: Final = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class UndoPlan:
    """A node's compensation step, checked: what runs if the node's work must be undone."""

    task_path: str
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str
    options: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """Return the undo as the plan hash encodes it."""
        return {
            "task": self.task_path,
            "args": self.args,
            "kwargs": self.kwargs,
            "queue": self.queue,
            "options": self.options,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class NodePlan:
    """One node, checked: its place in the graph and the task record it will become."""

    name: str
    #: The nodes it runs after, in the order they were added.
    deps: tuple[str, ...]
    always: bool
    task_path: str
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str
    priority: int
    #: The task's options as stored (``TaskOptions.to_json()``).
    options: dict[str, Any]
    undo: UndoPlan | None

    def to_json(self) -> dict[str, Any]:
        """Return the node as the plan hash encodes it."""
        return {
            "name": self.name,
            "deps": sorted(self.deps),
            "always": self.always,
            "task": self.task_path,
            "args": self.args,
            "kwargs": self.kwargs,
            "queue": self.queue,
            "priority": self.priority,
            "options": self.options,
            "undo": self.undo.to_json() if self.undo else None,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowPlan:
    """A checked workflow, ready to be written: nothing in it can be refused as bad input."""

    #: The scoped id: ``"<user_id>::<key>"`` for an Owner, the key itself for System().
    id: str
    #: The id as given to ``Workflow``.
    key: str
    #: The owner's user id, None for a global workflow.
    owner: str | None
    fail_fast: bool
    undo_on_cancel: bool
    #: In the order they were added.
    nodes: tuple[NodePlan, ...]
    #: Seconds from submit (and from each re-run) after which it is cancelled; not hashed.
    deadline: float | None = None
    #: The user ids granted read and cancel besides the owner. Not hashed: like the
    #: owner, they say who may see the workflow, not what it runs.
    watchers: tuple[str, ...] = ()
    plan_hash: str = field(init=False)

    def __post_init__(self) -> None:
        digest = hashlib.sha256(self.canonical_json().encode()).hexdigest()
        object.__setattr__(self, "plan_hash", digest)

    def canonical_json(self) -> str:
        """Return the JSON document the plan hash is taken over."""
        document = {
            "encoding": HASH_ENCODING,
            "fail_fast": self.fail_fast,
            "undo_on_cancel": self.undo_on_cancel,
            "nodes": [node.to_json() for node in self.nodes],
        }
        return json.dumps(
            document, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
        )

    def machine_nodes(self) -> list[machine.Node]:
        """Return the nodes as the state machine's ``start`` takes them."""
        return [
            machine.Node(
                name=node.name, deps=node.deps, always=node.always, has_undo=node.undo is not None
            )
            for node in self.nodes
        ]
