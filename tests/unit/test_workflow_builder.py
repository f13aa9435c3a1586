"""The workflow builder: misuse recorded and reported together, the plan, its hash."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import date, timedelta
from typing import Any

import pytest
from django.core.exceptions import ObjectDoesNotExist, PermissionDenied
from django.test import override_settings

from django_workers import Owner, System, TaskOptions, owner_of, scoped_task_key
from django_workers.engine.machine import Promote, start
from django_workers.exceptions import AuthorizationError, WorkersError
from django_workers.stores import WorkerStore, default_store, set_queue_authorizer
from django_workers.stores.memory import InMemoryWorkerStore
from django_workers.workflows import (
    InvalidWorkflow,
    Workflow,
    WorkflowExists,
    WorkflowNotFound,
    WorkflowPlan,
)
from django_workers.workflows.plan import NodePlan, UndoPlan
from tests import tasks


@pytest.fixture
def store() -> InMemoryWorkerStore:
    return InMemoryWorkerStore()


ANN = Owner("42")


def diamond(authority: Owner | System = ANN, **flags: Any) -> Workflow:
    wf = Workflow("upload-1", authority, **flags)
    a = wf.add("upload", tasks.add, args=[1, 2], queue="files")
    b = wf.add("thumb", tasks.add, args=[3, 4]).after(a).undo(tasks.noop, queue="files")
    c = wf.add("index", tasks.noop).after(a)
    wf.add("email", tasks.noop, kwargs={"to": "ann", "cc": None}).after(c, b).always()
    return wf


def problems_of(wf: Workflow, store: WorkerStore) -> tuple[str, ...]:
    with pytest.raises(InvalidWorkflow) as caught:
        wf.plan(store)
    for problem in caught.value.problems:
        assert problem in str(caught.value)
    return caught.value.problems


def refuse(*queues: str) -> Callable[[str, str], bool]:
    return lambda queue, user_id: queue not in queues


# -- misuse -----------------------------------------------------------------------------------


def test_every_misuse_is_recorded_then_reported_together(store: InMemoryWorkerStore) -> None:
    other = Workflow("other", Owner("42"))
    stranger = other.add("stranger", tasks.noop)
    wf = Workflow("upload-1", Owner("42"))
    a = wf.add("a", tasks.noop)
    wf.add("a", tasks.noop)
    wf.add("bad name!", tasks.noop)
    b = wf.add("b", tasks.noop).after("a").after(stranger)  # type: ignore[arg-type]
    c = wf.add("c", tasks.noop)
    b.after(c).after(b)
    a.undo(tasks.noop).undo(tasks.noop)

    problems = problems_of(wf, store)

    assert len(problems) == 7
    for fragment in (
        "Two nodes are named 'a'",
        "Node name 'bad name!'",
        "runs .after() a str, not a node",
        "node 'stranger' of another workflow ('other')",
        "node 'c', which was added after it",
        "Node 'b' runs .after() itself",
        "second .undo()",
    ):
        assert sum(fragment in p for p in problems) == 1, fragment


def test_bad_input_of_every_node_is_reported_with_the_misuse(store: InMemoryWorkerStore) -> None:
    def closure() -> None: ...

    wf = Workflow("index", Owner("42"), fail_fast="yes")  # type: ignore[arg-type]
    wf.add("lambda", lambda: None)
    wf.add("closure", closure)
    wf.add("missing", "tests.tasks.no_such_task")
    wf.add("objects", tasks.noop, args=[object()])
    wf.add("keys", tasks.noop, kwargs={1: "x"})  # type: ignore[dict-item]
    wf.add("string-args", tasks.noop, args="abc")
    wf.add("queue", tasks.noop, queue="has space")
    wf.add("unhashable-queue", tasks.noop, queue=["q"])  # type: ignore[arg-type]
    wf.add("options", tasks.noop, options={"timeout": 1})  # type: ignore[arg-type]
    wf.add("priority", tasks.noop).priority(1000)
    wf.add("undo", tasks.noop).undo(tasks.noop, args=[{1, 2}], queue="")

    problems = problems_of(wf, store)

    assert problems[0] == "Workflow id 'index' is reserved; choose another id."
    assert problems[1].startswith("fail_fast must be True or False")
    expected = [
        ("'lambda'", "lambda"),
        ("'closure'", "closure"),
        ("'missing'", "Cannot import task"),
        ("'objects'", "JSON-serializable"),
        ("'keys'", "string keys"),
        ("'string-args'", "args must be a list or tuple"),
        ("'queue'", "spaces"),
        ("'unhashable-queue'", "queue must be a name"),
        ("'options'", "options must be a TaskOptions"),
        ("'priority'", "priority must be between"),
        ("undo of node 'undo'", "queue must be a name"),
        ("undo of node 'undo'", "JSON-serializable"),
    ]
    assert len(problems) == 2 + len(expected)
    for problem, (node, fragment) in zip(problems[2:], expected, strict=True):
        assert node in problem
        assert fragment in problem


def test_arguments_over_the_limit_are_bad_input(store: InMemoryWorkerStore) -> None:
    wf = Workflow("big", Owner("42"))
    wf.add("big", tasks.noop, args=["x" * 100])
    with override_settings(DJANGO_WORKERS={"ARGS_MAX_BYTES": 50}):
        (problem,) = problems_of(wf, store)
    assert "Node 'big'" in problem
    assert "bytes of JSON" in problem


def test_a_workflow_needs_a_node(store: InMemoryWorkerStore) -> None:
    assert problems_of(Workflow("empty", System()), store) == (
        "A workflow needs at least one node; add one with wf.add(name, task).",
    )


@pytest.mark.parametrize(
    ("deadline", "seconds"), [(2, 2.0), (0.5, 0.5), (timedelta(minutes=10), 600.0), (None, None)]
)
def test_a_deadline_is_seconds_or_a_timedelta_and_not_hashed(
    deadline: object, seconds: float | None, store: InMemoryWorkerStore
) -> None:
    timed = Workflow("timed", System(), deadline=deadline)  # type: ignore[arg-type]
    timed.add("only", tasks.noop)
    plain = Workflow("timed", System())
    plain.add("only", tasks.noop)
    plan = timed.plan(store)
    assert plan.deadline == seconds
    assert plan.plan_hash == plain.plan(store).plan_hash


@pytest.mark.parametrize(
    ("deadline", "problem"),
    [
        (0, "deadline must be more than 0 s and at most"),
        (-1, "deadline must be more than 0 s and at most"),
        (float("nan"), "deadline must be more than 0 s and at most"),
        (timedelta(days=4000), "deadline must be more than 0 s and at most"),
        (True, "deadline must be a number of seconds or a timedelta, got bool."),
        ("60", "deadline must be a number of seconds or a timedelta, got str."),
    ],
)
def test_a_deadline_that_is_not_a_positive_duration_is_bad_input(
    deadline: object, problem: str, store: InMemoryWorkerStore
) -> None:
    wf = Workflow("timed", System(), deadline=deadline)  # type: ignore[arg-type]
    wf.add("only", tasks.noop)
    [found] = problems_of(wf, store)
    assert found.startswith(problem)
    with pytest.raises(InvalidWorkflow):
        wf.submit(store)
    assert store.get_workflow("timed") is None


def test_invalid_workflow_is_bad_input_carrying_its_problems() -> None:
    error = InvalidWorkflow(["one", "two"])
    assert isinstance(error, WorkersError)
    assert isinstance(error, ValueError)
    assert error.problems == ("one", "two")
    assert str(error) == "The workflow is invalid (2 problems):\n- one\n- two"
    assert InvalidWorkflow("only").problems == ("only",)


def test_the_other_workflow_errors_carry_their_data() -> None:
    missing = WorkflowNotFound("42::w")
    assert isinstance(missing, ObjectDoesNotExist)
    assert isinstance(missing, LookupError)
    assert (missing.workflow_id, missing.code) == ("42::w", "not_found")
    exists = WorkflowExists("42::w", "a" * 64, "b" * 64)
    assert (exists.workflow_id, exists.plan_hash, exists.existing_hash) == (
        "42::w",
        "a" * 64,
        "b" * 64,
    )
    assert "different plan" in str(exists)


# -- names, ids, authority --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "A-b_c.9", "x" * 64, "..", "-"])
def test_a_node_name_may_be(name: str, store: InMemoryWorkerStore) -> None:
    wf = Workflow("w", System())
    wf.add(name, tasks.noop)
    assert wf.plan(store).nodes[0].name == name


@pytest.mark.parametrize("name", ["", "x" * 65, "a b", "a:b", "a/b", "é", "a\n", 7, None])
def test_a_node_name_may_not_be(name: object, store: InMemoryWorkerStore) -> None:
    wf = Workflow("w", System())
    wf.add(name, tasks.noop)  # type: ignore[arg-type]
    (problem,) = problems_of(wf, store)
    assert problem.startswith(f"Node name {name!r} must be 1 to 64")


@pytest.mark.parametrize("workflow_id", ["w", "Up-1_b.c", "x" * 128, "indexes", "Index"])
def test_a_workflow_id_may_be(workflow_id: str, store: InMemoryWorkerStore) -> None:
    wf = Workflow(workflow_id, System())
    wf.add("a", tasks.noop)
    assert wf.plan(store).id == workflow_id


@pytest.mark.parametrize(
    "workflow_id", ["", "x" * 129, "a b", "a::b", "a:", "42/x", "ü", "w\n", 12, None]
)
def test_a_workflow_id_may_not_be(workflow_id: object, store: InMemoryWorkerStore) -> None:
    wf = Workflow(workflow_id, Owner("42"))  # type: ignore[arg-type]
    wf.add("a", tasks.noop)
    (problem,) = problems_of(wf, store)
    assert problem.startswith(f"Workflow id {workflow_id!r} must be 1 to 128")


def test_an_owner_workflow_id_is_scoped_like_a_task_id(store: InMemoryWorkerStore) -> None:
    plan = diamond(Owner("42")).plan(store)
    assert (plan.id, plan.key, plan.owner) == ("42::upload-1", "upload-1", "42")
    assert plan.id == scoped_task_key("upload-1", Owner("42"), "user")
    assert owner_of(plan.id) == Owner("42")
    assert diamond(Owner("43")).plan(store).id == "43::upload-1"


def test_a_system_workflow_id_is_global(store: InMemoryWorkerStore) -> None:
    plan = diamond(System()).plan(store)
    assert (plan.id, plan.key, plan.owner) == ("upload-1", "upload-1", None)
    assert owner_of(plan.id) is None


@pytest.mark.parametrize("authority", ["42", None, 42, object()])
def test_authority_is_required_at_the_call(authority: object) -> None:
    with pytest.raises(TypeError, match="authority must be Owner"):
        Workflow("w", authority)  # type: ignore[arg-type]


# -- the queue authorizer ---------------------------------------------------------------------


def test_the_authorizer_is_asked_for_every_node_and_undo(store: InMemoryWorkerStore) -> None:
    asked: list[tuple[str, str]] = []

    def authorizer(queue: str, user_id: str) -> bool:
        asked.append((queue, user_id))
        return True

    set_queue_authorizer(store, authorizer)
    diamond().plan(store)
    assert asked == [("files", "42"), ("default", "42"), ("files", "42")] + [("default", "42")] * 2


@pytest.mark.parametrize(
    ("refused", "where"), [("files", "'upload'"), ("undos", "'files'")], ids=["node", "undo"]
)
def test_a_refused_queue_is_an_authorization_error(
    refused: str, where: str, store: InMemoryWorkerStore
) -> None:
    set_queue_authorizer(store, refuse(refused))
    wf = Workflow("w", Owner("42"))
    wf.add("upload", tasks.noop, queue="files").undo(tasks.noop, queue="undos")
    with pytest.raises(AuthorizationError, match=f"may not submit to queue '{refused}'") as caught:
        wf.plan(store)
    assert isinstance(caught.value, PermissionDenied)
    assert "'w'" in str(caught.value)


def test_every_refused_queue_is_named(store: InMemoryWorkerStore) -> None:
    set_queue_authorizer(store, refuse("files", "default"))
    with pytest.raises(AuthorizationError) as caught:
        diamond().plan(store)
    assert str(caught.value).count("refused by the queue authorizer") == 5


def test_bad_input_is_reported_before_the_authorizer_is_asked(store: InMemoryWorkerStore) -> None:
    asked: list[str] = []

    def authorizer(queue: str, user_id: str) -> bool:
        asked.append(queue)
        return False

    set_queue_authorizer(store, authorizer)
    wf = diamond()
    wf.add("bad name", tasks.noop)
    with pytest.raises(InvalidWorkflow):
        wf.plan(store)
    assert asked == []


def test_system_bypasses_the_authorizer(store: InMemoryWorkerStore) -> None:
    set_queue_authorizer(store, refuse("files", "default"))
    assert diamond(System()).plan(store).id == "upload-1"


def test_without_a_store_the_default_store_authorizes() -> None:
    set_queue_authorizer(default_store(), refuse("files"))
    with pytest.raises(AuthorizationError):
        diamond().plan()


def test_planning_writes_nothing(store: InMemoryWorkerStore) -> None:
    diamond().plan(store)
    assert store.list_tasks(user_id=None) == []


# -- the plan ---------------------------------------------------------------------------------


def test_the_plan_holds_every_checked_field(store: InMemoryWorkerStore) -> None:
    plan = diamond(fail_fast=True, undo_on_cancel=False).plan(store)
    assert (plan.fail_fast, plan.undo_on_cancel) == (True, False)
    assert plan.nodes == (
        NodePlan(
            name="upload",
            deps=(),
            always=False,
            task_path="tests.tasks.add",
            args=[1, 2],
            kwargs={},
            queue="files",
            priority=0,
            options={"retries": 0, "retry_jitter": True},
            undo=None,
        ),
        NodePlan(
            name="thumb",
            deps=("upload",),
            always=False,
            task_path="tests.tasks.add",
            args=[3, 4],
            kwargs={},
            queue="default",
            priority=0,
            options={"retries": 0, "retry_jitter": True},
            undo=UndoPlan(
                task_path="tests.tasks.noop", args=[], kwargs={}, queue="files", options={}
            ),
        ),
        NodePlan(
            name="index",
            deps=("upload",),
            always=False,
            task_path="tests.tasks.noop",
            args=[],
            kwargs={},
            queue="default",
            priority=0,
            options={"retries": 0, "retry_jitter": True},
            undo=None,
        ),
        NodePlan(
            name="email",
            deps=("thumb", "index"),
            always=True,
            task_path="tests.tasks.noop",
            args=[],
            kwargs={"to": "ann", "cc": None},
            queue="default",
            priority=0,
            options={"retries": 0, "retry_jitter": True},
            undo=None,
        ),
    )


EMAIL_BACKEND = {"BACKEND": "django_workers.backends.WorkersBackend", "QUEUES": ["emails"]}


@override_settings(TASKS={"default": EMAIL_BACKEND, "workers": EMAIL_BACKEND})
def test_the_plan_takes_what_a_task_submission_takes(store: InMemoryWorkerStore) -> None:
    wf = Workflow("w", Owner("42"))
    emails = tasks.dj_noop.using(queue_name="emails", priority=7)
    wf.add(
        "a", emails, args=(1, date(2024, 5, 1)), options=TaskOptions(timeout=5, retries=2)
    ).priority(-3)
    wf.add("b", emails).undo(tasks.dj_context, args=[1])
    a, b = wf.plan(store).nodes
    assert (a.task_path, a.queue, a.priority, a.args) == (
        "tests.tasks.dj_noop",
        "emails",
        -3,
        [1, "2024-05-01"],
    )
    assert a.options == {"timeout": 5, "retries": 2, "retry_jitter": True}
    assert b.priority == 7
    assert b.undo == UndoPlan(
        task_path="tests.tasks.dj_context",
        args=[1],
        kwargs={},
        queue="default",
        options={"takes_context": True},
    )


def test_the_plan_is_a_frozen_value(store: InMemoryWorkerStore) -> None:
    wf = diamond()
    plan = wf.plan(store)
    with pytest.raises(AttributeError):
        plan.id = "other"  # type: ignore[misc]
    wf.add("later", tasks.noop)
    assert len(plan.nodes) == 4
    assert plan == diamond().plan(store)


def test_machine_nodes_start_the_machine(store: InMemoryWorkerStore) -> None:
    plan = diamond().plan(store)
    nodes = plan.machine_nodes()
    assert [(n.name, n.deps, n.always, n.has_undo) for n in nodes] == [
        ("upload", (), False, False),
        ("thumb", ("upload",), False, True),
        ("index", ("upload",), False, False),
        ("email", ("thumb", "index"), True, False),
    ]
    first = start(nodes, fail_fast=plan.fail_fast, undo_on_cancel=plan.undo_on_cancel)
    assert first.effects == (Promote("upload"),)


# -- the plan hash ----------------------------------------------------------------------------


def test_the_hash_is_sha256_of_the_documented_encoding(store: InMemoryWorkerStore) -> None:
    wf = Workflow("w", Owner("42"))
    wf.add("a", tasks.noop, kwargs={"b": 1, "a": [2]})
    plan = wf.plan(store)
    expected = (
        '{"encoding":1,"fail_fast":false,"nodes":[{"always":false,"args":[],"deps":[],'
        '"kwargs":{"a":[2],"b":1},"name":"a","options":{"retries":0,"retry_jitter":true},'
        '"priority":0,"queue":"default","task":"tests.tasks.noop","undo":null}],'
        '"undo_on_cancel":true}'
    )
    assert plan.canonical_json() == expected
    assert plan.plan_hash == hashlib.sha256(expected.encode()).hexdigest()
    assert json.loads(plan.canonical_json())["nodes"][0]["name"] == "a"


def test_two_identical_builds_hash_alike(store: InMemoryWorkerStore) -> None:
    assert diamond().plan(store).plan_hash == diamond().plan(store).plan_hash


def test_the_hash_ignores_the_owner_and_dict_order(store: InMemoryWorkerStore) -> None:
    def build(kwargs: dict[str, object], authority: Owner | System) -> str:
        wf = Workflow("w", authority)
        wf.add("a", tasks.noop, kwargs=kwargs)
        return wf.plan(store).plan_hash

    one = build({"x": 1, "y": {"p": 1, "q": 2}}, Owner("42"))
    assert one == build({"y": {"q": 2, "p": 1}, "x": 1}, Owner("43"))
    assert one == build({"y": {"q": 2, "p": 1}, "x": 1}, System())


def test_the_hash_ignores_the_order_of_after_arguments(store: InMemoryWorkerStore) -> None:
    def build(reverse: bool) -> WorkflowPlan:
        wf = Workflow("w", Owner("42"))
        a, b, c = (wf.add(name, tasks.noop) for name in "abc")
        d = wf.add("d", tasks.noop)
        if reverse:
            d.after(c).after(b, a)
        else:
            d.after(a, b, c, a)
        return wf.plan(store)

    assert build(False).nodes[-1].deps == build(True).nodes[-1].deps == ("a", "b", "c")
    assert build(False).plan_hash == build(True).plan_hash


CHANGES: dict[str, Callable[[Workflow], object]] = {
    "a node": lambda wf: wf.add("extra", tasks.noop),
    "a dependency": lambda wf: wf.add("extra", tasks.noop).after(wf._nodes[0]),
    "fail_fast": lambda wf: setattr(wf, "fail_fast", True),
    "undo_on_cancel": lambda wf: setattr(wf, "undo_on_cancel", False),
    "always": lambda wf: wf._nodes[1].always(),
    "priority": lambda wf: wf._nodes[1].priority(1),
    "an undo": lambda wf: wf._nodes[1].undo(tasks.noop),
}


def base(**fields: object) -> Workflow:
    node: dict[str, object] = {
        "task": tasks.add,
        "args": [1, 2],
        "kwargs": {"k": 1},
        "queue": "q",
        "options": TaskOptions(),
    }
    node.update(fields)
    undo = node.pop("undo", {"task": tasks.noop, "args": [], "kwargs": None, "queue": None})
    name = str(node.pop("name", "b"))
    wf = Workflow("w", Owner("42"))
    a = wf.add("a", tasks.noop)
    wf.add(name, **node).after(a)  # type: ignore[arg-type]
    wf.add("c", tasks.noop).undo(**undo)  # type: ignore[arg-type]
    return wf


FIELD_CHANGES = {
    "name": {"name": "b2"},
    "task": {"task": tasks.noop},
    "args": {"args": [1, 3]},
    "args type": {"args": [1, 2.0]},
    "kwargs": {"kwargs": {"k": 2}},
    "queue": {"queue": "r"},
    "options": {"options": TaskOptions(retries=1)},
    "undo task": {"undo": {"task": tasks.add}},
    "undo args": {"undo": {"task": tasks.noop, "args": [1]}},
    "undo kwargs": {"undo": {"task": tasks.noop, "kwargs": {"x": 1}}},
    "undo queue": {"undo": {"task": tasks.noop, "queue": "r"}},
}


@pytest.mark.parametrize("change", FIELD_CHANGES.values(), ids=FIELD_CHANGES.keys())
def test_each_field_changes_the_hash(change: dict[str, object], store: InMemoryWorkerStore) -> None:
    assert base(**change).plan(store).plan_hash != base().plan(store).plan_hash


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
def test_each_flag_changes_the_hash(
    change: Callable[[Workflow], object], store: InMemoryWorkerStore
) -> None:
    wf = base()
    before = wf.plan(store).plan_hash
    change(wf)
    assert wf.plan(store).plan_hash != before


def test_the_order_nodes_were_added_changes_the_hash(store: InMemoryWorkerStore) -> None:
    def build(names: str) -> str:
        wf = Workflow("w", Owner("42"))
        for name in names:
            wf.add(name, tasks.noop)
        return wf.plan(store).plan_hash

    assert build("ab") != build("ba")
