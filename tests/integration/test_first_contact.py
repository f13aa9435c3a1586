"""The first mistakes of a new site end in one message that says what to do, and exit non-zero."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.core.management import call_command
from django.db import connection

from django_workers import checks, local_wake
from django_workers.management.commands.runworkers import _wake_up
from tests.worker_processes import ROOT, process_env

pytestmark = pytest.mark.integration

#: A site that uses the backend but forgot to install the app.
WITHOUT_THE_APP = """
import sys
import django
from django.conf import settings
settings.configure(
    INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    TASKS={
        "default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"},
        "workers": {"BACKEND": "django_workers.backends.WorkersBackend"},
    },
    USE_TZ=True,
)
django.setup()
# The site's code imports its tasks (and so django.tasks, which registers the backend checks).
from tests.tasks import dj_meaning_of_life
if sys.argv[1] == "check":
    from django.core.management import call_command
    call_command("check")
else:
    dj_meaning_of_life.enqueue()
"""


def run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)


def runworkers(database_url: str | None, sqlite_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["PYTHONPATH"] = str(ROOT)
    env["WORKERS_SQLITE_PATH"] = str(sqlite_path)
    if database_url:
        env["DATABASE_URL"] = database_url
    command = [sys.executable, "-m", "django", "runworkers", "--burst", "--settings=tests.settings"]
    return run(command, env)


def test_runworkers_on_an_unmigrated_database_says_to_migrate(tmp_path: Path) -> None:
    done = runworkers(None, tmp_path / "never-migrated.sqlite3")
    assert done.returncode == 1
    assert "django_workers.E013" in done.stderr
    assert "python manage.py migrate" in done.stderr
    assert "Traceback" not in done.stderr


def test_runworkers_on_an_unreachable_database_says_what_to_check(tmp_path: Path) -> None:
    # Port 1 on the loopback: nothing listens there, so the connection is refused at once.
    done = runworkers("postgres://postgres@127.0.0.1:1/test", tmp_path / "unused.sqlite3")
    assert done.returncode == 1
    assert "Cannot reach database 'default'" in done.stderr
    assert "Check that the database server is running" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ("check", "django_workers.E010"),
        ("enqueue", "'django_workers' is not in INSTALLED_APPS"),
    ],
)
def test_the_backend_without_the_app_says_to_install_it(action: str, expected: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = run([sys.executable, "-c", WITHOUT_THE_APP, action], env)
    assert done.returncode != 0
    assert expected in done.stderr
    assert "Add 'django_workers' to INSTALLED_APPS" in done.stderr
    assert "app_label" not in done.stderr


@pytest.mark.django_db(transaction=True)
def test_runworkers_refuses_to_start_on_a_settings_error() -> None:
    env = {**process_env(), "WORKERS_TEST_SETTINGS": json.dumps({"LEASE_TIMEOUT": "30"})}
    command = [sys.executable, "-m", "django", "runworkers", "--burst", "--settings=tests.settings"]
    done = run(command, env)
    assert done.returncode == 1
    assert "django_workers.E006" in done.stderr
    assert (
        "['LEASE_TIMEOUT'] must be a number of seconds > 0 and at most 315360000 (ten years), "
        "got '30'"
    ) in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.django_db(transaction=True)
def test_runworkers_shows_the_sqlite_warning_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    bare = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "x.sqlite3"}}
    monkeypatch.setattr(checks, "settings", SimpleNamespace(DATABASES=bare, DJANGO_WORKERS={}))
    out, err = io.StringIO(), io.StringIO()
    call_command("runworkers", "--burst", skip_checks=False, stdout=out, stderr=err)
    assert "django_workers.W001" in err.getvalue()


@pytest.mark.django_db(transaction=True)
def test_runworkers_says_how_an_idle_worker_learns_of_new_work() -> None:
    out = io.StringIO()
    command = ["runworkers", "--burst", "--poll-interval", "0.5"]
    call_command(*command, stdout=out, stderr=io.StringIO())
    lines = [line.strip() for line in out.getvalue().splitlines()]
    wake_up = next(line for line in lines if line.startswith("wake-up:")).split(None, 1)[1]
    if connection.vendor == "postgresql":
        assert wake_up == "LISTEN/NOTIFY"
    elif connection.vendor == "sqlite":
        folder = local_wake.wake_dir(connection.settings_dict["NAME"])
        assert wake_up == f"same-host socket in {folder}, polling every 0.5 s as fallback"
    else:
        assert wake_up == "polling every 0.5 s"


def test_runworkers_says_it_polls_where_the_socket_path_would_be_too_long() -> None:
    class LongPath:
        def listen_params(self) -> None:
            return None

        def wake_file(self) -> str:
            return "/srv/" + "a" * 90 + "/db.sqlite3"

    folder = local_wake.wake_dir(LongPath().wake_file())
    expected = f"polling every 0.5 s (a socket path in {folder} would be too long)"
    assert _wake_up(LongPath(), 0.5) == expected


def test_migrate_creates_the_tables_that_runworkers_asks_for(tmp_path: Path) -> None:
    sqlite_path = tmp_path / "fresh.sqlite3"
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["PYTHONPATH"] = str(ROOT)
    env["WORKERS_SQLITE_PATH"] = str(sqlite_path)
    # migrate runs the database checks before migrating: none may stop it on a fresh database.
    migrate = [sys.executable, "-m", "django", "migrate", "--settings=tests.settings"]
    done = run(migrate, env)
    assert done.returncode == 0, done.stderr
    assert runworkers(None, sqlite_path).returncode == 0
