"""System checks report misconfiguration at start-up, with a hint."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.test import override_settings

from django_workers import checks
from django_workers.checks import check_sqlite_settings, check_workers_settings
from django_workers.conf import workers_settings


def ids(messages: list) -> list[str]:
    return [m.id for m in messages]


def test_the_test_settings_pass() -> None:
    assert check_workers_settings() == []


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ({"STORE": "no.such.Store"}, "django_workers.E001"),
        ({"QUEUE_AUTHORIZER": "no.such.fn"}, "django_workers.E001"),
        ({"QUEUES": {"reports": {"concurrency": 0}}}, "django_workers.E002"),
        ({"QUEUES": ["reports"]}, "django_workers.E002"),
        ({"HEARTBEAT_INTERVAL": 20, "LEASE_TIMEOUT": 30}, "django_workers.E003"),
    ],
)
def test_a_bad_setting_is_an_error(setting: dict, expected: str) -> None:
    with override_settings(DJANGO_WORKERS=setting):
        found = check_workers_settings()
    workers_settings.reload()
    assert expected in ids(found)
    assert all(m.hint for m in found)


def test_sqlite_without_wal_immediate_and_timeout_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    bare = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "x.sqlite3"}}
    monkeypatch.setattr(checks, "settings", SimpleNamespace(DATABASES=bare))
    found = check_sqlite_settings()
    assert ids(found) == ["django_workers.W001"]
    assert "IMMEDIATE" in found[0].hint
    assert "WAL" in found[0].hint
