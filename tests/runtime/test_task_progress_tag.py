"""``{% task_progress task_id %}``: the box a site's own page shows, and what it reads."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import ImproperlyConfigured
from django.template import Context, Template, TemplateSyntaxError
from django.test import RequestFactory, override_settings

from django_workers import Owner, TaskStatus, submit_task
from django_workers.stores import default_store
from tests.helpers import end_record, make_user

pytestmark = pytest.mark.django_db

TEMPLATE = Template("{% load django_workers %}{% task_progress task_id %}")


def render(user: Any, task_id: str) -> str:
    request = RequestFactory().get("/reports/")
    request.user = user
    return TEMPLATE.render(Context({"request": request, "task_id": task_id}))


def test_a_live_task_gets_its_routes_its_csrf_token_and_the_script() -> None:
    alice = make_user("alice")
    task_id = submit_task("report/1", "tests.tasks.add", Owner.for_user(alice), args=[1, 2])

    html = render(alice, task_id)

    assert f'data-dw-task-url="/workers/tasks/{task_id}/"' in html
    assert f'data-dw-cancel-url="/workers/tasks/{task_id}/actions/cancel"' in html
    assert 'data-dw-csrf="' in html
    assert 'data-dw-csrf=""' not in html
    assert 'data-dw-ended="0"' in html
    assert 'data-dw-can-cancel="1"' in html
    assert '<span class="dw-task-status">PENDING</span>' in html
    assert 'src="/static/django_workers/task_progress.js"' in html


def test_an_ended_task_shows_its_result_or_its_error_and_no_cancel() -> None:
    alice = make_user("alice")
    me = Owner.for_user(alice)
    done = submit_task("done", "tests.tasks.add", me, args=[1, 2])
    end_record(default_store(), done, result={"pages": 3})
    failed = submit_task("failed", "tests.tasks.add", me, args=[1, 2])
    end_record(default_store(), failed, TaskStatus.FAILED)

    shown = render(alice, done)
    assert 'data-dw-ended="1"' in shown
    assert 'data-dw-can-cancel="0"' in shown
    assert "Result: {&quot;pages&quot;: 3}" in shown
    assert "E: failed" in render(alice, failed)


@pytest.mark.parametrize("who", ["stranger", "anonymous"])
def test_a_task_the_user_may_not_see_shows_nothing_of_it(who: str) -> None:
    alice = make_user("alice")
    task_id = submit_task("secret", "tests.tasks.add", Owner.for_user(alice), args=[40, 2])
    end_record(default_store(), task_id, result={"secret": "7f3a"})
    user = make_user("sam") if who == "stranger" else AnonymousUser()

    html = render(user, task_id)

    assert "No such task, or not yours to see." in html
    assert "7f3a" not in html
    assert 'data-dw-can-cancel="0"' in html


def test_the_tag_needs_the_request() -> None:
    with pytest.raises(TemplateSyntaxError, match=r"context_processors\.request"):
        TEMPLATE.render(Context({"task_id": "x"}))


@override_settings(ROOT_URLCONF="tests.urls_admin_only")
def test_the_tag_says_how_to_mount_the_api_it_reads() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"include\('django_workers.urls'\)"):
        render(make_user("alice"), "x")
