"""The schedules' admin page: who sees which schedule, what it shows, and the pause switch."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission, User
from django.test import Client, override_settings
from django.urls import reverse

from django_workers.models import ScheduleRecord
from django_workers.runtime.scheduler import Scheduler
from django_workers.stores import default_store

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:django_workers_schedulerecord_changelist")
T0 = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)


def client_of(name: str, *, manager: bool = False) -> Client:
    user = User.objects.create_user(name, is_staff=True)
    if manager:
        user.user_permissions.add(Permission.objects.get(codename="manage_all_tasks"))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def rows() -> None:
    owner = str(User.objects.create_user("ann").pk)
    schedules = {
        "site-wide": {"task": "tests.tasks.noop", "cron": "*/5 * * * *"},
        "anns": {"task": "tests.tasks.noop", "every": 60, "owner": owner},
    }
    with override_settings(DJANGO_WORKERS={"SCHEDULES": schedules}):
        scheduler = Scheduler(default_store())
        scheduler.run_pass(T0 - timedelta(seconds=1))
        scheduler.run_pass(T0 + timedelta(seconds=1))


@pytest.mark.usefixtures("rows")
def test_a_manager_sees_every_schedule_with_its_next_and_last_tick_and_pauses_one() -> None:
    client = client_of("mia", manager=True)
    page = client.get(CHANGELIST).content.decode()
    assert "site-wide" in page
    assert "anns" in page
    assert "*/5 * * * * UTC" in page
    assert "Pause selected schedules" in page
    assert "PENDING" in page  # the last tick's task, linked
    response = client.post(
        CHANGELIST, {"action": "pause_selected", ACTION_CHECKBOX_NAME: ["site-wide"]}, follow=True
    )
    assert "Paused 1 of 1 selected schedule(s)." in response.content.decode()
    assert ScheduleRecord.objects.get(pk="site-wide").paused
    assert not ScheduleRecord.objects.get(pk="anns").paused
    client.post(CHANGELIST, {"action": "resume_selected", ACTION_CHECKBOX_NAME: ["site-wide"]})
    resumed = ScheduleRecord.objects.get(pk="site-wide")
    assert not resumed.paused
    assert resumed.fires_after > T0


@pytest.mark.usefixtures("rows")
def test_a_staff_user_sees_only_their_own_schedules_and_cannot_pause() -> None:
    ann = User.objects.get(username="ann")
    ann.is_staff = True
    ann.save()
    client = Client()
    client.force_login(ann)
    page = client.get(CHANGELIST).content.decode()
    assert "anns" in page
    assert "site-wide" not in page
    assert "Pause selected schedules" not in page
    client.post(CHANGELIST, {"action": "pause_selected", ACTION_CHECKBOX_NAME: ["anns"]})
    assert not ScheduleRecord.objects.get(pk="anns").paused
    assert client_of("sam").get(CHANGELIST).content.decode().count("site-wide") == 0
