"""The JSON behind the live task and workflow pages: what the page's script puts in place."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.test import Client
from django.urls import reverse

from django_workers import Owner, System, TaskStatus, clock, submit_task, update_progress
from django_workers.stores import default_store
from django_workers.workflows import Workflow, cancel_workflow, get_workflow_status
from tests.helpers import end_record, make_user

pytestmark = pytest.mark.django_db

SCRIPT = "django_workers/admin_live.js"


def client_of(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def task_live(task_id: str) -> str:
    return reverse("admin:django_workers_taskrecord_live", args=[quote(task_id)])


def workflow_live(workflow_id: str) -> str:
    return reverse("admin:django_workers_workflowrecord_live", args=[quote(workflow_id)])


def test_a_running_tasks_page_loads_the_script_and_its_json_follows_the_run() -> None:
    alice = make_user("alice")
    task_id = submit_task("export", "tests.tasks.add", Owner.for_user(alice), args=[1, 2])
    store = default_store()
    [claimed] = store.claim("w1", ["default"], 1, clock.now())
    client = client_of(alice)

    page = client.get(reverse("admin:django_workers_taskrecord_change", args=[quote(task_id)]))
    body = page.content.decode()
    assert SCRIPT in body
    assert f'data-dw-live-url="{task_live(task_id)}"' in body
    assert 'data-dw-ended="0"' in body

    update_progress(claimed, 40)
    now = client.get(task_live(task_id)).json()
    assert (now["status"], now["status_display"]) == ("RUNNING", "Running")
    assert (now["progress"], now["attempts"], now["ended"]) == (40, 1, False)
    # Worded as the page's attempts field, which the script fills in.
    assert now["attempts_display"] == "1 of 1"
    assert "field-attempts_display" in body
    assert 'value="40"' in now["progress_html"]

    end_record(store, task_id)
    assert client.get(task_live(task_id)).json()["ended"] is True
    page = client.get(reverse("admin:django_workers_taskrecord_change", args=[quote(task_id)]))
    assert 'data-dw-ended="1"' in page.content.decode()


def test_the_task_json_is_gated_like_the_page() -> None:
    alice, sam = make_user("alice"), make_user("sam")
    task_id = submit_task("export", "tests.tasks.add", Owner.for_user(alice), args=[1, 2])
    assert client_of(sam).get(task_live(task_id)).status_code == 404
    assert client_of(make_user("nick", staff=False)).get(task_live(task_id)).status_code == 302
    assert Client().get(task_live(task_id)).status_code == 302  # to the login page
    assert client_of(alice).post(task_live(task_id)).status_code == 405


def test_a_workflows_json_carries_its_picture_rows_and_state() -> None:
    grace = make_user("grace")
    wf = Workflow("nightly", Owner.for_user(grace))
    first = wf.add("fetch", "tests.tasks.add", args=[1, 2])
    wf.add("publish", "tests.tasks.add", args=[3, 4]).after(first)
    workflow_id = wf.submit().id
    client = client_of(grace)

    page = client.get(
        reverse("admin:django_workers_workflowrecord_change", args=[quote(workflow_id)])
    ).content.decode()
    assert SCRIPT in page
    assert f'data-dw-live-url="{workflow_live(workflow_id)}"' in page

    now = client.get(workflow_live(workflow_id)).json()
    assert (now["state"], now["ended"]) == ("running", False)
    assert now["picture"].startswith("<svg")
    assert 'data-node="fetch" data-state="pending"' in now["picture"]
    assert now["nodes_html"].count('class="dw-node-row"') == 2
    assert "dw-state-running" in now["state_html"]
    # The rows are the page's own rows.
    assert now["nodes_html"].strip() in page

    node = get_workflow_status(workflow_id, System()).node("fetch")
    end_record(default_store(), node.task_id, TaskStatus.FAILED)
    now = client.get(workflow_live(workflow_id)).json()
    assert now["ended"] is True
    assert client_of(make_user("sam")).get(workflow_live(workflow_id)).status_code == 404


def test_a_pending_cancel_keeps_its_note_and_changes_the_offered_actions() -> None:
    grace = make_user("grace")
    wf = Workflow("nightly", Owner.for_user(grace))
    fetch = wf.add("fetch", "tests.tasks.add", args=[1, 2]).undo("tests.tasks.noop")
    wf.add("publish", "tests.tasks.add", args=[3, 4]).after(fetch)
    workflow_id = wf.submit().id
    client = client_of(grace)
    page = client.get(
        reverse("admin:django_workers_workflowrecord_change", args=[quote(workflow_id)])
    ).content.decode()
    assert 'data-dw-actions="cancel"' in page
    assert client.get(workflow_live(workflow_id)).json()["actions"] == "cancel"

    store = default_store()
    [claimed] = store.claim("w1", ["default"], 1, clock.now())
    assert store.begin_runs([claimed]) == [True]
    cancel_workflow(workflow_id, System())
    now = client.get(workflow_live(workflow_id)).json()
    # The script reloads the page when the actions differ from the page's.
    assert (now["state"], now["actions"], now["ended"]) == ("compensating", "drop-undo", False)
    assert "dw-state-compensating" in now["state_html"]
    assert "Cancel asked" in now["state_html"]  # the note stays when the script puts it in
