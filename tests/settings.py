"""Settings for the test suite; DATABASE_URL picks the database (SQLite when unset)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = "django-workers-tests"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.admin",
    # Serves the admin's CSS to the browser test's live server.
    "django.contrib.staticfiles",
    "rest_framework",
    "django_workers",
    "tests",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.urls"
STATIC_URL = "static/"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]


def _database() -> dict[str, Any]:
    url = os.environ.get("DATABASE_URL")
    if not url:
        # A file, not :memory:, so threads and worker subprocesses share one database.
        # One file per test session (several may run at once); worker subprocesses are
        # pointed at it through WORKERS_SQLITE_PATH.
        default = Path(tempfile.gettempdir()) / f"django-workers-test-{os.getpid()}.sqlite3"
        name = os.environ.get("WORKERS_SQLITE_PATH", str(default))
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": name,
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
            "TEST": {"NAME": name},
        }
    db: dict[str, Any] = {**dj_database_url.parse(url, conn_max_age=0)}
    # A test database per session, so concurrent runs on one server do not collide.
    db["TEST"] = {"NAME": f"test_{db['NAME']}_{os.getpid()}"}
    if db["ENGINE"] == "django.db.backends.mysql":
        import pymysql

        pymysql.install_as_MySQLdb()
        db.setdefault("OPTIONS", {})["charset"] = "utf8mb4"
        db["OPTIONS"]["isolation_level"] = "read committed"
    return db


def _databases() -> dict[str, Any]:
    """``default``, and on PostgreSQL ``listen``: a second alias of the same database.

    ``listen`` is what a LISTEN_DATABASE alias that connects directly would be (in
    tests it mirrors ``default``'s test database). ``WORKERS_TEST_DATABASES``, a JSON
    object of alias -> database URL, adds or replaces aliases, and
    ``WORKERS_TEST_DB_OPTIONS`` (JSON) is merged into ``default``'s OPTIONS: the
    subprocesses of the PgBouncer tests reach the database through a pooler this way.
    """
    default = _database()
    default.setdefault("OPTIONS", {}).update(
        json.loads(os.environ.get("WORKERS_TEST_DB_OPTIONS", "{}"))
    )
    found = {"default": default}
    if "postgresql" in default["ENGINE"]:
        found["listen"] = {**default, "OPTIONS": {}, "TEST": {"MIRROR": "default"}}
    for alias, url in json.loads(os.environ.get("WORKERS_TEST_DATABASES", "{}")).items():
        found[alias] = {**dj_database_url.parse(url, conn_max_age=0), "TEST": {"MIRROR": "default"}}
    return found


DATABASES = _databases()
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

TASKS = {
    "default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"},
    # Fixture tasks declared with @task(backend="workers") are enqueued as task records.
    "workers": {"BACKEND": "django_workers.backends.WorkersBackend"},
}

# Worker subprocesses of the integration tests get short leases and queue limits this way.
DJANGO_WORKERS: dict = json.loads(os.environ.get("WORKERS_TEST_SETTINGS", "{}"))
