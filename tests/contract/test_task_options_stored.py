"""Task options as every store keeps them: retry rules and declared defaults, by every door."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from django_workers import (
    InvalidTaskOptions,
    InvalidWorkflow,
    Owner,
    TaskNotAllowed,
    TaskOptions,
    TaskSubmission,
    get_task_status,
    submit,
    submit_task,
    submit_tasks,
)
from django_workers.references import TaskRef
from django_workers.stores import WorkerStore
from django_workers.workflows import Workflow
from tests import tasks
from tests.helpers import end_record

ALICE = Owner("alice")
RULES = TaskOptions(
    retries=2,
    timeout=30,
    retry_on=[ConnectionError, "smtplib.SMTPException"],
    retry_never=[tasks.ServiceDown],
)
#: RULES as a record stores them.
STORED = TaskOptions(
    retries=2,
    timeout=30,
    retry_on=["builtins.ConnectionError", "smtplib.SMTPException"],
    retry_never=["tests.tasks.ServiceDown"],
)


def options_of(store: WorkerStore, task_id: str) -> TaskOptions:
    return get_task_status(task_id, ALICE, store=store).options


def test_retry_rules_round_trip_through_a_submit_a_batch_and_a_claim(store: WorkerStore) -> None:
    one = submit_task("one", tasks.add, ALICE, args=[1, 2], options=RULES, store=store)
    batch = submit_tasks(
        [TaskSubmission(key=f"b{n}", task=tasks.add, args=[n, 1], options=RULES) for n in range(3)],
        ALICE,
        store=store,
    )
    for task_id in [one, *batch]:
        assert options_of(store, task_id) == STORED
    claimed = store.claim("w1", None, 10, timezone.now())
    assert len(claimed) == 4
    assert {info.options for info in claimed} == {STORED}


def test_retry_rules_round_trip_through_a_workflow_node_and_its_undo(store: WorkerStore) -> None:
    wf = Workflow("rules", ALICE)
    wf.add("a", tasks.add, args=[1, 2], options=RULES).undo(tasks.noop, options=RULES)
    handle = wf.submit(store)
    [node] = handle.status().nodes
    assert options_of(store, node.task_id) == STORED


def test_the_declared_defaults_apply_by_path_callable_task_handle_and_node(
    store: WorkerStore,
) -> None:
    declared = TaskOptions(
        retries=3, retry_backoff=0.05, retry_jitter=False, retry_on=[ConnectionError], timeout=60
    )
    refs: list[TaskRef] = [
        tasks.retried_on_connection_errors,
        tasks.retried_on_connection_errors.func,
        "tests.tasks.retried_on_connection_errors",
    ]
    ids = [
        submit_task(f"ref-{n}", ref, ALICE, args=["down"], store=store)
        for n, ref in enumerate(refs)
    ]
    ids.append(submit("handle", refs[0], ALICE, args=["down"], store=store).id)
    wf = Workflow("declared", ALICE)
    wf.add("node", refs[2], args=["down"])
    ids += [node.task_id for node in wf.submit(store).status().nodes]
    for task_id in ids:
        assert options_of(store, task_id) == declared


def test_options_given_with_a_call_override_the_declared_ones_field_by_field(
    store: WorkerStore,
) -> None:
    task_id = submit_task(
        "override",
        tasks.retried_on_connection_errors,
        ALICE,
        args=["down"],
        options=TaskOptions(retries=0, timeout=5),
        store=store,
    )
    stored = options_of(store, task_id)
    assert (stored.retries, stored.timeout, stored.retry_backoff, stored.retry_on) == (
        0,
        5,
        0.05,
        ("builtins.ConnectionError",),
    )


def test_a_batch_of_equal_options_that_set_other_fields_is_not_merged_as_one(
    store: WorkerStore,
) -> None:
    task = tasks.retried_on_connection_errors
    # Equal values, but the second sets retries (to 0), which overrides the declared 3.
    ids = submit_tasks(
        [
            TaskSubmission(key="unset", task=task, args=["down"], options=TaskOptions()),
            TaskSubmission(key="zero", task=task, args=["down"], options=TaskOptions(retries=0)),
        ],
        ALICE,
        store=store,
    )
    assert [options_of(store, task_id).retries for task_id in ids] == [3, 0]


def test_an_undo_given_no_options_takes_only_what_its_task_declares(store: WorkerStore) -> None:
    wf = Workflow("undo-defaults", ALICE)
    wf.add("a", tasks.add, args=[1, 2]).undo(tasks.never_retried_on_key_errors)
    wf.add("b", tasks.add, args=[1, 2]).undo(tasks.noop)
    plan = wf.plan(store)
    first, second = (node.undo for node in plan.nodes)
    assert first is not None
    assert second is not None
    assert first.options == {
        "retries": 3,
        "retry_backoff": 0.05,
        "retry_never": ["builtins.KeyError"],
    }
    assert second.options == {}  # the undo's own default retries apply when it is queued


def test_a_bad_exception_path_is_refused_before_anything_is_written(store: WorkerStore) -> None:
    bad = TaskOptions(retry_on=["smtplib.SMTP"])
    with pytest.raises(
        InvalidTaskOptions, match=re.escape("'smtplib.SMTP' is a type, not an exception")
    ):
        submit_task("bad", tasks.add, ALICE, args=[1, 2], options=bad, store=store)
    wf = Workflow("bad-rules", ALICE)
    wf.add("a", tasks.add, args=[1, 2], options=bad)
    with pytest.raises(InvalidWorkflow, match=re.escape("Node 'a': retry_on: 'smtplib.SMTP'")):
        wf.submit(store)
    assert store.list_tasks(user_id=None) == []


def test_a_path_outside_the_task_modules_is_refused_by_every_door(store: WorkerStore) -> None:
    with pytest.raises(TaskNotAllowed, match="TASK_MODULES"):
        submit_task("cwd", "os.getcwd", ALICE, store=store)
    with pytest.raises(TaskNotAllowed):
        submit_tasks([TaskSubmission(key="cwd", task="os.getcwd")], ALICE, store=store)
    wf = Workflow("cwd", ALICE)
    wf.add("a", "os.getcwd")
    with pytest.raises(
        InvalidWorkflow, match=re.escape("Node 'a': 'os.getcwd' is not in a module")
    ):
        wf.submit(store)
    assert store.list_tasks(user_id=None) == []


def test_a_finished_record_keeps_its_retry_rules(store: WorkerStore) -> None:
    task_id = submit_task("kept", tasks.add, ALICE, args=[1, 2], options=RULES, store=store)
    end_record(store, task_id)
    assert options_of(store, task_id) == STORED
