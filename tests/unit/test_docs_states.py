"""The state diagrams of docs/reference/states.md have an arrow for each move the code allows."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest

from django_workers import lifecycle
from django_workers.info import TaskStatus

ROOT = Path(__file__).resolve().parent.parent.parent

#: Every change of a workflow's shown state the machine makes. A change of the machine that
#: adds or drops one fails here: check the diagram, docs/reference/states.md and docs/workflows.md.
WORKFLOW_MOVES = {
    ("[*]", "running"),
    ("running", "completed"),
    ("running", "failed"),  # the nodes end after a failure; or a cancel after it, none running
    ("running", "cancelled"),
    ("running", "cancelling"),
    ("running", "compensating"),
    ("cancelling", "cancelled"),
    ("cancelling", "failed"),  # a failure before the cancel keeps its outcome
    ("cancelling", "compensating"),  # ... and its compensation
    ("compensating", "cancelling"),  # a second cancel drops the compensation
    ("compensating", "cancelled"),  # a compensating cancel, and no completed step had an undo
    ("compensating", "failed"),
    ("compensating", "compensated"),
    ("compensating", "compensation_failed"),
    ("failed", "running"),
    ("cancelled", "running"),
    ("cancelled", "completed"),  # a re-run with nothing left to run
    ("compensation_failed", "running"),
    ("completed", "[*]"),
    ("compensated", "[*]"),
}

#: Every change of a node's state the machine makes.
NODE_MOVES = {
    ("[*]", "waiting"),
    ("[*]", "pending"),  # a root is promoted at submit
    ("waiting", "pending"),
    ("waiting", "cancelled"),
    ("pending", "running"),
    ("pending", "completed"),  # a queued node may end directly
    ("pending", "failed"),
    ("pending", "cancelled"),
    ("running", "completed"),
    ("running", "failed"),
    ("running", "cancelled"),
    *(
        (end, again)
        for end in ("completed", "failed", "cancelled")
        for again in ("waiting", "pending")
    ),
}

#: Every change of an undo step's state the machine makes.
UNDO_MOVES = {
    ("[*]", "idle"),
    ("idle", "waiting"),
    ("idle", "pending"),  # due, and no descendant's undo holds it back
    ("waiting", "pending"),
    ("pending", "running"),
    ("pending", "completed"),
    ("pending", "failed"),
    ("pending", "cancelled"),
    ("running", "completed"),
    ("running", "failed"),
    ("running", "cancelled"),
    *((end, "idle") for end in ("completed", "failed", "cancelled")),  # a re-run
}


def arrows(diagram: str) -> set[tuple[str, str]]:
    assert diagram.startswith("```mermaid\nstateDiagram-v2\n")
    return set(re.findall(r"^    (\S+) --> (\S+?)(?::.*)?$", diagram, flags=re.MULTILINE))


def test_the_task_diagram_has_an_arrow_for_each_kind_of_end(hooks: ModuleType) -> None:
    drawn = arrows(hooks.task_diagram())
    for kind, froms in lifecycle.FROM_STATUSES.items():
        for before in froms:
            for after in lifecycle.TO_STATUSES[kind]:
                assert (before.value, after.value) in drawn, kind
    assert ("[*]", "PENDING") in drawn
    assert ("PENDING", "RUNNING") in drawn
    assert ("WAITING", "PENDING") in drawn
    assert ("RUNNING", "PENDING") in drawn  # a retry, a requeue, a release
    assert {after for before, after in drawn if before != "[*]"} <= {*TaskStatus, "[*]"}


def test_every_kind_of_end_is_explained_under_the_task_diagram(hooks: ModuleType) -> None:
    diagram = hooks.task_diagram()
    for kind in lifecycle.EndKind:
        assert re.search(rf"^\| `{kind.value}` \| \S", diagram, flags=re.MULTILINE), kind


def test_an_end_writes_only_a_status_of_its_kind() -> None:
    with pytest.raises(ValueError, match="A retry end cannot write FAILED"):
        lifecycle.TaskEnd(kind=lifecycle.EndKind.RETRY, task_id="t", run_id="r")
    lifecycle.TaskEnd(
        kind=lifecycle.EndKind.RETRY, task_id="t", run_id="r", status=TaskStatus.PENDING
    )


def test_the_workflow_diagram_has_an_arrow_for_each_move_of_the_machine(hooks: ModuleType) -> None:
    assert arrows(hooks.workflow_diagram()) == WORKFLOW_MOVES


def test_the_node_and_undo_diagrams_have_an_arrow_for_each_move(hooks: ModuleType) -> None:
    assert arrows(hooks.node_diagram()) == NODE_MOVES
    assert arrows(hooks.undo_diagram()) == UNDO_MOVES
