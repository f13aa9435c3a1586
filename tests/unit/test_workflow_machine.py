"""The workflow state machine, as tables of events and the effects each must give.

The tests reach the machine only through the ``submit`` and ``apply_event``
fixtures, so a store can run the same bodies through itself by overriding them.
"""

from __future__ import annotations

import ast
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest

from django_workers.engine import machine, transitions, vocabulary
from django_workers.engine.machine import (
    UNDO_ENDS,
    CancelWaiting,
    CancelWorkflow,
    Effect,
    Event,
    Finished,
    InvalidEvent,
    Node,
    NodeEnded,
    NodeStarted,
    NodeStatus,
    Outcome,
    Promote,
    RefuseQueued,
    StartUndo,
    StopRunning,
    Transition,
    UndoEnded,
    UndoStarted,
    UndoStatus,
    UnknownNode,
    WorkflowState,
    WorkflowStatus,
)

type Submit = Callable[..., Transition]
type Apply = Callable[[WorkflowState, Event], Transition]

COMPLETED = WorkflowStatus.COMPLETED
FAILED = WorkflowStatus.FAILED
CANCELLED = WorkflowStatus.CANCELLED
COMPENSATED = WorkflowStatus.COMPENSATED
COMPENSATION_FAILED = WorkflowStatus.COMPENSATION_FAILED


@pytest.fixture
def submit() -> Submit:
    """Start a workflow from its nodes; a store's tests submit it to the store instead."""
    return machine.start


@pytest.fixture
def apply_event() -> Apply:
    """Apply one event; a store's tests apply it through the store instead."""
    return machine.apply


# -- a small language for plans and events ------------------------------------------------------


def nodes_of(*lines: str) -> list[Node]:
    """Read ``"name: dep dep always undo"`` lines into nodes."""
    nodes = []
    for line in lines:
        name, _, rest = line.partition(":")
        words = rest.split()
        deps = tuple(word for word in words if word not in ("always", "undo"))
        always, has_undo = "always" in words, "undo" in words
        nodes.append(Node(name=name.strip(), deps=deps, always=always, has_undo=has_undo))
    return nodes


def ok(name: str) -> NodeEnded:
    return NodeEnded(name, Outcome.COMPLETED)


def fail(name: str) -> NodeEnded:
    return NodeEnded(name, Outcome.FAILED)


def cancelled(name: str) -> NodeEnded:
    return NodeEnded(name, Outcome.CANCELLED)


def run(name: str) -> NodeStarted:
    return NodeStarted(name)


def undo_ok(name: str) -> UndoEnded:
    return UndoEnded(name, Outcome.COMPLETED)


def undo_fail(name: str) -> UndoEnded:
    return UndoEnded(name, Outcome.FAILED)


def undo_cancelled(name: str) -> UndoEnded:
    return UndoEnded(name, Outcome.CANCELLED)


def cancel(undo: bool | None = None) -> CancelWorkflow:
    return CancelWorkflow(undo)


def step(event: Event, *effects: Effect) -> tuple[Event, tuple[Effect, ...]]:
    return event, effects


@dataclass(frozen=True)
class Case:
    id: str
    plan: tuple[str, ...]
    steps: tuple[tuple[Event, tuple[Effect, ...]], ...]
    status: WorkflowStatus
    nodes: dict[str, str] = field(default_factory=dict)
    undos: dict[str, str] = field(default_factory=dict)
    fail_fast: bool = False
    undo_on_cancel: bool = True


def case(
    id: str,
    plan: list[str],
    steps: list[tuple[Event, tuple[Effect, ...]]],
    status: WorkflowStatus,
    **kwargs: object,
) -> Case:
    return Case(id, tuple(plan), tuple(steps), status, **kwargs)  # type: ignore[arg-type]


DIAMOND = ["a", "b: a", "c: a", "d: b c"]
SAGA = ["a: undo", "b: a undo", "c: b"]

CASES = [
    # -- completion and promotion
    case("lone node", ["a"], [step(ok("a"), Finished(COMPLETED))], COMPLETED),
    case(
        "chain promotes one node at a time",
        ["a", "b: a", "c: b"],
        [
            step(ok("a"), Promote("b")),
            step(ok("b"), Promote("c")),
            step(ok("c"), Finished(COMPLETED)),
        ],
        COMPLETED,
    ),
    case(
        "fan-out promotes every dependent at once, in the order added",
        ["a", "c: a", "b: a", "d: a"],
        [
            step(ok("a"), Promote("c"), Promote("b"), Promote("d")),
            step(ok("c")),
            step(ok("b")),
            step(ok("d"), Finished(COMPLETED)),
        ],
        COMPLETED,
    ),
    case(
        "fan-in waits for its last dependency",
        ["a", "b", "c", "d: a b c"],
        [
            step(ok("b")),
            step(ok("c")),
            step(ok("a"), Promote("d")),
            step(ok("d"), Finished(COMPLETED)),
        ],
        COMPLETED,
    ),
    case(
        "diamond promotes its join once",
        DIAMOND,
        [
            step(ok("a"), Promote("b"), Promote("c")),
            step(ok("c")),
            step(ok("b"), Promote("d")),
            step(ok("d"), Finished(COMPLETED)),
        ],
        COMPLETED,
    ),
    case(
        "a started node completes like a queued one",
        ["a", "b: a"],
        [
            step(run("a")),
            step(ok("a"), Promote("b")),
            step(run("b")),
            step(ok("b"), Finished(COMPLETED)),
        ],
        COMPLETED,
    ),
    # -- failure and cancel propagation
    case(
        "a failure cancels the chain below it",
        ["a", "b: a", "c: b"],
        [step(fail("a"), CancelWaiting("b"), CancelWaiting("c"), Finished(FAILED))],
        FAILED,
        nodes={"a": "failed", "b": "cancelled", "c": "cancelled"},
    ),
    case(
        "a failed diamond branch cancels the join; the other branch runs on",
        DIAMOND,
        [
            step(ok("a"), Promote("b"), Promote("c")),
            step(fail("b"), CancelWaiting("d")),
            step(ok("c"), Finished(FAILED)),
        ],
        FAILED,
        nodes={"c": "completed", "d": "cancelled"},
    ),
    case(
        "an always join runs after a failed branch and the workflow completes",
        ["a", "b: a", "c: a", "d: b c always"],
        [
            step(ok("a"), Promote("b"), Promote("c")),
            step(fail("b")),
            step(ok("c"), Promote("d")),
            step(ok("d"), Finished(COMPLETED)),
        ],
        COMPLETED,
        nodes={"b": "failed"},
    ),
    case(
        "an always join counts a cancelled branch as ended",
        ["a", "b: a", "c: a", "d: b c always"],
        [
            step(ok("a"), Promote("b"), Promote("c")),
            step(ok("c")),
            step(cancelled("b"), Promote("d")),
            step(ok("d"), Finished(COMPLETED)),
        ],
        COMPLETED,
    ),
    case(
        "an always node promotes its own plain dependents",
        ["a", "b: a always", "c: b"],
        [
            step(fail("a"), Promote("b")),
            step(ok("b"), Promote("c")),
            step(ok("c"), Finished(COMPLETED)),
        ],
        COMPLETED,
    ),
    case(
        "a failure with a plain dependent is not absorbed by its always one",
        ["a", "b: a always", "c: a"],
        [step(fail("a"), Promote("b"), CancelWaiting("c")), step(ok("b"), Finished(FAILED))],
        FAILED,
    ),
    case(
        "a failed leaf fails the workflow",
        ["a", "b"],
        [step(fail("a")), step(ok("b"), Finished(FAILED))],
        FAILED,
    ),
    case(
        "an always node runs after a cascade-cancelled dependency; the workflow still fails",
        ["a", "b: a", "c: b always"],
        [step(fail("a"), CancelWaiting("b"), Promote("c")), step(ok("c"), Finished(FAILED))],
        FAILED,
        nodes={"b": "cancelled", "c": "completed"},
    ),
    case(
        "cancelling a waiting node's task cancels its dependents",
        ["a", "b: a", "c: b"],
        [step(cancelled("b"), CancelWaiting("c")), step(ok("a"), Finished(FAILED))],
        FAILED,
        nodes={"a": "completed", "b": "cancelled", "c": "cancelled"},
    ),
    case(
        "a cancelled queued root of an always join",
        ["a", "b", "c: a b always"],
        [step(cancelled("a")), step(ok("b"), Promote("c")), step(ok("c"), Finished(COMPLETED))],
        COMPLETED,
    ),
    case(
        "without fail_fast the other branches run on after a failure",
        ["a", "b", "c: b"],
        [step(fail("a")), step(ok("b"), Promote("c")), step(ok("c"), Finished(FAILED))],
        FAILED,
    ),
    # -- fail_fast
    case(
        "fail_fast cancels waiting nodes and lets running ones finish",
        ["a", "b", "c: a", "d: b"],
        [
            step(run("b")),
            step(fail("a"), CancelWaiting("c"), CancelWaiting("d")),
            step(ok("b"), Finished(FAILED)),
        ],
        FAILED,
        nodes={"b": "completed", "d": "cancelled"},
        fail_fast=True,
    ),
    case(
        "fail_fast refuses queued nodes before they run",
        ["a", "b", "c"],
        [step(fail("a"), RefuseQueued("b"), RefuseQueued("c"), Finished(FAILED))],
        FAILED,
        nodes={"b": "cancelled", "c": "cancelled"},
        fail_fast=True,
    ),
    case(
        "fail_fast spares the failed node's always dependents",
        ["a", "b", "x: b", "y: a", "e: a b always"],
        [
            step(run("b")),
            step(fail("a"), CancelWaiting("x"), CancelWaiting("y")),
            step(ok("b"), Promote("e")),
            step(ok("e"), Finished(FAILED)),
        ],
        FAILED,
        fail_fast=True,
    ),
    case(
        "fail_fast promotes a spared node at once and cancels what follows it",
        ["a", "e: a always", "g: a", "f: e"],
        [
            step(fail("a"), Promote("e"), CancelWaiting("g"), CancelWaiting("f")),
            step(ok("e"), Finished(FAILED)),
        ],
        FAILED,
        fail_fast=True,
    ),
    case(
        "fail_fast ignores an absorbed failure",
        ["a", "b", "e: a always"],
        [step(fail("a"), Promote("e")), step(ok("b")), step(ok("e"), Finished(COMPLETED))],
        COMPLETED,
        fail_fast=True,
    ),
    case(
        "fail_fast trips on the first failure only",
        ["a", "r", "s", "y: a", "e: a r always"],
        [
            step(run("r")),
            step(run("s")),
            step(fail("a"), CancelWaiting("y")),
            step(fail("s")),
            step(ok("r"), Promote("e")),
            step(ok("e"), Finished(FAILED)),
        ],
        FAILED,
        fail_fast=True,
    ),
    case(
        "fail_fast trips on the first unabsorbed failure, not on an absorbed one",
        ["a", "r", "s", "e: a r always"],
        [
            step(run("r")),
            step(run("s")),
            step(fail("a")),
            step(fail("s"), CancelWaiting("e")),
            step(ok("r"), Finished(FAILED)),
        ],
        FAILED,
        fail_fast=True,
    ),
    case(
        "fail_fast lets a queued always node run, even one the failed node does not feed",
        ["a", "b", "e: b always"],
        [step(ok("b"), Promote("e")), step(fail("a")), step(ok("e"), Finished(FAILED))],
        FAILED,
        fail_fast=True,
    ),
    case(
        "fail_fast treats a cancelled node like a failed one",
        ["a", "b"],
        [step(cancelled("a"), RefuseQueued("b"), Finished(FAILED))],
        FAILED,
        fail_fast=True,
    ),
    # -- compensation
    case(
        "a saga chain is undone in reverse order",
        SAGA,
        [
            step(ok("a"), Promote("b")),
            step(ok("b"), Promote("c")),
            step(fail("c"), StartUndo("b")),
            step(UndoStarted("b")),
            step(undo_ok("b"), StartUndo("a")),
            step(undo_ok("a"), Finished(COMPENSATED)),
        ],
        COMPENSATED,
        undos={"a": "completed", "b": "completed", "c": "idle"},
    ),
    case(
        "compensation passes through a node without an undo",
        ["a: undo", "b: a", "c: b undo", "d: c"],
        [
            step(ok("a"), Promote("b")),
            step(ok("b"), Promote("c")),
            step(ok("c"), Promote("d")),
            step(fail("d"), StartUndo("c")),
            step(undo_ok("c"), StartUndo("a")),
            step(undo_ok("a"), Finished(COMPENSATED)),
        ],
        COMPENSATED,
    ),
    case(
        "a diamond saga undoes both branches before the root",
        ["a: undo", "b: a undo", "c: a undo", "d: b c"],
        [
            step(ok("a"), Promote("b"), Promote("c")),
            step(ok("b")),
            step(ok("c"), Promote("d")),
            step(fail("d"), StartUndo("b"), StartUndo("c")),
            step(undo_ok("c")),
            step(undo_ok("b"), StartUndo("a")),
            step(undo_ok("a"), Finished(COMPENSATED)),
        ],
        COMPENSATED,
    ),
    case(
        "a diamond branch without an undo does not hold the root back",
        ["a: undo", "b: a", "c: a undo", "d: b c"],
        [
            step(ok("a"), Promote("b"), Promote("c")),
            step(ok("b")),
            step(ok("c"), Promote("d")),
            step(fail("d"), StartUndo("c")),
            step(undo_ok("c"), StartUndo("a")),
            step(undo_ok("a"), Finished(COMPENSATED)),
        ],
        COMPENSATED,
    ),
    case(
        "a root waits for an undo below a join without one",
        ["a: undo", "b: a", "c: a", "d: b c undo", "e: d"],
        [
            step(ok("a"), Promote("b"), Promote("c")),
            step(ok("b")),
            step(ok("c"), Promote("d")),
            step(ok("d"), Promote("e")),
            step(fail("e"), StartUndo("d")),
            step(undo_ok("d"), StartUndo("a")),
            step(undo_ok("a"), Finished(COMPENSATED)),
        ],
        COMPENSATED,
    ),
    case(
        "a failed undo fails the compensation, and the undos above still run",
        SAGA,
        [
            step(ok("a"), Promote("b")),
            step(ok("b"), Promote("c")),
            step(fail("c"), StartUndo("b")),
            step(undo_fail("b"), StartUndo("a")),
            step(undo_ok("a"), Finished(COMPENSATION_FAILED)),
        ],
        COMPENSATION_FAILED,
        undos={"a": "completed", "b": "failed"},
    ),
    case(
        "a cancelled undo counts as failed",
        SAGA,
        [
            step(ok("a"), Promote("b")),
            step(ok("b"), Promote("c")),
            step(fail("c"), StartUndo("b")),
            step(undo_cancelled("b"), StartUndo("a")),
            step(undo_ok("a"), Finished(COMPENSATION_FAILED)),
        ],
        COMPENSATION_FAILED,
        undos={"b": "cancelled"},
    ),
    case(
        "only completed nodes are undone",
        ["a: undo", "b: undo", "c: a b"],
        [
            step(ok("a")),
            step(fail("b"), CancelWaiting("c"), StartUndo("a")),
            step(undo_ok("a"), Finished(COMPENSATED)),
        ],
        COMPENSATED,
        undos={"a": "completed", "b": "idle"},
    ),
    case(
        "a failure with nothing to undo ends failed",
        ["a: undo"],
        [step(fail("a"), Finished(FAILED))],
        FAILED,
        undos={"a": "idle"},
    ),
    case(
        "a completed workflow is never undone",
        ["a: undo", "b: a undo"],
        [step(ok("a"), Promote("b")), step(ok("b"), Finished(COMPLETED))],
        COMPLETED,
        undos={"a": "idle", "b": "idle"},
    ),
    case(
        "an absorbed failure completes without undoing",
        ["a: undo", "b: a undo", "c: b always"],
        [
            step(ok("a"), Promote("b")),
            step(fail("b"), Promote("c")),
            step(ok("c"), Finished(COMPLETED)),
        ],
        COMPLETED,
    ),
    # -- cancel
    case(
        "cancel stops running, queued and waiting nodes in the order added",
        ["a", "b", "c: a", "d: b"],
        [
            step(run("a")),
            step(
                cancel(),
                StopRunning("a"),
                RefuseQueued("b"),
                CancelWaiting("c"),
                CancelWaiting("d"),
            ),
            step(cancelled("a"), Finished(CANCELLED)),
        ],
        CANCELLED,
    ),
    case(
        "cancel undoes the completed nodes by default",
        SAGA,
        [
            step(ok("a"), Promote("b")),
            step(run("b")),
            step(cancel(), StopRunning("b"), CancelWaiting("c")),
            step(cancelled("b"), StartUndo("a")),
            step(undo_ok("a"), Finished(COMPENSATED)),
        ],
        COMPENSATED,
        undos={"a": "completed", "b": "idle"},
    ),
    case(
        "cancel(undo=False) undoes nothing",
        SAGA,
        [
            step(ok("a"), Promote("b")),
            step(run("b")),
            step(cancel(undo=False), StopRunning("b"), CancelWaiting("c")),
            step(cancelled("b"), Finished(CANCELLED)),
        ],
        CANCELLED,
        undos={"a": "idle"},
    ),
    case(
        "cancel of a workflow submitted with undo_on_cancel=False undoes nothing",
        SAGA,
        [
            step(ok("a"), Promote("b")),
            step(run("b")),
            step(cancel(), StopRunning("b"), CancelWaiting("c")),
            step(cancelled("b"), Finished(CANCELLED)),
        ],
        CANCELLED,
        undo_on_cancel=False,
    ),
    case(
        "cancel(undo=True) is the frozen default when it widens nothing",
        ["a: undo", "b: a"],
        [
            step(ok("a"), Promote("b")),
            step(cancel(undo=True), RefuseQueued("b"), StartUndo("a")),
            step(undo_ok("a"), Finished(COMPENSATED)),
        ],
        COMPENSATED,
    ),
    case(
        "a node that completes after the cancel is undone too",
        SAGA,
        [
            step(ok("a"), Promote("b")),
            step(run("b")),
            step(cancel(), StopRunning("b"), CancelWaiting("c")),
            step(ok("b"), StartUndo("b")),
            step(undo_ok("b"), StartUndo("a")),
            step(undo_ok("a"), Finished(COMPENSATED)),
        ],
        COMPENSATED,
    ),
    case(
        "a failure before the cancel keeps its compensation",
        ["a: undo", "b", "c: a"],
        [
            step(ok("a"), Promote("c")),
            step(run("c")),
            step(fail("b")),
            step(cancel(undo=False), StopRunning("c")),
            step(cancelled("c"), StartUndo("a")),
            step(undo_ok("a"), Finished(COMPENSATED)),
        ],
        COMPENSATED,
    ),
    case(
        "a failure after the cancel is the cancel's",
        ["a: undo", "b: a", "c: a"],
        [
            step(ok("a"), Promote("b"), Promote("c")),
            step(run("b")),
            step(run("c")),
            step(cancel(undo=False), StopRunning("b"), StopRunning("c")),
            step(fail("b")),
            step(cancelled("c"), Finished(CANCELLED)),
        ],
        CANCELLED,
    ),
    case(
        "cancel of a workflow whose nodes are all queued ends it at once",
        ["a", "b"],
        [step(cancel(), RefuseQueued("a"), RefuseQueued("b"), Finished(CANCELLED))],
        CANCELLED,
    ),
    case(
        "cancel spares no always node",
        ["a", "e: a always"],
        [
            step(run("a")),
            step(cancel(), StopRunning("a"), CancelWaiting("e")),
            step(ok("a"), Finished(CANCELLED)),
        ],
        CANCELLED,
        nodes={"e": "cancelled"},
    ),
    case(
        "a second cancel may narrow the first",
        ["a: undo", "b: a"],
        [
            step(ok("a"), Promote("b")),
            step(run("b")),
            step(cancel(), StopRunning("b")),
            step(cancel(undo=False)),
            step(cancelled("b"), Finished(CANCELLED)),
        ],
        CANCELLED,
    ),
    case(
        "a cancel after the end changes nothing",
        ["a: undo"],
        [step(ok("a"), Finished(COMPLETED)), step(cancel())],
        COMPLETED,
    ),
    case(
        "a cancel during compensation changes nothing",
        ["a: undo", "b: a"],
        [
            step(ok("a"), Promote("b")),
            step(fail("b"), StartUndo("a")),
            step(cancel(undo=False)),
            step(undo_ok("a"), Finished(COMPENSATED)),
        ],
        COMPENSATED,
    ),
    # -- repeated events
    case(
        "a repeated end changes nothing, whatever its outcome",
        ["a", "b: a"],
        [
            step(ok("a"), Promote("b")),
            step(ok("a")),
            step(fail("a")),
            step(ok("b"), Finished(COMPLETED)),
        ],
        COMPLETED,
        nodes={"a": "completed"},
    ),
    case(
        "a refused node that starts or ends later changes nothing",
        ["a", "b"],
        [
            step(fail("a"), RefuseQueued("b"), Finished(FAILED)),
            step(run("b")),
            step(cancelled("b")),
        ],
        FAILED,
        fail_fast=True,
    ),
    case(
        "a repeated undo end changes nothing",
        ["a: undo", "b: a"],
        [
            step(ok("a"), Promote("b")),
            step(fail("b"), StartUndo("a")),
            step(UndoStarted("a")),
            step(undo_ok("a"), Finished(COMPENSATED)),
            step(undo_fail("a")),
            step(UndoStarted("a")),
        ],
        COMPENSATED,
        undos={"a": "completed"},
    ),
]


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_transition_table(c: Case, submit: Submit, apply_event: Apply) -> None:
    state = submit(nodes_of(*c.plan), fail_fast=c.fail_fast, undo_on_cancel=c.undo_on_cancel).state
    for number, (event, effects) in enumerate(c.steps, 1):
        transition = apply_event(state, event)
        assert transition.effects == effects, f"step {number}: {event}"
        state = transition.state
    assert state.status is c.status
    for name, status in c.nodes.items():
        assert state.node(name).status == status, name
    for name, undo in c.undos.items():
        assert state.node(name).undo == undo, name


def test_there_are_enough_cases() -> None:
    assert len(CASES) >= 40


@pytest.mark.parametrize("module", [machine, transitions, vocabulary])
def test_the_machine_imports_only_the_standard_library(module: ModuleType) -> None:
    assert module.__file__ is not None
    tree = ast.parse(Path(module.__file__).read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    # Its own parts aside: the machine, its transitions and its vocabulary.
    imported -= {"django_workers.engine", "django_workers.engine.vocabulary"}
    assert {name.partition(".")[0] for name in imported} <= sys.stdlib_module_names | {"__future__"}


# -- start ------------------------------------------------------------------------------------


def test_start_promotes_the_roots_in_the_order_added(submit: Submit) -> None:
    transition = submit(nodes_of("b", "a", "c: a", "d"))
    assert transition.effects == (Promote("b"), Promote("a"), Promote("d"))
    assert [node.status for node in transition.state.nodes] == [
        "pending",
        "pending",
        "waiting",
        "pending",
    ]
    assert transition.state.status is WorkflowStatus.RUNNING


def test_start_keeps_the_flags_frozen(submit: Submit) -> None:
    state = submit(nodes_of("a"), fail_fast=True, undo_on_cancel=False).state
    assert (state.fail_fast, state.undo_on_cancel) == (True, False)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ((), "at least one node"),
        (("a", "a"), "Two nodes are named 'a'"),
        (("a: b", "b"), "not added before it"),
        (("a: a",), "not added before it"),
        (("a", "b: a a"), "names a dependency twice"),
    ],
)
def test_start_refuses_a_broken_plan(lines: tuple[str, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        machine.start(nodes_of(*lines))


def test_start_refuses_a_node_that_has_begun() -> None:
    with pytest.raises(ValueError, match="already begun"):
        machine.start([Node(name="a", status=NodeStatus.PENDING)])


# -- refusals and idempotence -------------------------------------------------------------------


@pytest.mark.parametrize(
    "event", [run("x"), ok("x"), UndoStarted("x"), undo_ok("x")], ids=lambda e: type(e).__name__
)
def test_an_unknown_node_is_refused(submit: Submit, apply_event: Apply, event: Event) -> None:
    state = submit(nodes_of("a")).state
    with pytest.raises(UnknownNode, match="no node named 'x'") as caught:
        apply_event(state, event)
    assert isinstance(caught.value, LookupError)
    assert caught.value.name == "x"


@pytest.mark.parametrize("event", [ok("b"), fail("b"), run("b")], ids=str)
def test_a_waiting_node_cannot_run_or_end_by_running(
    submit: Submit, apply_event: Apply, event: Event
) -> None:
    state = submit(nodes_of("a", "b: a")).state
    with pytest.raises(InvalidEvent, match="'b' is waiting"):
        apply_event(state, event)


def test_an_undo_event_needs_a_queued_undo(submit: Submit, apply_event: Apply) -> None:
    state = submit(nodes_of("a: undo", "b")).state
    with pytest.raises(InvalidEvent, match="'b' has no undo"):
        apply_event(state, undo_ok("b"))
    with pytest.raises(InvalidEvent, match="undo of node 'a' is not queued"):
        apply_event(state, UndoStarted("a"))
    with pytest.raises(InvalidEvent, match="undo of node 'a' is not queued"):
        apply_event(state, undo_ok("a"))


def test_cancel_may_not_widen_the_frozen_undo(submit: Submit, apply_event: Apply) -> None:
    state = submit(nodes_of("a: undo"), undo_on_cancel=False).state
    with pytest.raises(ValueError, match="undo_on_cancel=False; a cancel may only narrow"):
        apply_event(state, cancel(undo=True))


def test_a_repeated_end_returns_the_same_state(submit: Submit, apply_event: Apply) -> None:
    state = apply_event(submit(nodes_of("a", "b: a")).state, ok("a")).state
    again = apply_event(state, ok("a"))
    assert again.state is state
    assert again.effects == ()


def test_the_pre_run_check_lets_only_queued_work_start(submit: Submit, apply_event: Apply) -> None:
    state = submit(nodes_of("a: undo", "b", "c: a"), fail_fast=True).state
    assert machine.may_start(state, "a")
    assert not machine.may_start(state, "c")
    running = apply_event(state, run("a")).state
    assert machine.may_start(running, "a")  # a requeued run of a started node starts again
    state = apply_event(state, ok("a")).state
    state = apply_event(state, fail("b")).state
    assert not machine.may_start(state, "c")  # refused by fail_fast
    assert machine.may_start(state, "a", undo=True)
    assert not machine.may_start(state, "a")
    with pytest.raises(UnknownNode):
        machine.may_start(state, "x")


# -- random workflows ---------------------------------------------------------------------------

SEEDS = range(400)


def random_nodes(rng: random.Random) -> list[Node]:
    nodes: list[Node] = []
    for i in range(rng.randint(1, 9)):
        earlier = [node.name for node in nodes]
        deps = rng.sample(earlier, k=rng.randint(0, min(3, len(earlier))))
        always, has_undo = rng.random() < 0.3, rng.random() < 0.5
        nodes.append(Node(name=f"n{i}", deps=tuple(deps), always=always, has_undo=has_undo))
    return nodes


def outcome(rng: random.Random, completed: float) -> Outcome:
    roll = rng.random()
    if roll < completed:
        return Outcome.COMPLETED
    return Outcome.FAILED if roll < (1 + completed) / 2 else Outcome.CANCELLED


def next_event(state: WorkflowState, rng: random.Random) -> Event:
    """Pick what could happen next to a real workflow, repeats and cancels included."""
    events: list[Event] = []
    for node in state.nodes:
        if node.status is NodeStatus.PENDING:
            events += [NodeStarted(node.name), NodeEnded(node.name, outcome(rng, 0.75))]
        elif node.status is NodeStatus.RUNNING:
            events += [NodeEnded(node.name, outcome(rng, 0.75))] * 2
        elif node.status is NodeStatus.WAITING and rng.random() < 0.05:
            events.append(cancelled(node.name))
        elif node.ended and rng.random() < 0.1:
            events.append(NodeEnded(node.name, outcome(rng, 0.5)))
        if node.undo is UndoStatus.PENDING:
            events += [UndoStarted(node.name), UndoEnded(node.name, outcome(rng, 0.8))]
        elif node.undo is UndoStatus.RUNNING:
            events.append(UndoEnded(node.name, outcome(rng, 0.8)))
    if rng.random() < 0.04 or not events:
        events.append(cancel(rng.choice([None, False, state.undo_on_cancel])))
    return rng.choice(events)


def descendants(state: WorkflowState, name: str) -> set[str]:
    found: set[str] = set()
    todo = [name]
    while todo:
        parent = todo.pop()
        for node in state.nodes:
            if parent in node.deps and node.name not in found:
                found.add(node.name)
                todo.append(node.name)
    return found


def absorbed(state: WorkflowState, name: str) -> bool:
    dependents = [node for node in state.nodes if name in node.deps]
    return bool(dependents) and all(node.always for node in dependents)


# Each node status a transition may move to, from each status.
MOVES = {
    NodeStatus.WAITING: {NodeStatus.PENDING, NodeStatus.CANCELLED},
    NodeStatus.PENDING: {NodeStatus.RUNNING, *machine.NODE_ENDS},
    NodeStatus.RUNNING: set(machine.NODE_ENDS),
}
CHANGES = {
    Promote: NodeStatus.PENDING,
    CancelWaiting: NodeStatus.CANCELLED,
    RefuseQueued: NodeStatus.CANCELLED,
}


def check_transition(before: WorkflowState, event: Event, after: Transition) -> None:
    """Check one transition against the rules that hold for every workflow."""
    state = after.state
    named = {effect.node for effect in after.effects if not isinstance(effect, Finished)}
    assert named <= {node.name for node in state.nodes}
    if before.ended:
        assert state.status is before.status
        assert not after.effects
    for old, new in zip(before.nodes, state.nodes, strict=True):
        if old.status is not new.status:
            assert new.status in MOVES[old.status], (old, new)
            if getattr(event, "node", None) != old.name or isinstance(
                event, (UndoStarted, UndoEnded)
            ):
                # A change the event did not name is one the store must be told to make.
                assert any(
                    getattr(e, "node", None) == old.name and CHANGES.get(type(e)) is new.status
                    for e in after.effects
                ), (event, old, new, after.effects)
    for effect in after.effects:
        if isinstance(effect, Promote):
            node = state.node(effect.node)
            deps = [state.node(dep) for dep in node.deps]
            assert all(dep.ended for dep in deps)
            assert node.always or all(dep.status is NodeStatus.COMPLETED for dep in deps)
        elif isinstance(effect, StopRunning):
            assert state.node(effect.node).status is NodeStatus.RUNNING
        elif isinstance(effect, StartUndo):
            node = state.node(effect.node)
            assert node.has_undo
            assert node.status is NodeStatus.COMPLETED
            for name in descendants(state, node.name):
                assert state.node(name).undo in (UndoStatus.IDLE, *UNDO_ENDS), name
        elif isinstance(effect, Finished):
            assert effect.status is state.status
            assert state.ended
    assert (state.status is WorkflowStatus.RUNNING) == (not all(n.ended for n in state.nodes))


def check_end(state: WorkflowState) -> None:
    """Check a finished workflow against the rules of its end."""
    assert state.ended
    assert all(node.ended for node in state.nodes)
    if state.status is WorkflowStatus.COMPLETED:
        assert state.cancel_undo is None
        for node in state.nodes:
            assert node.status is NodeStatus.COMPLETED or absorbed(state, node.name), node
    undone = state.outcome is Outcome.FAILED or (
        state.outcome is Outcome.CANCELLED and bool(state.cancel_undo)
    )
    for node in state.nodes:
        due = undone and node.has_undo and node.status is NodeStatus.COMPLETED
        assert (node.undo in UNDO_ENDS) if due else (node.undo is UndoStatus.IDLE), node
    if state.status is WorkflowStatus.COMPENSATED:
        assert all(node.undo in (UndoStatus.IDLE, UndoStatus.COMPLETED) for node in state.nodes)


def play(seed: int, submit: Submit, apply_event: Apply) -> list[Transition]:
    """Drive one random workflow to its end, checking every transition; return them."""
    rng = random.Random(seed)
    first = submit(
        random_nodes(rng), fail_fast=rng.random() < 0.5, undo_on_cancel=rng.random() < 0.5
    )
    transitions = [first]
    state = first.state
    for _ in range(500):
        if state.ended:
            break
        event = next_event(state, rng)
        transition = apply_event(state, event)
        check_transition(state, event, transition)
        if isinstance(event, NodeEnded) and state.node(event.node).ended:
            assert transition.state is state
            assert not transition.effects
        transitions.append(transition)
        state = transition.state
    check_end(state)
    return transitions


@pytest.mark.parametrize("seed", SEEDS)
def test_random_workflows_keep_every_rule(seed: int, submit: Submit, apply_event: Apply) -> None:
    transitions = play(seed, submit, apply_event)
    effects = [effect for t in transitions for effect in t.effects]
    assert sum(isinstance(effect, Finished) for effect in effects) == 1
    for kind in (Promote, StartUndo):
        started = [effect.node for effect in effects if isinstance(effect, kind)]
        assert len(started) == len(set(started)), kind
    ended = [e.node for e in effects if isinstance(e, (CancelWaiting, RefuseQueued))]
    assert len(ended) == len(set(ended))


@pytest.mark.parametrize("seed", range(5))
def test_the_same_events_give_the_same_transitions(
    seed: int, submit: Submit, apply_event: Apply
) -> None:
    first = play(seed, submit, apply_event)
    for _ in range(100):
        assert play(seed, submit, apply_event) == first
