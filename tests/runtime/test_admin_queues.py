"""The admin's queues page: the figures of ``workers status --json``, for who may see workers."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import reverse

from django_workers import System, TaskStatus, cancel_task, clock, submit_task
from django_workers.models import WorkerProcess
from django_workers.stores import default_store
from tests.helpers import end_record, make_user

pytestmark = pytest.mark.django_db

QUEUES = "admin:django_workers_queues"
FIGURE = re.compile(r'data-figure="(\w+)"(?: data-value="([^"]*)")?>([^<]*)<')


def client_of(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def submit(key: str, queue: str) -> str:
    return submit_task(key, "tests.tasks.add", System(), args=[1, 2], scope="global", queue=queue)


def page_figures(body: str) -> dict[str, dict[str, Any]]:
    """Each queue row's figures as the page shows them, by queue name."""
    found: dict[str, dict[str, Any]] = {}
    for row in re.findall(r'<tr class="dw-queue[^"]*" data-queue="([^"]+)">(.*?)</tr>', body, re.S):
        name, cells = row
        figures: dict[str, Any] = {}
        for figure, value, text in FIGURE.findall(cells):
            shown = value if figure in ("limit", "oldest_pending_age") else text
            figures[figure] = None if shown in ("", "-") else float(shown)
        figures["workers"] = re.findall(r'data-worker="([^"]+)"', cells)
        found[name] = figures
    return found


@override_settings(DJANGO_WORKERS={"QUEUES": {"reports": {"concurrency": 1}}})
def test_the_page_shows_what_workers_status_json_reports() -> None:
    store = default_store()
    now = clock.now()
    WorkerProcess.objects.create(
        id="w-mail", host="alpha", pid=11, queues=["emails"], concurrency=3, heartbeat_at=now
    )
    WorkerProcess.objects.create(
        id="w-old", host="beta", pid=22, heartbeat_at=now - timedelta(hours=1)
    )
    for n in range(2):
        submit(f"mail-{n}", "emails")
    end_record(store, submit("done", "emails"), finished_at=now - timedelta(minutes=20))
    end_record(store, submit("broke", "emails"), TaskStatus.FAILED)
    held = submit("held", "reports")
    store.claim("w-old", ["reports"], 1, clock.now())
    cancel_task(held, System())  # its function still runs: the slot stays held
    submit("r", "reports")

    response = client_of(make_user("root", su=True)).get(reverse(QUEUES))

    assert response.status_code == 200
    out = StringIO()
    call_command("workers", "status", "--json", stdout=out)
    reported = {q["queue"]: q for q in json.loads(out.getvalue())["queues"]}
    shown = page_figures(response.content.decode())
    assert set(shown) == set(reported) == {"emails", "reports"}
    for name, figures in shown.items():
        expected = reported[name]
        for figure, value in figures.items():
            if figure == "oldest_pending_age":
                assert (value is None) == (expected[figure] is None)
            else:
                assert value == expected[figure], (name, figure)
    assert shown["emails"]["workers"] == ["w-mail"]
    assert (shown["emails"]["completed_1h"], shown["emails"]["failed_5m"]) == (1, 1)
    assert (shown["reports"]["held_slots"], shown["reports"]["limit"]) == (1, 1)
    assert "no live worker serves this queue" in response.content.decode()


def test_the_page_needs_the_view_permission_of_worker_processes() -> None:
    staff = make_user("sam")
    assert client_of(staff).get(reverse(QUEUES)).status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="view_workerprocess"))
    assert client_of(staff).get(reverse(QUEUES)).status_code == 200
    outsider = client_of(make_user("nick", staff=False))
    assert outsider.get(reverse(QUEUES)).status_code == 302  # to the login page


def test_the_worker_processes_page_links_to_it() -> None:
    page = client_of(make_user("root", su=True)).get(
        reverse("admin:django_workers_workerprocess_changelist")
    )
    assert reverse(QUEUES) in page.content.decode()
