"""``manage.py workers schedules``: every schedule, its state, next and last tick, and its task."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings

from django_workers.periodic.book import book_for
from django_workers.periodic.policy import tick_key
from django_workers.runtime.scheduler import Scheduler
from django_workers.stores.database import DatabaseWorkerStore
from tests.helpers import end_record

pytestmark = pytest.mark.django_db

T0 = datetime(2031, 5, 1, 12, 0, tzinfo=UTC)
SCHEDULES = {
    "rates": {"task": "tests.tasks.noop", "cron": "*/15 * * * *", "timezone": "Europe/Paris"},
    "pulse": {"task": "tests.tasks.add", "every": 30, "args": [1, 2], "owner": "ann"},
    "off": {"task": "tests.tasks.noop", "cron": "@daily", "enabled": False},
}


def workers(*args: str) -> str:
    out = StringIO()
    call_command("workers", "schedules", *args, stdout=out)
    return out.getvalue()


def test_schedules_show_state_next_and_last_tick_and_the_last_task_s_status() -> None:
    store = DatabaseWorkerStore()
    with override_settings(DJANGO_WORKERS={"SCHEDULES": SCHEDULES}):
        scheduler = Scheduler(store)
        scheduler.run_pass(T0 - timedelta(seconds=1))
        assert sorted(scheduler.run_pass(T0 + timedelta(seconds=1))) == [
            f"ann::{tick_key('pulse', T0)}",
            tick_key("rates", T0),
        ]
        end_record(store, tick_key("rates", T0))
        book_for(store).set_paused(["pulse"], True, T0)
        found: Any = {s["key"]: s for s in json.loads(workers("--json"))}
        text = workers()
    assert found["rates"]["state"] == "enabled"
    assert found["rates"]["timing"] == "*/15 * * * * Europe/Paris"
    assert found["rates"]["last_tick"] == T0.isoformat()
    assert found["rates"]["last_status"] == "COMPLETED"
    assert found["rates"]["last_task_id"] == tick_key("rates", T0)
    next_rates = datetime.fromisoformat(found["rates"]["next_tick"])
    assert next_rates.minute % 15 == 0
    assert next_rates > datetime.now(UTC)
    assert (found["pulse"]["state"], found["pulse"]["next_tick"]) == ("paused", None)
    assert (found["pulse"]["owner"], found["pulse"]["last_status"]) == ("ann", "PENDING")
    assert found["off"]["state"] == "disabled"
    assert found["off"]["last_tick"] is None
    lines = text.splitlines()
    assert lines[0].split() == [
        "KEY", "TASK", "WHEN", "CATCH-UP", "STATE", "NEXT", "TICK", "LAST", "TICK", "STATUS"
    ]  # fmt: skip
    assert [line.split()[0] for line in lines[1:]] == ["off", "pulse", "rates"]
    assert "every 30 s" in text


def test_a_row_no_longer_declared_is_shown_as_such() -> None:
    store = DatabaseWorkerStore()
    with override_settings(DJANGO_WORKERS={"SCHEDULES": SCHEDULES}):
        Scheduler(store).run_pass(T0)
    found = {s["key"]: s for s in json.loads(workers("--json"))}
    assert {k: s["state"] for k, s in found.items()} == dict.fromkeys(SCHEDULES, "not declared")


def test_no_schedules_says_so() -> None:
    assert workers().strip() == "No schedules declared."
