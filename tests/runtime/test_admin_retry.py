"""Running a finished task again from the admin: its page's button and the list's action."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import quote
from django.test import Client
from django.urls import reverse

from django_workers import Owner, System, TaskStatus, cancel_task, get_task_status, submit_task
from django_workers.stores import default_store
from tests.helpers import end_record, make_user

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:django_workers_taskrecord_changelist")


def change_url(task_id: str) -> str:
    return reverse("admin:django_workers_taskrecord_change", args=[quote(task_id)])


def retry_url(task_id: str) -> str:
    return reverse("admin:django_workers_taskrecord_retry", args=[quote(task_id)])


def client_of(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def users() -> dict[str, Any]:
    return {
        "owner": make_user("alice"),
        "watcher": make_user("wendy"),
        "stranger": make_user("sam"),
        "manager": make_user("mia", manager=True),
    }


def failed_task(users: dict[str, Any], key: str = "report") -> str:
    alice = Owner.for_user(users["owner"])
    task_id = submit_task(
        key, "tests.tasks.add", alice, args=[1, 2], watchers=[Owner.for_user(users["watcher"])]
    )
    end_record(default_store(), task_id, TaskStatus.FAILED)
    return task_id


@pytest.mark.parametrize("role", ["owner", "manager"])
def test_the_button_runs_a_failed_task_again_for_its_owner_or_a_manager(
    users: dict[str, Any], role: str
) -> None:
    task_id = failed_task(users)
    client = client_of(users[role])
    page = client.get(change_url(task_id)).content.decode()
    assert 'class="button dw-retry"' in page

    response = client.post(retry_url(task_id), follow=True)

    assert response.redirect_chain == [(change_url(task_id), 302)]
    assert "will run again (it was FAILED; new run" in response.content.decode()
    after = get_task_status(task_id, System())
    assert (after.status, after.attempts, after.error) == (TaskStatus.PENDING, 0, None)
    assert after.owner == str(users["owner"].pk)
    assert str(users["watcher"].pk) in after.watchers


def test_a_watcher_sees_no_button_and_is_refused(users: dict[str, Any]) -> None:
    task_id = failed_task(users)
    client = client_of(users["watcher"])
    assert "dw-retry" not in client.get(change_url(task_id)).content.decode()

    response = client.post(retry_url(task_id), follow=True)

    assert "Only the owner of task" in response.content.decode()
    assert get_task_status(task_id, System()).status == TaskStatus.FAILED


def test_a_task_the_user_may_not_see_is_404(users: dict[str, Any]) -> None:
    task_id = failed_task(users)
    assert client_of(users["stranger"]).post(retry_url(task_id)).status_code == 404
    assert client_of(users["manager"]).post(retry_url("nobody::nothing")).status_code == 404
    assert get_task_status(task_id, System()).status == TaskStatus.FAILED


def test_a_live_or_completed_task_has_no_button_and_is_not_run_again(
    users: dict[str, Any],
) -> None:
    alice = Owner.for_user(users["owner"])
    live = submit_task("live", "tests.tasks.add", alice, args=[1, 2])
    done = submit_task("done", "tests.tasks.add", alice, args=[1, 2])
    end_record(default_store(), done)
    client = client_of(users["owner"])
    for task_id, status in [(live, "PENDING"), (done, "COMPLETED")]:
        assert "dw-retry" not in client.get(change_url(task_id)).content.decode()
        response = client.post(retry_url(task_id), follow=True)
        assert f"is {status}: only a FAILED or CANCELLED task runs again" in (
            response.content.decode()
        )


def test_the_button_needs_post_and_csrf(users: dict[str, Any]) -> None:
    task_id = failed_task(users)
    assert client_of(users["owner"]).get(retry_url(task_id)).status_code == 405
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(users["owner"])
    assert strict.post(retry_url(task_id)).status_code == 403
    assert get_task_status(task_id, System()).status == TaskStatus.FAILED


def test_the_action_runs_each_selected_task_again_and_reports_each_outcome(
    users: dict[str, Any],
) -> None:
    failed = failed_task(users, "failed")
    cancelled = submit_task("cancelled", "tests.tasks.add", Owner.for_user(users["owner"]))
    cancel_task(cancelled, System())
    live = submit_task("live", "tests.tasks.add", Owner.for_user(users["owner"]))
    others = failed_task({**users, "owner": users["stranger"]}, "others")

    response = client_of(users["owner"]).post(
        CHANGELIST,
        {"action": "retry_selected", ACTION_CHECKBOX_NAME: [failed, cancelled, live, others]},
        follow=True,
    )

    body = response.content.decode()
    assert f"Running again: {failed}, {cancelled}." in body
    assert f"Not run again, not FAILED or CANCELLED: {live}." in body
    assert "1 selected task(s) not found or not visible to you" in body
    assert others not in body
    statuses = {t: get_task_status(t, System()).status for t in (failed, cancelled, live, others)}
    assert statuses == {
        failed: TaskStatus.PENDING,
        cancelled: TaskStatus.PENDING,
        live: TaskStatus.PENDING,
        others: TaskStatus.FAILED,
    }


def test_the_action_leaves_a_watched_task_to_its_owner(users: dict[str, Any]) -> None:
    task_id = failed_task(users)
    response = client_of(users["watcher"]).post(
        CHANGELIST, {"action": "retry_selected", ACTION_CHECKBOX_NAME: [task_id]}, follow=True
    )
    assert f"Not run again, owned by someone else: {task_id}." in response.content.decode()
    assert get_task_status(task_id, System()).status == TaskStatus.FAILED
