"""The workflow engine as a function from data to data: rows and records in, writes out.

Each case gives a workflow row (its plan and where its nodes are), the node
records a store would read, and one call of the engine; it states the first
answer (given no records: which records it needs) and the whole answer (given
them). The engine package reads no store and no database.
"""

from __future__ import annotations

import ast
import copy
import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from django_workers.cancellation import CancelReason
from django_workers.core import LiveNodeRow, StoredNode, WorkflowRow
from django_workers.engine import persistence
from django_workers.engine.persistence import NodeRecords, WorkflowWrites
from django_workers.info import TaskStatus
from django_workers.lifecycle import EndKind, TaskEnd
from django_workers.stores.workflow_writes import MOST_ANSWERS, answered
from tests.unit.test_workflow_machine import nodes_of

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
ENGINE = Path(persistence.__file__).parent

type Call = Callable[[WorkflowRow, NodeRecords], WorkflowWrites | None]


def row_of(
    plan: Sequence[str],
    nodes: Mapping[str, str] | None = None,
    *,
    state: str = "running",
    outcome: str | None = None,
    fail_fast: bool = False,
    unabsorbed_failure: bool = False,
    deadline_at: datetime | None = None,
) -> WorkflowRow:
    """A stored workflow ``wf`` of ``plan``, its nodes where ``nodes`` says (else waiting)."""
    stored: list[StoredNode] = []
    for node in nodes_of(*plan):
        undo = None
        if node.has_undo:
            undo = {
                "task": "shop.tasks.undo",
                "args": [node.name],
                "kwargs": {},
                "queue": "undo",
                "options": {},
                "status": "idle",
            }
        stored.append(
            {
                "name": node.name,
                "deps": list(node.deps),
                "always": node.always,
                "queue": "default",
                "status": (nodes or {}).get(node.name, "waiting"),
                "undo": undo,  # type: ignore[typeddict-item]
            }
        )
    return {
        "id": "wf",
        "key": "wf",
        "owner": None,
        "plan_hash": "hash",
        "fail_fast": fail_fast,
        "undo_on_cancel": True,
        "created_at": NOW - timedelta(minutes=1),
        "state": state,
        "outcome": outcome,
        "unabsorbed_failure": unabsorbed_failure,
        "cancel_undo": None,
        "nodes": stored,
        "finished_at": None if state == "running" else NOW - timedelta(seconds=1),
        "runs": 1,
        "deadline_at": deadline_at,
    }


def record(name: str, status: str) -> LiveNodeRow:
    running = status == TaskStatus.RUNNING
    return {
        "id": f"wf:{name}",
        "run_id": f"run-{name}",
        "status": status,
        "worker_id": "w1" if running else None,
        "queue": "default",
        "workflow": "wf",
        "node": name,
        "cancel_reason": CancelReason.NONE.value,
    }


def ended(name: str, status: TaskStatus) -> TaskEnd:
    return TaskEnd(
        kind=EndKind.RUN,
        task_id=f"wf:{name}",
        run_id=f"run-{name}",
        worker_id="w1",
        status=status,
        finished_at=NOW,
        workflow="wf",
        node=name,
    )


def react(*ends: TaskEnd) -> Call:
    return lambda row, records: persistence.react({"wf": row}, ends, NOW, records)


def cancel(undo: bool | None, reason: CancelReason = CancelReason.USER) -> Call:
    return lambda row, records: persistence.cancel(row, undo, NOW, reason=reason, records=records)


def rerun(row: WorkflowRow, _records: NodeRecords) -> WorkflowWrites:
    return persistence.rerun(row, None, NOW)


@dataclass(frozen=True)
class Case:
    id: str
    row: WorkflowRow
    call: Call
    #: The live records' statuses, by node name (what a store would read).
    records: dict[str, str] = field(default_factory=dict)
    #: Node names whose records the first answer needs.
    needs: tuple[str, ...] = ()
    #: (node, the status its fence reads, reason) of each refusal.
    refused: tuple[tuple[str, str, CancelReason], ...] = ()
    promoted: tuple[str, ...] = ()
    undone: tuple[str, ...] = ()
    stopped: tuple[tuple[str, CancelReason], ...] = ()
    reset: tuple[str, ...] = ()
    state: str = "running"


W, P, R = TaskStatus.WAITING, TaskStatus.PENDING, TaskStatus.RUNNING
WORKFLOW, USER = CancelReason.WORKFLOW, CancelReason.USER

CASES = [
    Case(
        "a completion promotes its dependents, reading no record",
        row_of(["a", "b: a", "c: a"], {"a": "running"}),
        react(ended("a", TaskStatus.COMPLETED)),
        promoted=("b", "c"),
    ),
    Case(
        "the last completion ends the workflow",
        row_of(["a", "b: a"], {"a": "completed", "b": "running"}),
        react(ended("b", TaskStatus.COMPLETED)),
        state="completed",
    ),
    Case(
        "a failure with fail-fast refuses the queued node and cancels the waiting one",
        row_of(["x", "y", "z: x"], {"x": "running", "y": "pending"}, fail_fast=True),
        react(ended("x", TaskStatus.FAILED)),
        records={"y": P, "z": W},
        needs=("y", "z"),
        refused=(("y", P, WORKFLOW), ("z", W, WORKFLOW)),
        state="failed",
    ),
    Case(
        "a refused node a worker has claimed runs on: the workflow waits for it",
        row_of(["x", "y", "z: x"], {"x": "running", "y": "pending"}, fail_fast=True),
        react(ended("x", TaskStatus.FAILED)),
        records={"y": R, "z": W},
        needs=("y", "z"),
        refused=(("z", W, WORKFLOW),),
    ),
    Case(
        "a node promoted by one end and refused by the next stays refused",
        row_of(["a", "x", "b: a"], {"a": "running", "x": "running"}, fail_fast=True),
        react(ended("a", TaskStatus.COMPLETED), ended("x", TaskStatus.FAILED)),
        records={"b": W},
        needs=("b",),
        refused=(("b", W, WORKFLOW),),
        state="failed",
    ),
    Case(
        "a record already ended, or gone, is left as it is",
        row_of(["x", "y", "z: x"], {"x": "running", "y": "pending"}, fail_fast=True),
        react(ended("x", TaskStatus.FAILED)),
        records={"y": TaskStatus.CANCELLED},
        needs=("y", "z"),
        state="failed",
    ),
    Case(
        "a cancel with undo refuses what is queued and starts the undo of what completed",
        row_of(["a: undo", "b: a"], {"a": "completed", "b": "pending"}),
        cancel(True),
        records={"b": P},
        needs=("b",),
        refused=(("b", P, USER),),
        undone=("a",),
        state="compensating",
    ),
    Case(
        "a cancel asks running nodes to stop, with its reason",
        row_of(["a", "b"], {"a": "running", "b": "pending"}, deadline_at=NOW),
        cancel(False, CancelReason.DEADLINE),
        records={"b": P},
        needs=("b",),
        refused=(("b", P, CancelReason.DEADLINE),),
        stopped=(("a", CancelReason.DEADLINE),),
    ),
    Case(
        "a cancel that meets a claimed node asks it to stop instead of refusing it",
        row_of(["a", "b"], {"a": "running", "b": "pending"}),
        cancel(False),
        records={"b": R},
        needs=("b",),
        stopped=(("a", USER), ("b", USER)),
    ),
    Case(
        "a re-run resets what did not complete and promotes what is ready",
        row_of(
            ["a", "b: a", "c", "d: c"],
            {"a": "completed", "b": "failed", "c": "failed", "d": "cancelled"},
            state="failed",
            outcome="failed",
            unabsorbed_failure=True,
        ),
        rerun,
        promoted=("b", "c"),
        reset=("b", "c", "d"),
    ),
]


def _ids(names: Sequence[str]) -> tuple[str, ...]:
    return tuple(f"wf:{name}" for name in names)


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_the_first_answer_names_the_records_it_needs(c: Case) -> None:
    first = c.call(c.row, persistence.NO_RECORDS)
    assert first is not None
    assert first.needs == _ids(c.needs)
    if c.needs:
        # An answer that needs records holds nothing to write yet.
        assert first == WorkflowWrites(needs=first.needs)
    else:
        assert first.refusals == ()


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_given_the_records_the_answer_holds_every_write(c: Case) -> None:
    records = {f"wf:{name}": record(name, status) for name, status in c.records.items()}
    # A record read and not found is given as None.
    records.update({task_id: None for task_id in _ids(c.needs) if task_id not in records})  # type: ignore[misc]
    writes = c.call(c.row, records)
    assert writes is not None
    assert writes.needs == ()
    assert [(e.task_id, e.from_status, e.cancel_reason) for e in writes.refusals] == [
        (f"wf:{name}", status, reason) for name, status, reason in c.refused
    ]
    assert all(
        e.kind is EndKind.REFUSE
        and e.status is TaskStatus.CANCELLED
        and e.run_id.startswith("run-")
        for e in writes.refusals
    )
    [save] = writes.saves
    assert save.workflow_id == "wf"
    assert save.promote == _ids(c.promoted)
    assert save.columns["state"] == c.state
    assert [new.id for new in writes.undos] == [f"wf:{name}:undo" for name in c.undone]
    assert writes.stops == tuple((f"wf:{name}", reason) for name, reason in c.stopped)
    assert writes.resets == _ids(c.reset)
    assert writes.plain == (not (c.refused or c.undone or c.stopped or c.reset))


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_the_engine_changes_nothing_it_is_given(c: Case) -> None:
    records = {f"wf:{name}": record(name, status) for name, status in c.records.items()}
    before = copy.deepcopy((c.row, records))
    c.call(c.row, records)
    assert (c.row, records) == before


def test_the_answers_are_the_same_for_the_same_data() -> None:
    c = CASES[2]
    records = {f"wf:{name}": record(name, status) for name, status in c.records.items()}
    assert c.call(c.row, records) == c.call(c.row, records)


def test_a_cancel_of_an_ended_workflow_writes_nothing() -> None:
    row = row_of(["a"], {"a": "completed"}, state="completed", outcome="completed")
    assert persistence.cancel(row, None, NOW) is None


def test_a_deadline_cancel_before_the_deadline_writes_nothing() -> None:
    row = row_of(["a"], {"a": "running"})
    row["deadline_at"] = NOW + timedelta(seconds=1)
    assert persistence.cancel(row, None, NOW, reason=CancelReason.DEADLINE) is None
    row["deadline_at"] = NOW
    assert persistence.cancel(row, None, NOW, reason=CancelReason.DEADLINE) is not None


def test_a_workflow_deleted_by_retention_writes_nothing() -> None:
    assert persistence.react({}, [ended("a", TaskStatus.COMPLETED)], NOW) == WorkflowWrites()


# -- the store's side: asking again until the answer is whole --------------------------------


class FakeRecords:
    """Node records a claim may change between the store's read and its refusal's write."""

    def __init__(self, statuses: dict[str, str], claimed_before_write: set[str]) -> None:
        self.live = {f"wf:{n}": record(n, s) for n, s in statuses.items()}
        self.claimed_before_write = {f"wf:{n}" for n in claimed_before_write}
        self.reads: list[tuple[str, ...]] = []
        self.written: list[str] = []

    def read(self, task_ids: Sequence[str]) -> list[LiveNodeRow]:
        self.reads.append(tuple(task_ids))
        return [dict(self.live[i]) for i in task_ids if i in self.live]  # type: ignore[misc]

    def refuse(self, ends: Sequence[TaskEnd]) -> list[bool]:
        for task_id in self.claimed_before_write:
            self.live[task_id] = record(task_id.split(":")[1], R)
        self.claimed_before_write = set()
        won = []
        for end in ends:
            live = self.live[end.task_id]
            ok = live["status"] == end.from_status and live["run_id"] == end.run_id
            if ok:
                self.live[end.task_id] = {**live, "status": TaskStatus.CANCELLED}  # type: ignore[typeddict-item]
                self.written.append(end.task_id)
            won.append(ok)
        return won


def test_a_refusal_that_loses_to_a_claim_is_asked_again_with_the_fresh_records() -> None:
    row = row_of(["a", "b", "c"], {"a": "running", "b": "pending", "c": "pending"})
    fake = FakeRecords({"b": P, "c": P}, claimed_before_write={"b"})
    writes = answered(
        lambda records: persistence.cancel(row, False, NOW, records=records),
        fake.read,
        fake.refuse,
    )
    assert writes is not None
    # The first answer needed b and c; b's refusal lost, so both were read again.
    assert fake.reads == [("wf:b", "wf:c"), ("wf:b", "wf:c")]
    assert fake.written == ["wf:c"]
    # The answer returned: c already refused (left alone now), b claimed and asked to stop.
    assert writes.refusals == ()
    assert writes.stops == (("wf:a", USER), ("wf:b", USER))
    [save] = writes.saves
    assert [(n["name"], n["status"]) for n in save.columns["nodes"]] == [
        ("a", "running"),
        ("b", "running"),
        ("c", "cancelled"),
    ]


def test_the_usual_end_is_one_answer_with_no_read() -> None:
    row = row_of(["a", "b: a"], {"a": "running"})
    fake = FakeRecords({}, set())
    writes = answered(
        lambda records: persistence.react(
            {"wf": row}, [ended("a", TaskStatus.COMPLETED)], NOW, records
        ),
        fake.read,
        fake.refuse,
    )
    assert writes is not None
    assert writes.plain
    assert fake.reads == []


def test_asking_again_is_bounded() -> None:
    asked = []

    def never_whole(records: NodeRecords) -> WorkflowWrites:
        asked.append(len(records))
        return WorkflowWrites(needs=(f"wf:n{len(asked)}",))

    with pytest.raises(RuntimeError, match="changed under"):
        answered(never_whole, lambda ids: [], lambda ends: [])
    assert len(asked) == MOST_ANSWERS


# -- what the engine may import, and what its answers are made of ----------------------------


def test_the_engine_imports_no_store_and_no_database() -> None:
    for path in sorted(ENGINE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                assert not name.startswith("django_workers.stores"), f"{path.name}: {name}"
                assert not name.startswith("django.db"), f"{path.name}: {name}"


def _kinds(annotation: Any) -> list[Any]:
    """Every type an annotation names, its arguments' too."""
    found = [annotation, typing.get_origin(annotation)]
    value = getattr(annotation, "__value__", None)  # a ``type`` alias
    if value is not None:
        found += _kinds(value)
    for arg in typing.get_args(annotation):
        found += _kinds(arg)
    return found


@pytest.mark.parametrize("name", ["react", "cancel", "rerun", "pre_run", "events_of"])
def test_the_engine_functions_take_and_return_data(name: str) -> None:
    function = getattr(persistence, name)
    hints = typing.get_type_hints(function)
    assert set(hints) == {*inspect.signature(function).parameters, "return"}
    for annotation in hints.values():
        for kind in _kinds(annotation):
            assert kind is not Callable, name
            assert kind is not typing.Callable, name
            assert not (isinstance(kind, type) and getattr(kind, "_is_protocol", False)), name
    # No protocol of callbacks is declared beside them.
    assert not any(
        getattr(value, "_is_protocol", False)
        for value in vars(persistence).values()
        if isinstance(value, type) and value.__module__ == persistence.__name__
    )
