"""Every column holds the longest value the system accepts or makes, on every store.

SQLite keeps any length, PostgreSQL and MySQL refuse a value wider than its
varchar: these run the longest names through the real write paths.
"""

from __future__ import annotations

import pytest

from django_workers import Owner, System, TaskStatus, clock, get_task_status, lifecycle, submit_task
from django_workers.authority import KEY_MAX_LENGTH, OWNER_MAX_LENGTH, TASK_ID_MAX_LENGTH
from django_workers.bounds import (
    NODE_LABEL_MAX_LENGTH,
    NODE_NAME_MAX_LENGTH,
    QUEUE_MAX_LENGTH,
    TASK_PATH_MAX_LENGTH,
)
from django_workers.engine.records import UNDO_SUFFIX, node_key
from django_workers.models import TaskRecord
from django_workers.stores import WorkerStore
from django_workers.workflows import Workflow
from django_workers.workflows.builder import ID_PATTERN
from tests import tasks
from tests.tasks import noop

WORKER = "w-widths"
LONGEST_NAME = "n" * NODE_NAME_MAX_LENGTH


def test_the_node_column_holds_the_longest_name_with_its_undo_suffix() -> None:
    width = TaskRecord._meta.get_field("node").max_length
    assert width is not None
    assert width >= NODE_NAME_MAX_LENGTH + len(UNDO_SUFFIX)
    assert width == NODE_LABEL_MAX_LENGTH


def test_the_longest_workflow_ids_node_keys_fit_a_task_key_and_id() -> None:
    longest_id = int(ID_PATTERN.pattern.rsplit(",", 1)[1].rstrip("}"))
    key = node_key("w" * longest_id, LONGEST_NAME, undo=True)
    assert len(key) <= KEY_MAX_LENGTH
    assert OWNER_MAX_LENGTH + 2 + len(key) <= TASK_ID_MAX_LENGTH
    workflow_width = TaskRecord._meta.get_field("workflow").max_length
    assert workflow_width is not None
    assert OWNER_MAX_LENGTH + 2 + longest_id <= workflow_width


@pytest.mark.parametrize("authority", [System(), Owner("u" * OWNER_MAX_LENGTH)], ids=str)
def test_the_undo_of_a_node_with_the_longest_name_runs(
    store: WorkerStore, authority: Owner | System
) -> None:
    # The undo's record is written with the node's label and ":undo" when its node
    # fails after it: a column too narrow refused that write on PostgreSQL and MySQL.
    wf = Workflow("w" * 128, authority)
    first = wf.add(LONGEST_NAME, noop, queue="q.first").undo(noop, queue="q.undo")
    wf.add("second", noop, queue="q.second").after(first)
    handle = wf.submit(store=store)
    for queue, status in (("q.first", TaskStatus.COMPLETED), ("q.second", TaskStatus.FAILED)):
        [run] = store.claim(WORKER, [queue], 1, clock.now())
        assert store.begin_runs([run]) == [True]
        assert store.end_tasks([lifecycle.run_end(run, WORKER, status, clock.now())]) == [True]
    [undo] = store.claim(WORKER, ["q.undo"], 1, clock.now())
    assert undo.node == LONGEST_NAME + UNDO_SUFFIX
    assert store.end_tasks([lifecycle.run_end(undo, WORKER, TaskStatus.COMPLETED, clock.now())])
    assert handle.status().state == "compensated"


def test_the_longest_key_owner_queue_and_path_are_stored(
    store: WorkerStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = Owner("o" * OWNER_MAX_LENGTH)
    name = "f" * (TASK_PATH_MAX_LENGTH - len("tests.tasks."))
    monkeypatch.setattr(tasks, name, tasks.noop, raising=False)
    task_id = submit_task(
        "k" * KEY_MAX_LENGTH,
        f"tests.tasks.{name}",
        owner,
        queue="q" * QUEUE_MAX_LENGTH,
        store=store,
    )
    info = get_task_status(task_id, owner, store=store)
    assert len(info.id) == TASK_ID_MAX_LENGTH
    assert len(info.queue) == QUEUE_MAX_LENGTH
    assert len(info.task_path) == TASK_PATH_MAX_LENGTH
    assert TaskRecord._meta.get_field("task_path").max_length == TASK_PATH_MAX_LENGTH
    assert TaskRecord._meta.get_field("queue").max_length == QUEUE_MAX_LENGTH
