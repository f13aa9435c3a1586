"""System checks report misconfiguration at start-up, with a hint."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder
from django.test import override_settings

from django_workers import checks
from django_workers.backends import WorkersBackend, check_tasks_backend
from django_workers.checks import check_sqlite_settings, check_workers_settings
from django_workers.conf import queue_limits, workers_settings
from django_workers.database_checks import check_migrations_applied


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
        ({"QUEUES": {"reports": 1}}, "django_workers.E002"),
        ({"QUEUES": {"reports": {"concurrency": "2"}}}, "django_workers.E002"),
        ({"QUEUES": {"reports": {"concurrency": True}}}, "django_workers.E002"),
        ({"QUEUES": {"reports": {"concurency": 1}}}, "django_workers.E008"),
        ({"QUEUES": {"exports": {"fair": "yes"}}}, "django_workers.E002"),
        ({"QUEUES": {"exports": {"fair": True, "per_owner": 0}}}, "django_workers.E002"),
        ({"QUEUES": {"exports": {"per_owner": 2}}}, "django_workers.E002"),
        ({"HEARTBEAT_INTERVAL": 20, "LEASE_TIMEOUT": 30}, "django_workers.E003"),
        ({"STORE": 3}, "django_workers.E001"),
        ({"CONCURRENCY": 8}, "django_workers.E005"),
        ({"QUEUE": {}}, "django_workers.E005"),
        ({"LEASE_TIMEOUT": "30"}, "django_workers.E006"),
        ({"HEARTBEAT_INTERVAL": None}, "django_workers.E006"),
        ({"POLL_INTERVAL": 0}, "django_workers.E006"),
        ({"POLL_INTERVAL": -1}, "django_workers.E006"),
        ({"PROGRESS_THROTTLE": -0.5}, "django_workers.E006"),
        ({"RETRY_BACKOFF": float("nan")}, "django_workers.E006"),
        ({"RETRY_BACKOFF_MAX": "5m"}, "django_workers.E006"),
        ({"CLEANUP_INTERVAL": 0}, "django_workers.E006"),
        ({"RESULT_MAX_BYTES": "big"}, "django_workers.E007"),
        ({"ARGS_MAX_BYTES": 0}, "django_workers.E007"),
        ({"ARGS_MAX_BYTES": 1.5}, "django_workers.E007"),
        ({"CLEANUP_BATCH": False}, "django_workers.E007"),
        ({"ONLY_LISTED_QUEUES": "yes"}, "django_workers.E009"),
        ({"DATABASE": "nowhere"}, "django_workers.E011"),
        ({"DATABASE": ["default"]}, "django_workers.E011"),
        ({"RETENTION": {"DONE": 60}}, "django_workers.E012"),
        ({"RETENTION": {"FAILED": "forever"}}, "django_workers.E012"),
        ({"RETENTION": {"FAILED": -1}}, "django_workers.E012"),
        ({"RETENTION": 86400}, "django_workers.E012"),
        # Past what the machinery carries: a wait, a date, a database integer.
        ({"QUEUES": {"reports": {"concurrency": 10_001}}}, "django_workers.E002"),
        ({"QUEUES": {"reports": {"concurrency": 2**40}}}, "django_workers.E002"),
        ({"LEASE_TIMEOUT": 1e10, "HEARTBEAT_INTERVAL": 5}, "django_workers.E006"),
        ({"POLL_INTERVAL": 1e300}, "django_workers.E006"),
        ({"RETRY_BACKOFF": 1e300}, "django_workers.E006"),
        ({"RETRY_BACKOFF_MAX": 315_360_001}, "django_workers.E006"),
        ({"CLEANUP_INTERVAL": float("inf")}, "django_workers.E006"),
        ({"CLEANUP_BATCH": 2**31}, "django_workers.E007"),
        ({"RESULT_MAX_BYTES": 10**20}, "django_workers.E007"),
        ({"RETENTION": {"FAILED": 1e12}}, "django_workers.E012"),
        (
            {"SCHEDULES": {"a": {"task": "tests.tasks.noop", "every": 10**10}}},
            "django_workers.E017",
        ),
        ({"SCHEDULES": {"a": {"task": "tests." + "t" * 300, "every": 5}}}, "django_workers.E018"),
    ],
)
def test_a_bad_setting_is_an_error(setting: dict, expected: str) -> None:
    with override_settings(DJANGO_WORKERS=setting):
        found = check_workers_settings()
        check_sqlite_settings()  # reads DATABASE too, and must not raise either
        queue_limits()
    assert expected in ids(found)
    assert all(m.hint for m in found)
    assert all(m.is_serious() for m in found)


@pytest.mark.parametrize(
    "setting",
    [
        {"QUEUES": {"reports": {"concurrency": 2}}, "ONLY_LISTED_QUEUES": True},
        {"QUEUES": {"exports": {"fair": True, "per_owner": 2, "concurrency": 8}}},
        {"RETENTION": {"FAILED": None}, "POLL_INTERVAL": 1, "ARGS_MAX_BYTES": 10},
    ],
)
def test_good_settings_pass(setting: dict) -> None:
    with override_settings(DJANGO_WORKERS=setting):
        assert check_workers_settings() == []


def test_each_wrong_value_gets_its_own_error() -> None:
    with override_settings(DJANGO_WORKERS={"LEASE_TIMEOUT": "30", "POLL_INTERVAL": 0}):
        found = check_workers_settings()
    assert ids(found) == ["django_workers.E006", "django_workers.E006"]
    assert "'LEASE_TIMEOUT'" in found[0].msg
    assert "'POLL_INTERVAL'" in found[1].msg


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [("CONCURRENCY", None), ("QUEUE", "QUEUES"), ("poll_interval", "POLL_INTERVAL")],
)
def test_an_unknown_key_suggests_the_closest_one(key: str, suggestion: str | None) -> None:
    with override_settings(DJANGO_WORKERS={key: 1}):
        (found,) = check_workers_settings()
    assert repr(key) in found.msg
    assert found.hint is not None
    if suggestion:
        assert f"Did you mean {suggestion!r}?" in found.hint
    else:
        assert "Did you mean" not in found.hint


def test_an_unknown_queue_key_suggests_concurrency() -> None:
    with override_settings(DJANGO_WORKERS={"QUEUES": {"reports": {"concurency": 1}}}):
        (found,) = check_workers_settings()
    assert found.hint is not None
    assert "Did you mean 'concurrency'?" in found.hint


@pytest.mark.parametrize("setting", [["QUEUES"], "QUEUES", 42])
def test_settings_that_are_not_a_dict_are_an_error_not_a_crash(setting: object) -> None:
    with override_settings(DJANGO_WORKERS=setting):
        assert ids(check_workers_settings()) == ["django_workers.E004"]
        assert workers_settings.POLL_INTERVAL == 0.2  # reads fall back to the defaults
        assert queue_limits() == {}


@pytest.mark.django_db
def test_the_settings_check_runs_under_plain_check() -> None:
    with (
        override_settings(DJANGO_WORKERS={"CONCURRENCY": 8}),
        pytest.raises(SystemCheckError, match="E005"),
    ):
        call_command("check")


@pytest.mark.django_db
def test_the_migrations_check_passes_on_a_migrated_database() -> None:
    assert check_migrations_applied(databases=["default"]) == []
    assert check_migrations_applied() == []  # not asked for a database: nothing to say


@pytest.mark.django_db
def test_the_migrations_check_sees_one_migration_missing_from_the_record() -> None:
    # The quick path compares the migration files with django_migrations; a file not
    # recorded sends it to the full plan, which reports it.
    recorder = MigrationRecorder(connection)
    latest = max(name for app, name in recorder.applied_migrations() if app == "django_workers")
    recorder.record_unapplied("django_workers", latest)
    try:
        problems = check_migrations_applied(databases=["default"])
    finally:
        recorder.record_applied("django_workers", latest)
    assert [p.id for p in problems] == ["django_workers.E013"]
    assert check_migrations_applied(databases=["default"]) == []


def test_sqlite_without_wal_immediate_and_timeout_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    bare = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "x.sqlite3"}}
    monkeypatch.setattr(checks, "settings", SimpleNamespace(DATABASES=bare))
    found = check_sqlite_settings()
    assert ids(found) == ["django_workers.W001"]
    assert found[0].hint is not None
    assert "IMMEDIATE" in found[0].hint
    assert "WAL" in found[0].hint


@pytest.mark.django_db
def test_the_sqlite_warning_shows_under_plain_check(monkeypatch: pytest.MonkeyPatch) -> None:
    bare = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "x.sqlite3"}}
    monkeypatch.setattr(checks, "settings", SimpleNamespace(DATABASES=bare, DJANGO_WORKERS={}))
    out = io.StringIO()
    call_command("check", stdout=out, stderr=out)
    assert "django_workers.W001" in out.getvalue()


# -- TASKS ----------------------------------------------------------------------------------

IMMEDIATE = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}


class SiteBackend(WorkersBackend):
    """A site's own subclass counts as django-workers' backend."""


def test_no_workers_backend_in_tasks_warns_where_enqueue_goes() -> None:
    with override_settings(TASKS=IMMEDIATE):
        found = check_tasks_backend()
    assert ids(found) == ["django_workers.W002"]
    assert "ImmediateBackend" in found[0].msg
    assert found[0].hint is not None
    assert "django_workers.backends.WorkersBackend" in found[0].hint
    assert "SILENCED_SYSTEM_CHECKS" in found[0].hint


@pytest.mark.parametrize(
    "backend", ["django_workers.backends.WorkersBackend", f"{__name__}.SiteBackend"]
)
def test_any_alias_with_the_workers_backend_passes(backend: str) -> None:
    with override_settings(TASKS={**IMMEDIATE, "workers": {"BACKEND": backend}}):
        assert check_tasks_backend() == []


def test_a_backend_that_does_not_import_is_left_to_djangos_checks() -> None:
    with override_settings(TASKS={"default": {"BACKEND": "no.such.Backend"}}):
        assert ids(check_tasks_backend()) == ["django_workers.W002"]


def test_the_tasks_warning_shows_under_plain_check() -> None:
    out = io.StringIO()
    with override_settings(TASKS=IMMEDIATE):
        call_command("check", stdout=out, stderr=out)
    assert "django_workers.W002" in out.getvalue()


# -- LISTEN_DATABASE ------------------------------------------------------------------------

PG = {"ENGINE": "django.db.backends.postgresql", "NAME": "shop", "HOST": "db", "PORT": 5432}


def listen_check(monkeypatch: pytest.MonkeyPatch, databases: dict, listen: object) -> list:
    """check_workers_settings() with these DATABASES and DJANGO_WORKERS['LISTEN_DATABASE']."""
    from django.db.utils import ConnectionHandler

    user = {"LISTEN_DATABASE": listen}
    monkeypatch.setattr(
        checks, "settings", SimpleNamespace(DATABASES=databases, DJANGO_WORKERS=user)
    )
    monkeypatch.setattr(checks, "connections", ConnectionHandler(databases))
    with override_settings(DJANGO_WORKERS=user):
        return [m for m in check_workers_settings() if m.id == "django_workers.E020"]


@pytest.mark.parametrize("listen", [None, False])
def test_listen_database_none_or_false_pass(listen: object) -> None:
    with override_settings(DJANGO_WORKERS={"LISTEN_DATABASE": listen}):
        assert check_workers_settings() == []


def test_listen_database_may_name_the_main_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    assert listen_check(monkeypatch, {"default": PG}, "default") == []


@pytest.mark.parametrize("listen", ["nowhere", 3, True])
def test_listen_database_must_be_an_alias(listen: object) -> None:
    with override_settings(DJANGO_WORKERS={"LISTEN_DATABASE": listen}):
        [error] = check_workers_settings()
    assert error.id == "django_workers.E020"
    assert "is not a database alias of this site" in error.msg
    assert error.hint is not None
    assert "False to poll" in error.hint


@pytest.mark.parametrize(
    ("databases", "problem"),
    [
        (
            {"default": PG, "direct": {"ENGINE": "django.db.backends.sqlite3", "NAME": "x"}},
            "DATABASES['direct'] is not PostgreSQL",
        ),
        (
            {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "x"}, "direct": PG},
            "DATABASES['default'] is not PostgreSQL",
        ),
        (
            {"default": PG, "direct": {**PG, "NAME": "other"}},
            "names database 'other' on the server of DATABASE 'default', which names 'shop'",
        ),
    ],
)
def test_listen_database_must_reach_the_same_postgresql_database(
    monkeypatch: pytest.MonkeyPatch, databases: dict, problem: str
) -> None:
    [error] = listen_check(monkeypatch, databases, "direct")
    assert problem in error.msg
    assert "install/#behind-pgbouncer" in error.hint


@pytest.mark.parametrize(
    "direct",
    [
        {**PG, "PORT": 6432, "NAME": "shop_session"},  # a pooler may name it otherwise
        {**PG, "PORT": "5432", "OPTIONS": {"sslmode": "require"}},
    ],
)
def test_listen_database_on_another_route_to_the_database_passes(
    monkeypatch: pytest.MonkeyPatch, direct: dict
) -> None:
    assert listen_check(monkeypatch, {"default": PG, "direct": direct}, "direct") == []
